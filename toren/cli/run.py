"""``toren run AGENT INPUT [--file PATH]``: start a run and follow it, working it in this
process (or on a deployment, with ``--url``/``TOREN_URL``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from toren.cli.common import DirsOption, run_interruptible
from toren.cli.files import attachment_lines, attachment_source
from toren.cli.operator import (
    LocalOperator,
    Operator,
    RemoteOperator,
    UrlOption,
    make_operator,
)
from toren.cli.output import (
    JSON_OPTION_HELP,
    console,
    err_console,
    print_json,
    print_table,
    safe,
    toren_command,
)
from toren.cli.render import LiveTextPrinter, event_line, output_text, run_summary
from toren.core import events as ev
from toren.core.webhooks import DEFAULT_EVENTS, WebhookSubscription, parse_subscriptions
from toren.seams.shapes import TextDelta

FileOption = Annotated[list[str] | None, typer.Option(
    "--file", "-f", metavar="PATH",
    help="A file to attach to the input (repeatable): uploaded first, listed in the input for "
         "read_document, and shown to the model when it is an image or a PDF the model can "
         "see. An uploaded file's id (a UUID) is attached as it is.")]


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
    files: FileOption = None,
    webhook: Annotated[list[str] | None, typer.Option(
        "--webhook", metavar="URL",
        help="Tell this URL when the run ends (repeatable): a signed JSON POST with its "
             "status, output and totals. See docs/guides/webhooks.md.")] = None,
    webhook_on: Annotated[list[str] | None, typer.Option(
        "--webhook-on", metavar="EVENT",
        help="What the --webhook URLs are told (repeatable): finished (default), "
             "awaiting_approval, awaiting_input.")] = None,
    priority: Annotated[int | None, typer.Option(
        min=-100, max=100, metavar="N",
        help="The run's priority, -100..100 (default: the agent's priority:, else 0): higher "
             "is claimed first, within the agent's concurrency limit. See "
             "docs/guides/flow-control.md.")] = None,
    subject: Annotated[str | None, typer.Option(
        metavar="SUBJECT", envvar="TOREN_SUBJECT",
        help="Whom the run is about (a customer id, an e-mail address): the agent's user "
             "memories (memory:) are this subject's. See docs/guides/memory.md.")] = None,
    url: UrlOption = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
) -> None:
    """Start a run of AGENT with INPUT (and files, with --file)."""
    # every path is checked before anything starts: a typo costs no upload and no database
    sources = [attachment_source(value) for value in files or []]
    webhooks = parse_subscriptions(
        [{"url": value, "events": webhook_on or list(DEFAULT_EVENTS)} for value in webhook],
        field="--webhook") if webhook else ()
    backend = make_operator(url, dirs=dirs, agent=agent, workers=follow)
    if isinstance(backend, LocalOperator):
        backend.quiet = as_json
    # Ctrl-C, or SIGTERM (a supervisor, `kill`): the runtime stops and hands work back, the
    # embedded Postgres is released; a second one quits at once
    run_interruptible(_run(backend, agent, input, sources, follow=follow,
                           key=idempotency_key, as_json=as_json, webhooks=webhooks,
                           priority=priority, subject=subject))


async def _run(backend: Operator, agent: str, text: str, sources: list[Path | str], *,
               follow: bool, key: str | None, as_json: bool,
               webhooks: Sequence[WebhookSubscription] = (),
               priority: int | None = None, subject: str | None = None) -> None:
    await backend.start()
    try:
        files = await backend.attach(sources, None if as_json else err_console.print)
        starting = asyncio.ensure_future(backend.start_run(
            agent, text, idempotency_key=key, files=[stored["id"] for stored in files],
            webhooks=webhooks, priority=priority, subject=subject))
        try:
            run_id = await asyncio.shield(starting)
        except asyncio.CancelledError:
            # Ctrl-C or SIGTERM while the run was being created (its row may be committed
            # already): finish creating it, a moment, so the run it leaves can be named
            run_id = await starting
            if follow and not as_json:
                err_console.print(_stopped_following(backend, run_id))
            raise
        extra = {"files": files} if sources else {}
        if not follow:
            if as_json:
                print_json(await backend.get_run(run_id) | extra)
            else:
                console.print(run_id)
            return
        if not as_json:
            err_console.print(f"run {run_id} ({agent}) on {_where(backend)}")
        printer = LiveTextPrinter()
        try:
            async for item in backend.run_live(run_id):
                if as_json:
                    continue
                if isinstance(item, TextDelta):
                    printer.piece(item)  # the model's text as it is generated
                    continue
                printer.completed(item)
                line = event_line(item)
                if line:
                    console.print(line)
                if item.type in (ev.TASK_STARTED, ev.TOOL_CALL_COMPLETED):
                    indent = "  " if item.type == ev.TASK_STARTED else "      "
                    for shown in attachment_lines(item.data.get("attachments")):
                        console.print(indent + shown)
        except asyncio.CancelledError:
            if not as_json:
                err_console.print(_stopped_following(backend, run_id))
            raise
        record = await backend.get_run(run_id)
        if as_json:
            print_json(record | extra)
            return
        receipt = await backend.receipt(run_id)
        if record["output"] is not None:
            console.print()
            console.print(output_text(record["output"]), markup=False)
        console.print()
        print_table(run_summary(receipt))
        status = record["status"]
        if status != "completed" and status in ev.TERMINAL_STATUSES:
            raise typer.Exit(code=2 if status == "failed" else 0)
    finally:
        await backend.aclose()


def _where(backend: Operator) -> str:
    if isinstance(backend, RemoteOperator):
        return safe(backend.client.base_url)
    assert isinstance(backend, LocalOperator)
    return safe(backend.runtime.database.description)


def _stopped_following(backend: Operator, run_id: str) -> str:
    toren = safe(toren_command())  # runnable as printed, toren on PATH or not
    if isinstance(backend, LocalOperator):
        return (f"Stopped following. The run is durable: `{toren} worker` or `{toren} dev` "
                f"finishes it; see `{toren} jobs show {run_id}`.")
    return (f"Stopped following. The run goes on at {_where(backend)}; see "
            f"`{toren} jobs show {run_id} --url {_where(backend)}`.")
