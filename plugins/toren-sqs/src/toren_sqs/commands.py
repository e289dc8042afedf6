"""``toren queue dlq list|redrive``: the SQS dead-letter queues, from the command line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from toren.plugin.cli import (
    JSON_OPTION_HELP,
    DirsOption,
    console,
    load_runtime,
    print_json,
    print_table,
    safe,
)
from toren_sqs.settings import SqsSettings

if TYPE_CHECKING:
    from toren_sqs.sqs import SqsClient

#: The plugin API versions this module is written for (docs/reference/versioning.md); 1.5:
#: commands declared as toren.commands entry points.
TOREN_PLUGIN_API = ">=1.5,<2"

app = typer.Typer(help="The SQS queues (TOREN_QUEUE=sqs): dead letters.", no_args_is_help=True)
dlq = typer.Typer(help="Dead-letter queues: list, redrive.", no_args_is_help=True)
app.add_typer(dlq, name="dlq")

JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
AgentOption = Annotated[list[str] | None, typer.Option(
    "--agent", "-a", help="Only this agent's queue (repeatable). Default: every agent in "
                          "the directories.")]
#: How long a listed message stays hidden, so one listing shows each message once.
PEEK_VISIBILITY_S = 30


def _agents(dirs: list[Path] | None, agents: list[str] | None) -> list[str]:
    """The ``--agent`` names, else every agent of the directories (``--dir``)."""
    if agents:
        return agents
    return sorted(load_runtime(dirs).agents)


async def _drain(client: SqsClient, url: str, limit: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    while len(found) < limit:
        batch = await client.receive(url, min(10, limit - len(found)), PEEK_VISIBILITY_S, 0)
        if not batch:
            return found
        found += batch
    return found


def _run(action: Any) -> Any:
    # imported here: `toren --help` imports this module for its help line (boto3 and the
    # queue driver cost about 0.7 s, asyncio and the thread pool 0.02 s); only `toren queue`
    # runs anything
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    async def go() -> Any:
        from toren_sqs.sqs import POOL_SIZE, SqsClient

        settings = SqsSettings.from_env()
        executor = ThreadPoolExecutor(max_workers=POOL_SIZE, thread_name_prefix="toren-sqs")
        try:
            client = SqsClient(settings, executor)
            await client.check()
            return await action(settings, client)
        finally:
            executor.shutdown(wait=False)

    return asyncio.run(go())


@dlq.command("list")
def list_dead(dirs: DirsOption = None, agent: AgentOption = None,
              limit: Annotated[int, typer.Option(help="At most this many per agent.")] = 100,
              as_json: JsonOption = False) -> None:
    """List dead-lettered messages: agent, run, kind and why. Listed messages stay hidden
    for 30 s (SQS has no peek), then are back in the dead-letter queue as before."""
    names = _agents(dirs, agent)

    async def action(settings: SqsSettings, client: SqsClient) -> list[dict[str, Any]]:
        from toren_sqs.queue import Body

        rows = []
        for name in names:
            url = await client.ensure_queue(settings.queue_name(name, dead_letters=True),
                                            create=False)
            for message in await _drain(client, url, limit):
                try:
                    body = Body.decode(message["Body"])
                    rows.append({"agent": body.agent, "run_id": body.run_id,
                                 "kind": body.kind, "reason": body.dead_reason,
                                 "message_id": message["MessageId"]})
                except (ValueError, KeyError, TypeError):
                    rows.append({"agent": name, "run_id": None, "kind": None,
                                 "reason": "not a Toren message",
                                 "message_id": message["MessageId"]})
        return rows

    rows = _run(action)
    if as_json:
        print_json({"dead_letters": rows})
        return
    if not rows:
        console.print("No dead-lettered messages.")
        return
    table = Table()
    for column in ("agent", "run", "kind", "why"):
        table.add_column(column)
    for row in rows:
        table.add_row(safe(row["agent"]), safe(row["run_id"] or ""), safe(row["kind"] or ""),
                      safe(row["reason"] or ""))
    print_table(table)


@dlq.command("redrive")
def redrive(dirs: DirsOption = None, agent: AgentOption = None,
            as_json: JsonOption = False) -> None:
    """Move dead-lettered messages back to their agent's queue, with their delivery count
    reset. A message of a run that has ended is dropped by its handler when delivered."""
    names = _agents(dirs, agent)

    async def action(settings: SqsSettings, client: SqsClient) -> dict[str, int]:
        from toren_sqs.queue import Body

        moved: dict[str, int] = {}
        for name in names:
            source = await client.ensure_queue(settings.queue_name(name, dead_letters=True),
                                               create=False)
            target = await client.ensure_queue(settings.queue_name(name), create=False)
            count = 0
            while batch := await client.receive(source, 10, PEEK_VISIBILITY_S, 0):
                for message in batch:
                    try:
                        body = replace(Body.decode(message["Body"]), prior_attempts=0,
                                       dead_reason=None).encode()
                    except (ValueError, KeyError, TypeError):
                        continue  # not Toren's: left where it is
                    await client.send(target, body, 0)  # then delete: a crash duplicates
                    await client.delete_batch(source, [{"ReceiptHandle":
                                                        message["ReceiptHandle"]}])
                    count += 1
            moved[name] = count
        return moved

    moved = _run(action)
    if as_json:
        print_json({"redriven": moved})
        return
    for name, count in moved.items():
        console.print(f"{safe(name)}: {count} message{'s' if count != 1 else ''} redriven")
