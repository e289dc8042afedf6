"""``toren``'s top-level command group, which imports a command only when it is used.

The kernel's commands come from ``toren.cli.command_table``, the plugins' from their
``toren.commands`` entry points (``toren.cli.plugin_commands``); ``toren --help`` lists both
from the table's summaries and the plugins' command modules, so it imports neither the
runtime nor any other command. A name neither knows is looked for in what plugins add
through the older ``register_commands`` hook (every plugin imported, once), then in the
stand-ins of ``toren.cli.absent``, which say what to install.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import typer
from typer.core import TyperGroup

from toren.cli.command_table import BY_NAME, KERNEL_COMMANDS
from toren.errors import PluginError

log = logging.getLogger("toren.cli")


class LazyCommands(MutableMapping[str, Any]):
    """The group's commands by name: every name is known up front, a command is built at its
    first lookup by ``load`` (``None``: no such command) and kept. Iterating builds them
    all; ``keys()`` on its own builds none (typer suggests close names from it)."""

    def __init__(self, names: Callable[[], list[str]], load: Callable[[str], Any]) -> None:
        self._names = names
        self._load = load
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            command = self._load(name)
            if command is None:
                raise KeyError(name)
            self._built[name] = command
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        names = self._names()
        yield from names
        yield from (name for name in list(self._built) if name not in names)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def is_built(self, name: str) -> bool:
        """Whether ``name``'s command was built already (listing it needs no import then)."""
        return name in self._built

    def __contains__(self, name: object) -> bool:
        return name in self._built or name in self._names()


class TorenGroup(TyperGroup):
    """The ``toren`` group (``typer.Typer(cls=TorenGroup)`` in ``toren.cli``). ``tidy`` is
    applied to each command as it is built (``toren.cli._tidy_help``)."""

    tidy: Callable[[Any], None] = staticmethod(lambda command: None)

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._listing = False
        self._secrets_resolved = False
        self._plugins: dict[str, Any] | None = None
        self._hooked: dict[str, Any] | None = None
        self.lazy = LazyCommands(self._all_names, self._build)
        self.commands = self.lazy

    def list_commands(self, ctx: Any) -> list[str]:
        return self._all_names()

    def get_command(self, ctx: Any, name: str) -> Any:
        if self._listing and not self.lazy.is_built(name):
            if name in BY_NAME:
                return _summary_only(BY_NAME[name].name, BY_NAME[name].summary)
            try:
                return self.commands.get(name)
            except PluginError as exc:  # the list still shows, and says what is broken
                return _summary_only(name, f"Failed to load: {exc.message}")
        return self.commands.get(name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        # A command is about to run (``toren --help`` never gets here): secret references in
        # the environment (``TOREN_SECRETS``, ``VAR=aws-sm:...``) become their values before
        # its module or a plugin's is imported and before any setting is read; ``toren
        # worker`` and ``toren serve`` read them again on SIGHUP (``toren.seams.secrets``).
        if not self._secrets_resolved:
            from toren.seams.secrets import resolve_at_startup

            resolve_at_startup(os.environ)
            self._secrets_resolved = True
        return super().resolve_command(ctx, args)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        # the kernel's commands are listed from the table, not imported
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def plugin_commands(self) -> dict[str, Any]:
        """The plugins' declared commands (``toren.cli.plugin_commands``), read once."""
        if self._plugins is None:
            from toren.cli.plugin_commands import declared_commands

            self._plugins = declared_commands()
            for name in self._plugins:
                if name in BY_NAME:
                    from toren.cli.plugin_commands import distribution_of

                    raise PluginError(
                        f"{distribution_of(self._plugins[name])} declares the command "
                        f"{name!r}, which is Toren's own; uninstall it, or leave it out "
                        "with TOREN_LOAD_PLUGINS")
        return self._plugins

    def _all_names(self) -> list[str]:
        names = [command.name for command in KERNEL_COMMANDS]
        return names + sorted(name for name in self.plugin_commands() if name not in BY_NAME)

    def _build(self, name: str) -> Any:
        kernel = BY_NAME.get(name)
        if kernel is not None:
            command = _click_command(name, _import(kernel.target))
        elif name in self.plugin_commands():
            from toren.cli.plugin_commands import load_command

            command = _click_command(name, load_command(self.plugin_commands()[name]))
        else:
            command = self._hook_commands().get(name)
            if command is None:
                from toren.cli.absent import absent_command

                return absent_command(name)
            log.warning("`toren %s` comes from a plugin's register_commands hook, deprecated "
                        "since plugin API 1.5: `toren --help` does not list it; the plugin "
                        "should declare it in the toren.commands entry-point group "
                        "(docs/reference/plugins.md#commands)", name)
        type(self).tidy(command)
        return command

    def _hook_commands(self) -> dict[str, Any]:
        """What plugins add through ``register_commands``: every plugin imported, once."""
        if self._hooked is None:
            from toren.config import Settings
            from toren.seams.plugins import PluginHost

            app = typer.Typer()
            PluginHost(Settings.from_env().load_plugins, collect=False).add_commands(app)
            self._hooked = {}
            if app.registered_commands or app.registered_groups:
                self._hooked = dict(typer.main.get_group(app).commands)
            for name in self._hooked:
                if name in BY_NAME or name in self.plugin_commands():
                    raise PluginError(f"a plugin's register_commands adds the command {name!r}, "
                                      "which already exists; uninstall the plugin, or leave "
                                      "it out with TOREN_LOAD_PLUGINS")
        return self._hooked


def _import(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _click_command(name: str, target: Any) -> Any:
    """The click command typer builds for ``target``: a ``typer.Typer``'s group, or one
    command of a function."""
    command: Any
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)
    else:
        app = typer.Typer()
        app.command(name)(target)
        command = typer.main.get_command(app)
    command.name = name
    return command


def _summary_only(name: str, summary: str) -> Any:
    """A stand-in for listing a command in ``toren --help``: its name and summary only."""
    from typer.core import TyperCommand

    return TyperCommand(name, help=summary)
