"""The kernel's version (``toren.__version__``): its own module, so that the modules the package
root imports can read it without importing the root."""

__version__ = "0.1.0"

#: The plugin API's version (``toren.plugin.API_VERSION``): its major number changes when a
#: name of ``toren.plugin`` is removed or changes meaning, its minor one when names are added
#: (docs/reference/versioning.md). A plugin declares the range it supports
#: (``TOREN_PLUGIN_API``) and is refused outside it.
PLUGIN_API_VERSION = "1.7"
