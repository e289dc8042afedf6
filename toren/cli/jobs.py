"""``toren jobs``: list, show, receipt and cancel runs (no agent directories needed)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from toren.cli import fork
from toren.cli.operator import Operator, UrlOption, created, operate
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe
from toren.cli.render import children_tree, output_text, receipt_tables, run_summary, run_tree

app = typer.Typer(help="Runs: list, show, receipt, cancel.", no_args_is_help=True)
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
fork.register(app)  # toren jobs fork, toren jobs diff
RunArgument = Annotated[str, typer.Argument(
    metavar="RUN_ID", help="The run's id, or the start of it (unique among the runs).")]


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
    url: UrlOption = None,
    archived: Annotated[bool, typer.Option(
        "--archived", help="List archived runs instead (retention; see `toren db archive`)."
    )] = False,
) -> None:
    """List runs, newest first, with the schedule that started each (if one did)."""
    if archived:
        list_archived(agent, limit, as_json, url)
        return
    runs = operate(lambda op: op.list_runs(agent=agent, status=status, limit=limit,
                                           schedule=schedule), url=url)
    if as_json:
        print_json({"runs": runs})
        return
    table = Table()
    table.add_column("run", no_wrap=True)
    for column in ("agent", "status", "stop reason", "schedule", "created"):
        table.add_column(column)
    for run in runs:
        table.add_row(safe(run["id"]), safe(run["agent"]), run["status"],
                      run["stop_reason"] or "", safe(run.get("schedule") or ""), created(run))
    print_table(table)


PromptsOption = Annotated[bool, typer.Option(
    "--prompts", help="Also show the system prompt each task ran with (kept by the store).")]


@app.command("show")
def show(run_id: RunArgument, as_json: JsonOption = False,
         prompts: PromptsOption = False, url: UrlOption = None) -> None:
    """A run: status, stop reason, output, steps, tokens, cost, latest error; as a tree."""

    async def read(operator: Operator) -> dict[str, Any]:
        found = await operator.resolve_run_id(run_id)
        data = await operator.receipt(found)
        return data | {"children": await operator.children(found)}

    receipt: dict[str, Any] = operate(read, url=url)
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
        console.print(output_text(receipt["run"]["output"]), markup=False)
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
def receipt(run_id: RunArgument, as_json: JsonOption = False,
            url: UrlOption = None) -> None:
    """Every model call (tokens, cost, latency, replayed) and tool call of a run, and totals."""

    async def read(operator: Operator) -> dict[str, Any]:
        return await operator.receipt(await operator.resolve_run_id(run_id))

    data: dict[str, Any] = operate(read, url=url)
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
    url: UrlOption = None,
) -> None:
    """Cancel a run now; its queued work and retries become no-ops."""

    async def cancel_it(operator: Operator) -> dict[str, Any]:
        return await operator.cancel_run(await operator.resolve_run_id(run_id), reason)

    record = operate(cancel_it, url=url)
    if as_json:
        print_json(record)
    else:
        console.print(f"run {safe(record['id'])}: {record['status']}"
                      + (f" ({record['stop_reason']})" if record["stop_reason"] else ""))


def list_archived(agent: str | None, limit: int, as_json: bool, url: str | None) -> None:
    """``toren jobs list --archived``: archived runs, newest first, with their summary."""
    runs = operate(lambda op: op.list_archived_runs(agent=agent, limit=limit), url=url)
    if as_json:
        print_json({"runs": runs})
        return
    table = Table()
    table.add_column("run", no_wrap=True)
    for column in ("agent", "status", "events", "cost", "created", "archived"):
        table.add_column(column)
    for run in runs:
        archive, summary = run["archive"], run["archive"]["summary"]
        table.add_row(safe(run["id"]), safe(run["agent"]), run["status"],
                      str(summary.get("events", "")), f"${summary.get('cost_usd', 0):.4f}",
                      created(run), str(archive["archived_at"])[:19].replace("T", " "))
    print_table(table)
