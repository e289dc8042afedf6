"""``toren jobs``: list, show, receipt, cancel and signal runs (no agent directories
needed)."""

from __future__ import annotations

import getpass
import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer
from rich.table import Table

from toren.cli import fork
from toren.cli.approvals import cli_identity
from toren.cli.operator import Operator, UrlOption, created, operate
from toren.cli.output import (
    JSON_OPTION_HELP,
    console,
    err_console,
    print_json,
    print_table,
    safe,
)
from toren.cli.render import (
    children_tree,
    money,
    output_text,
    receipt_tables,
    run_summary,
    run_tree,
    webhooks_tree,
)
from toren.core.questions import question_text
from toren.core.retention import parse_age
from toren.errors import ConfigError, QuestionNotFound

app = typer.Typer(help="Runs: list, show, receipt, cancel, answer, signal, fork, diff, "
                       "upgrade.",
                  no_args_is_help=True)
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
             "awaiting_approval, waiting, completed, stopped, failed, cancelled).")] = None,
    limit: Annotated[int, typer.Option(metavar="N", min=1, max=1000,
                                       help="At most this many.")] = 50,
    schedule: Annotated[str | None, typer.Option(
        metavar="NAME", help="Only runs this schedule started (see `toren schedules`).")] = None,
    find: Annotated[str | None, typer.Option(
        "--find", metavar="WORDS",
        help='Only runs whose input or output has all these words (whole words, any case; '
             '"a phrase", or, -word).')] = None,
    agent_version: Annotated[str | None, typer.Option(
        "--agent-version", metavar="VERSION",
        help="Only runs on this agent version: its hash (4 characters or more of it) or its "
             "version: from agent.yaml.")] = None,
    since: Annotated[str | None, typer.Option(
        metavar="WHEN", help="Only runs created since then: an age (7d, 12h) or an ISO 8601 "
                             "date or time (UTC unless it names an offset).")] = None,
    until: Annotated[str | None, typer.Option(
        metavar="WHEN", help="Only runs created before then (an age or a date; a date "
                             "includes that day).")] = None,
    sort: Annotated[str | None, typer.Option(
        metavar="ORDER", help="created, duration, cost, model_calls or steps; a leading - "
                              "for largest first (-cost: the most expensive first).")] = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    archived: Annotated[bool, typer.Option(
        "--archived", help="List archived runs instead (retention; see `toren db archive`)."
    )] = False,
) -> None:
    """List runs, newest first (or in another order), with each one's calls and cost."""
    if archived:
        list_archived(agent, limit, as_json, url)
        return
    wanted = {"q": find, "version": agent_version, "since": ago(since), "until": ago(until),
              "sort": sort}
    search = {name: value for name, value in wanted.items() if value is not None}

    async def read(operator: Operator) -> tuple[list[dict[str, Any]], str]:
        return (await operator.list_runs(agent=agent, status=status, limit=limit,
                                         schedule=schedule, find=search), operator.database)

    runs, database = operate(read, url=url)
    if as_json:
        print_json({"runs": runs})
        return
    if not runs:  # say where nothing was found: the wrong database reads as an empty one
        filtered = agent or status or schedule or any(k != "sort" for k in search)
        err_console.print(f"No runs{' matching the filters' if filtered else ''}"
                          f" in {safe(database)}.")
    table = Table()
    table.add_column("run", no_wrap=True)
    for column in ("agent", "status", "stop reason", "schedule", "created"):
        table.add_column(column)
    table.add_column("calls", justify="right")
    table.add_column("cost", justify="right")
    for run in runs:
        totals = run.get("totals") or {}
        cost = money(totals.get("cost_usd", 0.0)) + ("+?" if totals.get("cost_unknown_calls")
                                                      else "")
        table.add_row(safe(run["id"]), safe(run["agent"]), run["status"],
                      run["stop_reason"] or "", safe(run.get("schedule") or ""), created(run),
                      str(totals.get("model_calls", 0)), cost)
    print_table(table)


def ago(text: str | None) -> str | None:
    """An age (``7d``, ``12h``) as the ISO 8601 time it names back from now; anything else
    as it is (the search checks it)."""
    if text is None:
        return None
    try:
        seconds = parse_age(text)
    except ValueError:
        return text
    if seconds is None:  # "never"
        return text
    return (datetime.now(UTC) - timedelta(seconds=seconds)).isoformat()


PromptsOption = Annotated[bool, typer.Option(
    "--prompts", help="Also show the system prompt each task ran with (kept by the store).")]


