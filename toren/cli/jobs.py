"""``toren jobs``: list, show, receipt and cancel runs (no agent directories needed)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from toren.cli.common import with_database
from toren.cli.output import JSON_OPTION_HELP, console, print_json
from toren.cli.render import receipt_tables, run_summary, run_tree

app = typer.Typer(help="Runs: list, show, receipt, cancel.", no_args_is_help=True)
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
RunArgument = Annotated[str, typer.Argument(help="The run id.")]




@app.command("list")
def list_runs(
    agent: Annotated[str | None, typer.Option(help="Only this agent's runs.")] = None,
    status: Annotated[str | None, typer.Option(
        help="Only runs with this status (queued, running, completed, stopped, failed, "
             "cancelled).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """List runs, newest first."""
    runs = with_database(lambda rt: rt.list_runs(agent=agent, status=status, limit=limit))
    if as_json:
        print_json({"runs": [run.to_json() for run in runs]})
        return
    table = Table()
    table.add_column("run", no_wrap=True)
    for column in ("agent", "status", "stop reason", "created"):
        table.add_column(column)
    for run in runs:
        created = run.created_at.strftime("%Y-%m-%d %H:%M:%S") if run.created_at else ""
        table.add_row(run.id, run.agent, run.status, run.stop_reason or "", created)
    console.print(table)


PromptsOption = Annotated[bool, typer.Option(
    "--prompts", help="Also show the system prompt each task ran with (kept by the store).")]


@app.command("show")
def show(run_id: RunArgument, as_json: JsonOption = False,
         prompts: PromptsOption = False) -> None:
    """A run: status, stop reason, output, steps, tokens, cost, latest error; as a tree."""
    receipt: dict[str, Any] = with_database(lambda rt: rt.receipt(run_id))
    if as_json:
        print_json(receipt["run"] | {"totals": receipt["totals"], "why": receipt["why"],
                                     "tasks": [_task_brief(t) for t in receipt["tasks"]]}
                   | ({"prompts": receipt["prompts"]} if prompts else {}))
        return
    console.print(run_summary(receipt))
    if receipt["run"]["output"] is not None:
        console.print()
        console.print(str(receipt["run"]["output"]), markup=False)
    console.print()
    console.print(run_tree(receipt))
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
    data: dict[str, Any] = with_database(lambda rt: rt.receipt(run_id))
    if as_json:
        print_json(data)
        return
    console.print(run_summary(data))
    for table in receipt_tables(data):
        console.print(table)


@app.command("cancel")
def cancel(
    run_id: RunArgument,
    reason: Annotated[str, typer.Option(help="Recorded in the run's log.")] =
        "cancelled from the CLI",
    as_json: JsonOption = False,
) -> None:
    """Cancel a run now; its queued work and retries become no-ops."""
    record = with_database(lambda rt: rt.cancel_run(run_id, reason))
    if as_json:
        print_json(record.to_json())
    else:
        console.print(f"run {record.id}: {record.status}"
                      + (f" ({record.stop_reason})" if record.stop_reason else ""))
