"""The entry point (group ``toren``, name ``sandbox``): registers the sandbox's tools."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from toren import hookimpl
from toren_sandbox.config import UNSAFE_ENV, check_available

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
#: 1.2: toren.plugin.ToolResult (read_file shows images and PDFs).
TOREN_PLUGIN_API = ">=1.2,<2"

log = logging.getLogger(__name__)
GROUP = "sandbox"


@hookimpl
def register_tools(register: Callable[..., None]) -> None:
    """Register ``bash``, ``read_file``, ``write_file`` and ``edit_file`` in the group
    ``sandbox``; where bubblewrap is missing register nothing and say why, naming the package
    (``SandboxUnavailable``: Toren logs it, and an agent enabling these tools fails to load with
    it), unless ``TOREN_SANDBOX_UNSAFE=1``."""
    # imported here, not at the top: every `toren` command (--help too) imports this module,
    # and the tools pull in the workspace's store and the worker
    from toren_sandbox import tools

    tools.ISOLATED = check_available()
    if not tools.ISOLATED:
        log.warning("%s=1 and bubblewrap is not installed: the sandbox's bash runs commands "
                    "WITHOUT ISOLATION, as this worker's user, able to read and change "
                    "everything it can. Use this only on a machine you would give the model "
                    "a shell on.", UNSAFE_ENV)
    functions: list[Callable[..., Any]] = [tools.bash, tools.read_file, tools.write_file,
                                           tools.edit_file]
    for function in functions:
        register(function, group=GROUP)
