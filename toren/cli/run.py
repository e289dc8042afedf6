"""``toren run AGENT INPUT``: start a run and follow it, working it in this process."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from toren.cli.common import DirsOption, load_runtime, run_interruptible, stop_runtime
from toren.cli.output import (
    JSON_OPTION_HELP,
    console,
    err_console,
    print_json,
    print_table,
    safe,
)
from toren.cli.render import LiveTextPrinter, event_line, output_text, run_summary
from toren.core import events as ev
from toren.host.runtime import Runtime
from toren.seams.shapes import TextDelta


def run(
    agent: Annotated[str, typer.Argument(
        metavar="AGENT", help="The agent to run (the `name:` in its agent.yaml).")],
    input: Annotated[str, typer.Argument(
        metavar="INPUT", help="The input: the first user message.")],
    dirs: DirsOption = None,
    follow: Annotated[bool, typer.Option(
        "--follow/--no-follow",
        help="Follow the run and work it in this process (default), or only enqueue it and "
             "print its id (a `toren worker` or `toren dev` executes it).")] = True,
    idempotency_key: Annotated[str | None, typer.Option(
        metavar="KEY",
        help="Same key, same run: a repeated command does not start a second run.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
) -> None:
    """Start a run of AGENT with INPUT."""
    runtime = load_runtime(dirs, agent)
    # Ctrl-C, or SIGTERM (a supervisor, `kill`): the runtime stops and hands work back, the
    # embedded Postgres is released; a second one quits at once
    run_interruptible(_run(runtime, agent, input, follow=follow, key=idempotency_key,
                           as_json=as_json))


async def _run(runtime: Runtime, agent: str, text: str, *, follow: bool, key: str | None,
               as_json: bool) -> None:
    await runtime.start(workers=follow)
    try:
        run_id = await runtime.start_run(agent, text, idempotency_key=key)
        if not follow:
            record = await runtime.get_run(run_id)
            if as_json:
                print_json(record.to_json())
            else:
                console.print(run_id)
            return
        if not as_json:
            err_console.print(f"run {run_id} ({agent}) on {safe(runtime.database.description)}")
        printer = LiveTextPrinter()
        try:
            async for item in runtime.follow_live(run_id):
                if as_json:
                    continue
                if isinstance(item, TextDelta):
                    printer.piece(item)  # the model's text as it is generated
                    continue
                printer.completed(item)
                line = event_line(item)
                if line:
                    console.print(line)
        except asyncio.CancelledError:
            if not as_json:
                err_console.print(f"Stopped following. The run is durable: `toren worker` or "
                                  f"`toren dev` finishes it; see `toren jobs show {run_id}`.")
            raise
        record = await runtime.get_run(run_id)
        if as_json:
            print_json(record.to_json())
            return
        receipt = await runtime.receipt(run_id)
        if record.output is not None:
            console.print()
            console.print(output_text(record.output), markup=False)
        console.print()
        print_table(run_summary(receipt))
        if record.status not in ("completed",) and record.status in ev.TERMINAL_STATUSES:
            raise typer.Exit(code=2 if record.status == "failed" else 0)
    finally:
        await stop_runtime(runtime, quiet=as_json)
