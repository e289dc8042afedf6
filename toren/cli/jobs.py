"""``toren jobs``: list, show, receipt and cancel runs (no agent directories needed)."""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from toren.cli.common import with_database
from toren.cli.output import JSON_OPTION_HELP, console, plain, print_json, print_table, safe
from toren.cli.render import children_tree, receipt_tables, run_summary, run_tree
from toren.core.runs import RunRecord
from toren.errors import RunNotFound, TorenError
from toren.host.runtime import Runtime

app = typer.Typer(help="Runs: list, show, receipt, cancel.", no_args_is_help=True)
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
RunArgument = Annotated[str, typer.Argument(
    metavar="RUN_ID", help="The run's id, or the start of it (unique among the runs).")]
#: Runs read per query while looking for the runs whose id starts with a prefix.
_PAGE = 1000
#: Candidates named in the error for an ambiguous prefix.
_SHOWN_CANDIDATES = 10


class AmbiguousRunId(TorenError):
    """More than one run's id starts with that prefix."""

    code = "ambiguous_run_id"
    http_status = 400


async def resolve_run_id(runtime: Runtime, id_or_prefix: str) -> str:
    """The id of the one run whose id is ``id_or_prefix`` or starts with it.

    ``RunNotFound`` if none does, ``AmbiguousRunId`` (listing the candidates) if several do.
    A whole id is looked up directly; a prefix reads the runs' ids, newest first.
    """
    text = id_or_prefix.strip().lower()
    try:
        return str(uuid.UUID(text))
    except ValueError:
        pass
    if not re.fullmatch(r"[0-9a-f][0-9a-f-]{0,35}", text):
        raise RunNotFound(f"{id_or_prefix!r} is not a run id or the start of one (run ids look "
                          "like ec03889c-c557-...); see `toren jobs list`")
    matches: list[RunRecord] = []
    before: tuple[datetime, str] | None = None
    while True:
        page = await runtime.store.list_runs(limit=_PAGE, before=before)
        matches += [run for run in page if run.id.startswith(text)]
        last = page[-1] if page else None
        if len(page) < _PAGE or last is None or last.created_at is None:
            break
        before = (last.created_at, last.id)
    if not matches:
        raise RunNotFound(f"no run id starts with {text!r} in this database "
                          "(see `toren jobs list`)")
    if len(matches) > 1:
        shown = "; ".join(f"{run.id} ({run.agent}, {run.status}, {_created(run)})"
                          for run in matches[:_SHOWN_CANDIDATES])
        more = len(matches) - _SHOWN_CANDIDATES
        raise AmbiguousRunId(f"{len(matches)} runs have ids starting with {text!r}: {shown}"
                             + (f"; and {more} more" if more > 0 else "")
                             + ". Give more of the id")
    return matches[0].id


def _created(run: RunRecord) -> str:
    return run.created_at.strftime("%Y-%m-%d %H:%M:%S") if run.created_at else ""


@app.command("list")
def list_runs(
    agent: Annotated[str | None, typer.Option(metavar="NAME",
                                              help="Only this agent's runs.")] = None,
    status: Annotated[str | None, typer.Option(
        metavar="STATUS",
        help="Only runs with this status (queued, running, awaiting_input, "
             "awaiting_approval, completed, stopped, failed, cancelled).")] = None,
    limit: Annotated[int, typer.Option(metavar="N", min=1, max=1000,
                                       help="At most this many.")] = 50,
    schedule: Annotated[str | None, typer.Option(
        metavar="NAME", help="Only runs this schedule started (see `toren schedules`).")] = None,
    as_json: JsonOption = False,
) -> None:
    """List runs, newest first, with the schedule that started each (if one did)."""
    runs = with_database(lambda rt: rt.list_runs(agent=agent, status=status, limit=limit,
                                                 schedule=schedule))
    if as_json:
        print_json({"runs": [run.to_json() for run in runs]})
        return
    table = Table()
    table.add_column("run", no_wrap=True)
    for column in ("agent", "status", "stop reason", "schedule", "created"):
        table.add_column(column)
    for run in runs:
        table.add_row(safe(run.id), safe(run.agent), run.status, run.stop_reason or "",
                      safe(run.schedule or ""), _created(run))
    print_table(table)


