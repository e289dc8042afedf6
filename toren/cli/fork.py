"""``toren jobs fork`` and ``toren jobs diff``: replay a run from any step, and compare two runs
(docs/guides/fork-and-replay.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from toren.cli.common import load_runtime, run_interruptible, stop_runtime
from toren.cli.operator import LocalOperator, Operator, RemoteOperator, UrlOption, operate
from toren.cli.output import (
    JSON_OPTION_HELP,
    console,
    err_console,
    print_json,
    print_table,
    safe,
)
from toren.cli.render import event_line, money, output_text, run_summary
from toren.core import events as ev
from toren.errors import ConfigError
from toren.seams.shapes import TextDelta

JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
#: Not ``DirsOption``: no default directory and no TOREN_DIRS, since --dir changes where the
#: fork is worked (here, followed to its end) rather than only where agents are found.
ForkDirsOption = Annotated[list[Path] | None, typer.Option(
    "--dir", "-d", metavar="DIR",
    help="Work the fork in this process with the agent as DIR defines it now (tools, "
         "subagents, prompt; an agent directory or a directory of them, repeatable) and "
         "follow it to its end. Without it the fork is queued for the workers that serve the "
         "agent (`toren dev`, `toren worker`).")]
#: Characters of a model's text shown per step in ``toren jobs diff`` (``--json`` has it all).
SHOWN_CHARS = 400


def register(app: typer.Typer) -> None:
    """Add ``fork`` and ``diff`` to the ``toren jobs`` group."""
    app.command("fork")(fork)
    app.command("diff")(diff)


def fork(
    run_id: Annotated[str, typer.Argument(
        metavar="RUN_ID", help="The run to fork: its id, or the start of it.")],
    at_step: Annotated[int, typer.Option(
        "--at-step", metavar="N", min=0,
        help="Copy the run's first N steps (model calls with their tool results; for a "
             "workflow run, its first N waves), then go on live. 0 copies none.")],
    prompt: Annotated[Path | None, typer.Option(
        "--prompt", metavar="FILE", exists=True, dir_okay=False, readable=True,
        help="A file holding the system prompt the live steps use instead of the agent's.")]
        = None,
    model: Annotated[str | None, typer.Option(
        "--model", metavar="MODEL",
        help="The model the live steps call instead of the agent's, e.g. openai/gpt-4.1.")]
        = None,
    dirs: ForkDirsOption = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
) -> None:
    """Fork RUN_ID at a step: a new run whose first N steps are copied from RUN_ID's log (no
    model call, no cost), then go on live with a changed prompt, model or agent directory.
    RUN_ID itself is never changed."""
    text = _read_prompt(prompt)
    if dirs and url:
        raise ConfigError("--dir works the fork in this process on this machine's database; "
                          "it cannot be combined with --url (a deployment's workers run forks "
                          "made there)")
    if dirs:
        run_interruptible(_fork_here(dirs, run_id, at_step, text, model, as_json))
        return

    async def make(operator: Operator) -> dict[str, Any]:
        return await fork_on(operator, await operator.resolve_run_id(run_id), at_step, text,
                             model)

    made = operate(make, url=url)
    if as_json:
        print_json(made)
        return
    _print_fork(made)
    console.print(f"A worker serving agent {safe(made['run']['agent'])} runs it (`toren dev` "
                  f"or `toren worker`); follow it with `toren jobs show {made['run']['id']}`.")


def _read_prompt(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"--prompt {path} is not UTF-8 text: give a file holding the system "
                          "prompt") from None
    except OSError as exc:
        raise ConfigError(f"--prompt {path} cannot be read: {exc.strerror}") from None


async def fork_on(operator: Operator, run_id: str, at_step: int, prompt: str | None,
                  model: str | None) -> dict[str, Any]:
    """Fork on this machine's database or a deployment's API: ``{"run", "fork"}`` as
    ``POST /runs/{id}/fork`` answers."""
    if isinstance(operator, RemoteOperator):
        return dict(await operator.client.fork_run(run_id, at_step, prompt=prompt, model=model))
    assert isinstance(operator, LocalOperator)
    runtime = operator.runtime
    async with operator.audited("run.fork", run_id=run_id,
                                details={"at_step": at_step, "model": model}) as note:
        record = await runtime.forks.fork(run_id, at_step, prompt=prompt, model=model)
        note.agent, note.details["fork"] = record.agent, record.id
    return {"run": record.to_json(), "fork": await runtime.forks.fork_of(record.id)}


def _print_fork(made: dict[str, Any]) -> None:
    info = made["fork"]
    console.print(f"run {safe(made['run']['id'])}: a fork of {safe(info['source_run_id'])} at "
                  f"{info['unit']} {info['at_step']} ({info['copied_events']} event(s) copied"
                  + (f", model {safe(info['model'])}" if info.get("model") else "")
                  + (f", prompt sha256 {info['prompt_sha256'][:12]}"
                     if info.get("prompt_sha256") else "")
                  + f"), {made['run']['status']}")


async def _fork_here(dirs: list[Path], run_id: str, at_step: int, prompt: str | None,
                     model: str | None, as_json: bool) -> None:
    runtime = load_runtime(dirs)
    operator = LocalOperator(runtime, workers=True)
    await runtime.start(workers=True)
    try:
        source = await runtime.get_run(await operator.resolve_run_id(run_id))
        runtime.check_served(source.agent)
        made = await fork_on(operator, source.id, at_step, prompt, model)
        fork_id = made["run"]["id"]
        if not as_json:
            _print_fork(made)
        async for item in runtime.follow_live(fork_id):
            if as_json or isinstance(item, TextDelta):
                continue
            line = event_line(item)
            if item.type == ev.TASK_FORKED:
                line = (f"  ⎘ the {item.data['copied_events']} event(s) above were copied from "
                        f"run {safe(item.data['source_run_id'])} (no model call, no cost); "
                        "live from here")
            if line:
                console.print(line)
        record = await runtime.get_run(fork_id)
        if as_json:
            print_json({"run": record.to_json(), "fork": made["fork"]})
            return
        if record.output is not None:
            console.print()
            console.print(output_text(record.output), markup=False)
        console.print()
        print_table(run_summary(await runtime.receipt(fork_id)))
    except asyncio.CancelledError:
        if not as_json:
            err_console.print("Stopped following. The fork is durable: `toren worker` or "
                              "`toren dev` finishes it.")
        raise
    finally:
        await stop_runtime(runtime, quiet=as_json)


def diff(
    run_a: Annotated[str, typer.Argument(metavar="RUN_A", help="A run's id or its start.")],
    run_b: Annotated[str, typer.Argument(metavar="RUN_B", help="Another run's id or start.")],
    as_json: JsonOption = False,
    url: UrlOption = None,
) -> None:
    """Where two runs diverge: the first step that differs, and each step's model output (and
    tool results) side by side. Made for a run and its fork, it compares any two runs."""

    async def compare(operator: Operator) -> dict[str, Any]:
        a = await operator.resolve_run_id(run_a)
        b = await operator.resolve_run_id(run_b)
        if isinstance(operator, RemoteOperator):
            return dict(await operator.client.diff_runs(a, b))
        assert isinstance(operator, LocalOperator)
        return await operator.runtime.forks.diff(a, b)

    found = operate(compare, url=url)
    if as_json:
        print_json(found)
        return
    a, b = found["a"], found["b"]
    console.print(f"A: run {safe(a['id'])} ({safe(a['agent'])}, {a['status']})")
    console.print(f"B: run {safe(b['id'])} ({safe(b['agent'])}, {b['status']})")
    first = found["first_difference"]
    if first is None:
        console.print("identical: every step and the outcome are the same")
    elif first["differs"] == "outcome":
        console.print("every step is the same; the runs ended differently")
    else:
        what = {"model": "the same output from another model",
                "prompt": "the same output with another system prompt"}.get(
                    first["differs"], first["differs"].replace("_", " "))
        console.print(f"first difference: task {safe(first['task_id'])}, step {first['step']} "
                      f"({what})")
    console.print(_totals_line(found))
    for task in found["tasks"]:
        print_table(_task_table(task))
    table = Table(title="outcome")
    for column in ("", "A", "B"):
        table.add_column(column, overflow="fold")
    table.add_row("status", a["status"], b["status"])
    table.add_row("output", _shown(a["output"]), _shown(b["output"]))
    print_table(table)


def _task_table(task: dict[str, Any]) -> Table:
    table = Table(title=f"task {safe(task['task_id'])}")
    table.add_column("step", no_wrap=True)
    table.add_column("", no_wrap=True)
    table.add_column("A", overflow="fold", ratio=1)
    table.add_column("B", overflow="fold", ratio=1)
    table.add_column("B - A", no_wrap=True)
    for row in task["steps"]:
        prompts = row["differs"] == "prompt"  # shown when it is what differs
        table.add_row(str(row["step"]), "=" if row["same"] else "≠",
                      _step_text(row["a"], prompts), _step_text(row["b"], prompts),
                      _delta(row["a"], row["b"]))
    return table


def _signed(value: float, text: str) -> str:
    """``text`` (a magnitude) with the sign of ``value``: + more, - less, ± the same."""
    return ("+" if value > 0 else "-" if value < 0 else "±") + text


def _delta(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    """What B's step cost and how long its model call took, beside A's (the console's
    comparison shows the same)."""
    if a is None or b is None:
        return ""
    if a["cost_usd"] is None or b["cost_usd"] is None:
        cost = "cost unknown"
    else:
        change = round(b["cost_usd"] - a["cost_usd"], 4)
        cost = _signed(change, money(abs(change)))
    ms = round(b["latency_ms"] - a["latency_ms"])
    return f"{cost}\n{_signed(ms, f'{abs(ms)} ms')}"


def _totals_line(found: dict[str, Any]) -> str:
    """Both runs' cost and model time over every step, and the change from A to B."""
    def total(side: str, key: str) -> float:
        return sum((row[side] or {}).get(key) or 0 for task in found["tasks"]
                   for row in task["steps"])

    cost_a, cost_b = total("a", "cost_usd"), total("b", "cost_usd")
    ms_a, ms_b = round(total("a", "latency_ms")), round(total("b", "latency_ms"))
    change, waited = round(cost_b - cost_a, 4), ms_b - ms_a
    return (f"cost: A {money(cost_a)}, B {money(cost_b)} ({_signed(change, money(abs(change)))})"
            f"; model time: A {ms_a} ms, B {ms_b} ms ({_signed(waited, f'{abs(waited)} ms')})")


def _step_text(step: dict[str, Any] | None, prompt: bool = False) -> str:
    if step is None:
        return "(no such step)"
    lines = [_shown(step["text"])]
    for call in step["tool_calls"]:
        lines.append(safe(f"-> {call['name']}({_arguments(call['arguments'])})"))
    for result in step["tool_results"]:
        mark = "error" if result["is_error"] else "ok"
        lines.append(safe(f"<- {result['name']} {mark}: {result['output'][:120]}"))
    lines.append(f"[dim]{safe(step['model'])}"
                 + (f" · prompt {step['prompt_sha256'][:12]}"
                    if prompt and step.get("prompt_sha256") else "")
                 + (" (copied)" if step["copied"] else "")
                 + f" · {money(step['cost_usd'])} · {round(step['latency_ms'])} ms[/]")
    return "\n".join(line for line in lines if line)


def _arguments(arguments: dict[str, Any]) -> str:
    text = ", ".join(f"{key}={value!r}" for key, value in arguments.items())
    return text if len(text) <= 120 else text[:117] + "..."


def _shown(text: Any) -> str:
    if text is None:
        return ""
    value = str(text)
    return safe(value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "...")
