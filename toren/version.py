"""The kernel's version (``toren.__version__``): its own module, so that the modules the package
root imports can read it without importing the root."""

__version__ = "0.1.0"
