"""``toren schedules``: list, show, pause, resume and trigger the schedules of agent.yaml."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from rich.table import Table

from toren.cli.common import DirsOption, load_runtime, run_async, stop_runtime, with_database
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe
from toren.core.schedules import ScheduleRecord
from toren.host.runtime import Runtime
from toren.seams.store.schedules import FiredSlot

app = typer.Typer(help="Schedules (schedules: in agent.yaml): list, show, pause, resume, "
                       "trigger.", no_args_is_help=True)
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
AgentArgument = Annotated[str, typer.Argument(
    metavar="AGENT", help="The agent (the `name:` in its agent.yaml).")]
NameArgument = Annotated[str, typer.Argument(
    metavar="NAME", help="The schedule's `name:` in the agent's schedules:.")]


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z") if moment else ""


@app.command("list")
def list_schedules(
    agent: Annotated[str | None, typer.Option(metavar="NAME",
                                              help="Only this agent's schedules.")] = None,
    as_json: JsonOption = False,
) -> None:
    """List every schedule in the database: state (active, paused, removed), next slot, last."""
    schedules = with_database(lambda rt: rt.list_schedules(agent))
    if as_json:
        print_json({"schedules": [schedule.to_json() for schedule in schedules]})
        return
    if not schedules:
        console.print("No schedules: add schedules: to an agent.yaml and start a worker "
                      "(see docs/guides/scheduling.md).")
        return
    table = Table()
    for column in ("agent", "schedule", "cron", "time zone", "state", "next", "last fired"):
        table.add_column(column, no_wrap=column in ("next", "last fired"))
    for s in schedules:
        table.add_row(safe(s.agent), safe(s.name), safe(s.cron), safe(s.timezone), s.state,
                      _when(s.next_fire_at) if s.state == "active" else "",
                      _when(s.last_fired_at))
    print_table(table)


def _print_schedule(schedule: ScheduleRecord, as_json: bool) -> None:
    if as_json:
        print_json(schedule.to_json())
        return
    table = Table(show_header=False)
    table.add_column("field")
    table.add_column("value")
    data = schedule.to_json()
    for key in ("agent", "name", "cron", "timezone", "state", "missed", "catchupLimit",
                "next_fire_at", "last_fired_at", "last_slot_at", "skipped_slots"):
        table.add_row(key, safe("" if data[key] is None else str(data[key])))
    print_table(table)
    if schedule.fires:
        fires = Table(title="recent fires")
        for column in ("slot", "trigger", "run"):
            fires.add_column(column, no_wrap=True)
        for fire in schedule.fires:
            fires.add_row(fire["slot_at"], fire["trigger"], fire["run_id"])
        print_table(fires)


@app.command("show")
def show(agent: AgentArgument, name: NameArgument, as_json: JsonOption = False) -> None:
    """One schedule, with its most recent fires and the runs they started."""
    _print_schedule(with_database(lambda rt: rt.get_schedule(agent, name)), as_json)


@app.command("pause")
def pause(agent: AgentArgument, name: NameArgument, as_json: JsonOption = False) -> None:
    """Stop a schedule from firing (until resumed; kept across restarts and deploys)."""
    _print_schedule(with_database(lambda rt: rt.pause_schedule(agent, name)), as_json)


@app.command("resume")
def resume(agent: AgentArgument, name: NameArgument, as_json: JsonOption = False) -> None:
    """Fire a paused schedule again, from its next slot (the slots it missed are skipped)."""
    _print_schedule(with_database(lambda rt: rt.resume_schedule(agent, name)), as_json)


@app.command("trigger")
def trigger(agent: AgentArgument, name: NameArgument, dirs: DirsOption = None,
            as_json: JsonOption = False) -> None:
    """Start a run of a schedule now (even while paused); a worker executes it."""
    runtime = load_runtime(dirs, agent)

    async def go(runtime: Runtime) -> FiredSlot:
        await runtime.start(workers=False)
        try:
            return await runtime.trigger_schedule(agent, name)
        finally:
            await stop_runtime(runtime, quiet=True)

    fired = run_async(go(runtime))
    if as_json:
        print_json({"agent": fired.agent, "schedule": fired.schedule, "run_id": fired.run_id,
                    "slot_at": fired.slot_at.isoformat(), "trigger": fired.trigger})
        return
    console.print(f"schedule {safe(name)} of {safe(agent)} fired: run {fired.run_id} (see "
                  f"`toren jobs show {fired.run_id[:8]}`)")
