"""Commands that installed plugins add to ``toren`` (plugin API 1.5): the entry points of the
group ``toren.commands``, one per command, named as the command and pointing at a function
(one command) or a ``typer.Typer`` (a group)::

    [project.entry-points."toren.commands"]
    queue = "toren_sqs.commands:app"

Their names are read from stevedore's entry-point cache without importing anything; a
command's module is imported when that command runs, or when ``toren --help`` lists it. The
older ``register_commands`` hook still works (``toren.cli.group``), but needs every plugin
imported first, so ``toren --help`` does not list what it adds.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from toren.errors import PluginError
from toren.seams.load_plugins import parse_load_plugins

#: The entry-point group of the plugins' commands.
ENTRY_POINT_GROUP = "toren.commands"


@dataclass(frozen=True)
class PluginCommand:
    """A command a plugin declares: its name and ``module:attribute`` target."""

    name: str
    target: str
    entry_point: metadata.EntryPoint


def declared_commands(env: Mapping[str, str] | None = None) -> dict[str, PluginCommand]:
    """The installed plugins' commands by name, none of them imported. With
    ``TOREN_LOAD_PLUGINS`` set, only those of the distributions it lets load (named by the
    distribution or by one of its ``toren`` plugin entry points). Two distributions declaring
    one name is a ``PluginError`` naming both."""
    allowed = parse_load_plugins((os.environ if env is None else env).get("TOREN_LOAD_PLUGINS"))
    if allowed is None:
        from stevedore import NamedExtensionManager

        # names=[]: stevedore reads its cache of the entry points and imports none of them
        found = NamedExtensionManager(ENTRY_POINT_GROUP, names=[]).list_entry_points()
    else:
        found = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)
                 if ep.dist is not None and _lets_load(ep.dist, set(allowed))]
    commands: dict[str, PluginCommand] = {}
    for ep in found:
        seen = commands.get(ep.name)
        if seen is not None and seen.target != ep.value:
            raise PluginError(
                f"two plugins declare the command {ep.name!r} ({seen.target} and {ep.value}); "
                "uninstall one, or leave one out with TOREN_LOAD_PLUGINS")
        commands[ep.name] = PluginCommand(ep.name, ep.value, ep)
    return commands


def installed_commands() -> list[dict[str, str]]:
    """Every installed plugin's command with its distribution (for ``toren plugins``)."""
    return [{"name": ep.name, "target": ep.value,
             "distribution": ep.dist.name if ep.dist else "?",
             "version": ep.dist.version if ep.dist else "?"}
            for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)]


def load_command(command: PluginCommand) -> Any:
    """What ``command``'s entry point names (a function or a ``typer.Typer``), its module
    imported now. A module that fails to import, a target that is neither, or a plugin API
    range this kernel is outside of is a ``PluginError`` naming the distribution."""
    try:
        target = command.entry_point.load()
    except Exception as exc:
        raise PluginError(
            f"the command {command.name!r} of {distribution_of(command)} failed to load "
            f"({command.target}): {type(exc).__name__}: {exc}") from exc
    import typer

    if not (isinstance(target, typer.Typer) or callable(target)):
        raise PluginError(
            f"the command {command.name!r} of {distribution_of(command)} points at "
            f"{command.target}, which is neither a function nor a typer.Typer")
    from toren.seams.plugin_api import check_extension_api

    check_extension_api(_Loaded(command.entry_point), f"the command {command.name!r}",
                        "leave its distribution out with TOREN_LOAD_PLUGINS")
    return target


def distribution_of(command: PluginCommand) -> str:
    """The distribution that declares ``command``, for messages (looked up only for them:
    stevedore's cached entry points do not carry it)."""
    if command.entry_point.dist is not None:
        return command.entry_point.dist.name
    package = command.target.partition(":")[0].partition(".")[0]
    names = metadata.packages_distributions().get(package, [])
    return names[0] if names else f"the plugin that declares {command.target}"


class _Loaded:
    """What ``check_extension_api`` reads of a loaded extension: the module it checks is the
    one the entry point names (a ``typer.Typer``'s own ``__module__`` is typer's)."""

    def __init__(self, entry_point: metadata.EntryPoint) -> None:
        self.entry_point = entry_point
        self.plugin = SimpleNamespace(__module__=entry_point.module)


def _lets_load(dist: metadata.Distribution, allowed: set[str]) -> bool:
    if dist.name in allowed:
        return True
    return any(ep.name in allowed for ep in dist.entry_points if ep.group == "toren")
