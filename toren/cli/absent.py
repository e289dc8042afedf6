"""Commands that plugins provide, for when they are absent: ``toren mcp`` without toren-mcp
says what to install instead of typer's "No such command"."""

from __future__ import annotations

import importlib.metadata as metadata
from collections.abc import Callable
from typing import Any

import typer

from toren.errors import PluginNotInstalled

#: Commands of the distributions Toren documents -> (what they are, the distribution).
PLUGIN_COMMANDS: dict[str, tuple[str, str]] = {
    "mcp": ("the MCP channel", "toren-mcp"),
    "queue": ("the SQS queue commands", "toren-sqs"),
}


def absent_command(name: str) -> Any:
    """A hidden stand-in for ``name`` when it is a command of ``PLUGIN_COMMANDS`` that no
    loaded plugin provides (``toren.cli.group`` asks once every other source missed), else
    ``None``. The stand-in accepts any arguments and raises ``PluginNotInstalled`` (exit 1,
    one line)."""
    if name not in PLUGIN_COMMANDS:
        return None
    what, distribution = PLUGIN_COMMANDS[name]
    stand_in = typer.Typer()
    stand_in.command(name, hidden=True, add_help_option=False,
                     context_settings={"allow_extra_args": True,
                                       "ignore_unknown_options": True})(
        _stand_in(what, distribution))
    return typer.main.get_command(stand_in)


def not_installed(what: str, distribution: str) -> PluginNotInstalled:
    """The error for a command of ``distribution`` that is not loaded: not installed, or
    installed but left out by ``TOREN_LOAD_PLUGINS``."""
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return PluginNotInstalled(f"{what} is not installed: pip install {distribution}")
    return PluginNotInstalled(f"{what} ({distribution}) is installed but not loaded: add "
                              f"{distribution} to TOREN_LOAD_PLUGINS, or unset it to load "
                              "every installed plugin")


def _stand_in(what: str, distribution: str) -> Callable[[], None]:
    def command() -> None:
        raise not_installed(what, distribution)

    command.__doc__ = f"Not installed: pip install {distribution}."
    return command
