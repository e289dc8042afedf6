"""``toren schedules``: list, show, pause, resume and trigger the schedules of agent.yaml."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from toren.cli.common import DirsOption
from toren.cli.operator import UrlOption, operate
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe

app = typer.Typer(help="Schedules (schedules: in agent.yaml): list, show, pause, resume, "
                       "trigger.", no_args_is_help=True)
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
AgentArgument = Annotated[str, typer.Argument(
    metavar="AGENT", help="The agent (the `name:` in its agent.yaml).")]
NameArgument = Annotated[str, typer.Argument(
    metavar="NAME", help="The schedule's `name:` in the agent's schedules:.")]


def _when(moment: str | None) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM:SS UTC`` (the JSON's times are UTC)."""
    return str(moment)[:19].replace("T", " ") + " UTC" if moment else ""


@app.command("list")
def list_schedules(
    agent: Annotated[str | None, typer.Option(metavar="NAME",
                                              help="Only this agent's schedules.")] = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
) -> None:
    """List every schedule in the database: state (active, paused, removed), next slot, last."""
    schedules = operate(lambda op: op.list_schedules(agent), url=url)
    if as_json:
        print_json({"schedules": schedules})
        return
    if not schedules:
        console.print("No schedules: add schedules: to an agent.yaml and start a worker "
                      "(see docs/guides/scheduling.md).")
        return
    table = Table()
    for column in ("agent", "schedule", "cron", "time zone", "state", "next", "last fired"):
        table.add_column(column, no_wrap=column in ("next", "last fired"))
    for s in schedules:
        table.add_row(safe(s["agent"]), safe(s["name"]), safe(s["cron"]), safe(s["timezone"]),
                      s["state"], _when(s["next_fire_at"]) if s["state"] == "active" else "",
                      _when(s["last_fired_at"]))
    print_table(table)


def _print_schedule(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(data)
        return
    table = Table(show_header=False)
    table.add_column("field")
    table.add_column("value")
    for key in ("agent", "name", "cron", "timezone", "state", "missed", "catchupLimit",
                "next_fire_at", "last_fired_at", "last_slot_at", "skipped_slots"):
        table.add_row(key, safe("" if data[key] is None else str(data[key])))
    print_table(table)
    if data["fires"]:
        fires = Table(title="recent fires")
        for column in ("slot", "trigger", "run"):
            fires.add_column(column, no_wrap=True)
        for fire in data["fires"]:
            fires.add_row(fire["slot_at"], fire["trigger"], fire["run_id"])
        print_table(fires)


@app.command("show")
def show(agent: AgentArgument, name: NameArgument, as_json: JsonOption = False,
         url: UrlOption = None) -> None:
    """One schedule, with its most recent fires and the runs they started."""
    _print_schedule(operate(lambda op: op.schedule_action("get", agent, name), url=url),
                    as_json)


@app.command("pause")
def pause(agent: AgentArgument, name: NameArgument, as_json: JsonOption = False,
          url: UrlOption = None) -> None:
    """Stop a schedule from firing (until resumed; kept across restarts and deploys)."""
    _print_schedule(operate(lambda op: op.schedule_action("pause", agent, name), url=url),
                    as_json)


@app.command("resume")
def resume(agent: AgentArgument, name: NameArgument, as_json: JsonOption = False,
           url: UrlOption = None) -> None:
    """Fire a paused schedule again, from its next slot (the slots it missed are skipped)."""
    _print_schedule(operate(lambda op: op.schedule_action("resume", agent, name), url=url),
                    as_json)


@app.command("trigger")
def trigger(agent: AgentArgument, name: NameArgument, dirs: DirsOption = None,
            as_json: JsonOption = False, url: UrlOption = None) -> None:
    """Start a run of a schedule now (even while paused); a worker executes it."""
    fired = operate(lambda op: op.schedule_action("trigger", agent, name), url=url, dirs=dirs,
                    agent=agent)
    if as_json:
        print_json(fired)
        return
    console.print(f"schedule {safe(name)} of {safe(agent)} fired: run {fired['run_id']} (see "
                  f"`toren jobs show {fired['run_id'][:8]}`)")
