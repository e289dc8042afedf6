"""``toren plugins``: what is installed, from which distribution, and what it registers."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from toren.cli.output import JSON_OPTION_HELP, print_json, print_table, safe
from toren.cli.plugin_commands import installed_commands
from toren.config import Settings
from toren.seams.drivers import installed_drivers
from toren.seams.plugins import PluginHost


def plugins(as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False
            ) -> None:
    """List installed plugins and drivers."""
    host = PluginHost(Settings.from_env().load_plugins)
    listed = [info.to_json() for info in host.info.values()]
    drivers = installed_drivers()
    commands = installed_commands()
    if as_json:
        print_json({"plugins": listed, "drivers": drivers, "commands": commands})
        return
    table = Table(title="Plugins (entry-point group 'toren')")
    for column in ("plugin", "distribution", "version", "plugin API", "registers"):
        table.add_column(column)
    for info in listed:
        registers = []
        for kind in ("models", "tools", "channels"):
            if info[kind]:
                registers.append(f"{kind}: {', '.join(info[kind])}")
        if info.get("toolSources"):
            registers.append(f"tool sources: {', '.join(info['toolSources'])} (agent.yaml)")
        if info.get("embedders"):
            registers.append(f"embedders: {', '.join(info['embedders'])} (memory.embeddings)")
        if "register_commands" in info["hooks"]:
            registers.append("CLI commands (register_commands: deprecated since plugin API 1.5, "
                             "not listed by toren --help; declare toren.commands entry points)")
        registers += ["HTTP routes"] if "register_routes" in info["hooks"] else []
        policy = [hook for hook in info["hooks"] if not hook.startswith("register_")]
        if policy:  # asked only for agents whose policies: list the plugin
            registers.append(f"policy hooks: {', '.join(policy)} (agent.yaml policies:)")
        if "unavailable" in info:
            registers = [f"nothing: unavailable: {info['unavailable']}"]
        name = safe(info["name"]) + (" (built-in)" if info["default"] else "")
        table.add_row(name, safe(info["distribution"]), safe(info["version"]),
                      safe(info["api"] or "-"), safe("; ".join(registers) or "-"))
    print_table(table)
    drivers_table = Table(title="Drivers (chosen by TOREN_STORE, TOREN_QUEUE, TOREN_RUNTIME, "
                                "TOREN_TRACER, the scheme of TOREN_ARCHIVE)")
    for column in ("kind", "name", "distribution", "version"):
        drivers_table.add_column(column)
    for row in drivers:
        drivers_table.add_row(*(safe(row[key]) for key in ("kind", "name", "distribution",
                                                            "version")))
    print_table(drivers_table)
    if commands:
        commands_table = Table(title="Commands (entry-point group 'toren.commands')")
        for column in ("command", "target", "distribution", "version"):
            commands_table.add_column(column)
        for row in commands:
            commands_table.add_row(safe("toren " + row["name"]), *(
                safe(row[key]) for key in ("target", "distribution", "version")))
        print_table(commands_table)