PromptsOption = Annotated[bool, typer.Option(
    "--prompts", help="Also show the system prompt each task ran with (kept by the store).")]


@app.command("show")
def show(run_id: RunArgument, as_json: JsonOption = False,
         prompts: PromptsOption = False) -> None:
    """A run: status, stop reason, output, steps, tokens, cost, latest error; as a tree."""

    async def read(runtime: Runtime) -> dict[str, Any]:
        found = await resolve_run_id(runtime, run_id)
        children = [child.to_json() for child in await runtime.children(found)]
        return await runtime.receipt(found) | {"children": children}

    receipt: dict[str, Any] = with_database(read)
    costs = {call["run_id"]: call["cost_usd"] for call in receipt["peer_calls"]}
    for child in receipt["children"]:
        child["cost_usd"] = costs.get(child["id"])
    if as_json:
        print_json(receipt["run"] | {"totals": receipt["totals"], "why": receipt["why"],
                                     "budget": receipt["budget"],
                                     "tasks": [_task_brief(t) for t in receipt["tasks"]],
                                     "peer_calls": receipt["peer_calls"],
                                     "children": receipt["children"]}
                   | ({"prompts": receipt["prompts"]} if prompts else {}))
        return
    print_table(run_summary(receipt))
    if receipt["run"]["output"] is not None:
        console.print()
        console.print(plain(receipt["run"]["output"]), markup=False)
    console.print()
    console.print(run_tree(receipt))
    if receipt["children"]:
        console.print()
        console.print(children_tree(receipt["run"]["id"], receipt["children"]))
    if prompts:
        for digest, tasks in _tasks_by_prompt(receipt).items():
            console.print()
            console.print(f"[bold]system prompt[/] of {', '.join(tasks)} (sha256 {digest[:12]})")
            text = receipt["prompts"].get(digest)
            console.print(text if text is not None else "(not kept: the task started before "
                          "Toren kept prompts)", markup=False)


def _tasks_by_prompt(receipt: dict[str, Any]) -> dict[str, list[str]]:
    tasks: dict[str, list[str]] = {}
    for task in receipt["tasks"]:
        if task["prompt_sha256"] is not None:
            tasks.setdefault(task["prompt_sha256"], []).append(f"task {task['task_id']}")
    return tasks


def _task_brief(task: dict[str, Any]) -> dict[str, Any]:
    keys = ("task_id", "wave", "subagent", "model", "prompt_sha256", "status", "stop_reason",
            "error", "steps", "resumes", "totals")
    return {key: task[key] for key in keys}


@app.command("receipt")
def receipt(run_id: RunArgument, as_json: JsonOption = False) -> None:
    """Every model call (tokens, cost, latency, replayed) and tool call of a run, and totals."""

    async def read(runtime: Runtime) -> dict[str, Any]:
        return await runtime.receipt(await resolve_run_id(runtime, run_id))

    data: dict[str, Any] = with_database(read)
    if as_json:
        print_json(data)
        return
    print_table(run_summary(data))
    for table in receipt_tables(data):
        print_table(table)


@app.command("cancel")
def cancel(
    run_id: RunArgument,
    reason: Annotated[str, typer.Option(metavar="TEXT", help="Recorded in the run's log.")] =
        "cancelled from the CLI",
    as_json: JsonOption = False,
) -> None:
    """Cancel a run now; its queued work and retries become no-ops."""

    async def cancel_it(runtime: Runtime) -> RunRecord:
        return await runtime.cancel_run(await resolve_run_id(runtime, run_id), reason)

    record = with_database(cancel_it)
    if as_json:
        print_json(record.to_json())
    else:
        console.print(f"run {safe(record.id)}: {record.status}"
                      + (f" ({record.stop_reason})" if record.stop_reason else ""))