@app.command("show")
def show(run_id: RunArgument, as_json: JsonOption = False,
         prompts: PromptsOption = False, url: UrlOption = None) -> None:
    """A run: status, stop reason, output, steps, tokens, cost, latest error; as a tree."""

    async def read(operator: Operator) -> dict[str, Any]:
        found = await operator.resolve_run_id(run_id)
        data = await operator.receipt(found)
        return data | {"children": await operator.children(found),
                       "questions": await operator.list_questions(found, "pending"),
                       "webhooks": await operator.webhooks(found),
                       "queue": await operator.queue_state(found)}

    receipt: dict[str, Any] = operate(read, url=url)
    costs = {call["run_id"]: call["cost_usd"] for call in receipt["peer_calls"]}
    for child in receipt["children"]:
        child["cost_usd"] = costs.get(child["id"])
    if as_json:
        print_json(receipt["run"] | {"totals": receipt["totals"], "why": receipt["why"],
                                     "budget": receipt["budget"],
                                     "tasks": [_task_brief(t) for t in receipt["tasks"]],
                                     "peer_calls": receipt["peer_calls"],
                                     "children": receipt["children"],
                                     "pending_questions": receipt["questions"],
                                     "webhooks": receipt["webhooks"],
                                     "queue": receipt["queue"]}
                   | ({"prompts": receipt["prompts"]} if prompts else {}))
        return
    print_table(run_summary(receipt))
    if receipt["run"]["output"] is not None:
        console.print()
        console.print(output_text(receipt["run"]["output"]), markup=False)
    console.print()
    print_table(run_tree(receipt))
    if receipt["children"]:
        console.print()
        print_table(children_tree(receipt["run"]["id"], receipt["children"]))
    for question in receipt["questions"]:
        console.print()
        console.print(f"[yellow]The agent asks (question {safe(question['id'])}):[/]")
        console.print(question_text(question["question"], question["choices"]), markup=False)
        console.print(f"[dim]Answer with `toren jobs answer {safe(receipt['run']['id'])} "
                      f"{safe(question['id'][:8])} TEXT`.[/]")
    if receipt["webhooks"]:
        console.print()
        print_table(webhooks_tree(receipt["webhooks"]))
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
            "error", "steps", "resumes", "totals", "signal_waits")
    return {key: task[key] for key in keys if key in task}


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


@app.command("answer")
def answer(
    run_id: RunArgument,
    question_id: Annotated[str, typer.Argument(
        metavar="QUESTION_ID", help="The question's id, or the start of it (`toren jobs show "
                                    "RUN_ID` lists the open ones).")],
    text: Annotated[str, typer.Argument(
        metavar="TEXT", help="The answer; for a question with choices, one of them or its "
                             "number.")],
    as_json: JsonOption = False,
    url: UrlOption = None,
) -> None:
    """Answer a question a run's agent asked (ask_user): once; the first answer wins."""

    async def answer_it(operator: Operator) -> dict[str, Any]:
        found = await operator.resolve_run_id(run_id)
        questions = await operator.list_questions(found)
        matches = [q for q in questions if q["id"].startswith(question_id.lower())]
        if len(matches) != 1:
            listed = ", ".join(q["id"] for q in questions) or "none"
            raise QuestionNotFound(
                f"{'no' if not matches else 'more than one'} question of run {found} starts "
                f"with {question_id!r}; its questions: {listed}")
        return await operator.answer_question(found, matches[0]["id"], text)

    record = operate(answer_it, url=url, decided_by=f"cli:{getpass.getuser()}")
    if as_json:
        print_json(record)
    else:
        console.print(f"question {safe(record['id'])}: answered {safe(repr(record['answer']))};"
                      " the run goes on")


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


@app.command("signal")
def signal(
    run_id: RunArgument,
    name: Annotated[str, typer.Argument(
        metavar="NAME", help="The signal's name (what the workflow's ctx.wait_for_signal "
                             "waits for): lowercase letters, digits, - and _.")],
    data: Annotated[str, typer.Option(
        "--data", metavar="JSON", help="The payload, as JSON (a quoted string, a number, an "
                                       "object...). Default: null.")] = "null",
    idempotency_key: Annotated[str | None, typer.Option(
        "--idempotency-key", metavar="KEY",
        help="Send at most once: a signal with this key already recorded is not sent "
             "again.")] = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
) -> None:
    """Send a signal to a run; a workflow waiting with ctx.wait_for_signal(NAME) takes it
    (one sent before it waits is kept for it), and so does every tool waiting for it
    (toren.wait_for_signal)."""
    try:
        payload = json.loads(data)
    except ValueError as exc:
        raise ConfigError(f"--data is not JSON ({exc}); quote a string as JSON: "
                          "--data '\"yes\"'") from None

    async def send(operator: Operator) -> dict[str, Any]:
        return await operator.send_signal(await operator.resolve_run_id(run_id), name,
                                          payload, idempotency_key)

    sent = operate(send, url=url, decided_by=cli_identity())
    if as_json:
        print_json(sent)
    else:
        again = "" if sent["created"] else " (already sent with this key: not sent again)"
        console.print(f"signal {safe(sent['name'])} #{sent['number']} sent to run "
                      f"{safe(sent['run_id'])} ({sent['status']}){again}")


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


def _add_upgrade() -> None:
    # `toren jobs upgrade` lives with the agents' versions (toren.cli.versions), which do not
    # import this module
    from toren.cli.versions import upgrade

    app.command("upgrade")(upgrade)


_add_upgrade()
