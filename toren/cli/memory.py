"""``toren memory``: list, show, edit and erase what agents remember (``memory:``), on this
machine's database or, with ``--url``, a deployment's API."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.table import Table

from toren.cli.common import run_async, with_database
from toren.cli.operator import UrlOption
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe
from toren.core.actors import cli_actor
from toren.errors import InvalidMemory

if TYPE_CHECKING:
    from toren.client import TorenClient
    from toren.host.runtime import Runtime

T = TypeVar("T")
app = typer.Typer(help="What agents remember (memory: in agent.yaml): list, show, edit, rm.",
                  no_args_is_help=True)
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
MemoryId = Annotated[str, typer.Argument(metavar="MEMORY_ID", help="The memory's id.")]
AgentOption = Annotated[str | None, typer.Option(
    "--agent", metavar="AGENT", envvar="TOREN_MEMORY_AGENT",
    help="Only this agent's memories.")]
SubjectOption = Annotated[str | None, typer.Option(
    "--subject", metavar="SUBJECT", envvar="TOREN_MEMORY_SUBJECT",
    help="Only memories about this person (a channel identity such as telegram:12345, or "
         "the subject given to the run).")]


def _on(url: str | None, local: Callable[[Runtime], Awaitable[T]],
        remote: Callable[[TorenClient], Awaitable[T]]) -> T:
    """``local`` on this machine's database, or ``remote`` on the API at ``url`` (with
    ``TOREN_API_KEY``; the server records the change in its audit trail)."""
    if url is None:
        return with_database(local)

    async def go() -> T:
        from toren.client import TorenClient

        async with TorenClient(url) as client:
            return await remote(client)

    return run_async(go())


def _table(records: list[dict[str, Any]]) -> Table:
    table = Table()
    for column in ("id", "agent", "scope", "subject", "pinned", "updated", "content"):
        table.add_column(column, no_wrap=column in ("id", "updated"))
    for record in records:
        content = str(record["content"])
        table.add_row(record["id"], record["agent"], record["scope"],
                      safe(record["subject"] or ""), "yes" if record["pinned"] else "",
                      (record["updated_at"] or "")[:16].replace("T", " "),
                      safe(content if len(content) <= 120 else content[:119] + "…"))
    return table


@app.command("list")
def list_memories(
    agent: AgentOption = None,
    subject: SubjectOption = None,
    scope: Annotated[str | None, typer.Option(
        metavar="SCOPE", help="Only this scope: user, agent or shared.")] = None,
    search: Annotated[str | None, typer.Option(
        metavar="WORDS", help="Only memories holding any of these words (best match first).")
    ] = None,
    limit: Annotated[int, typer.Option(metavar="N", min=1, max=1000,
                                       help="At most this many.")] = 100,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """List memories, most recently changed first (best match first with --search)."""

    async def local(runtime: Runtime) -> list[dict[str, Any]]:
        found = await runtime.memory.list(agent=agent, subject=subject, scope=scope,
                                          search=search, limit=limit)
        return [record.to_json() for record in found]

    async def remote(client: TorenClient) -> list[dict[str, Any]]:
        listed = await client.list_memories(agent=agent, subject=subject, scope=scope,
                                            search=search, limit=limit)
        return [dict(record) for record in listed["memories"]]

    records = _on(url, local, remote)
    if as_json:
        print_json({"memories": records})
        return
    if not records:
        console.print("No memories match." if agent or subject or scope or search
                      else "No memories yet.")
        return
    print_table(_table(records))


@app.command("show")
def show(memory_id: MemoryId, url: UrlOption = None, as_json: JsonOption = False) -> None:
    """Show one memory in full: who keeps it, about whom, and since when."""

    async def local(runtime: Runtime) -> dict[str, Any]:
        return (await runtime.memory.get(memory_id)).to_json()

    async def remote(client: TorenClient) -> dict[str, Any]:
        return dict(await client.get_memory(memory_id))

    record = _on(url, local, remote)
    if as_json:
        print_json(record)
        return
    for key, value in record.items():
        if key != "score":
            console.print(f"{key}: {safe(str(value) if value is not None else '')}")


@app.command("edit")
def edit(
    memory_id: MemoryId,
    content: Annotated[str | None, typer.Option(metavar="TEXT",
                                                help="The memory's new text.")] = None,
    pinned: Annotated[bool | None, typer.Option(
        "--pinned/--unpinned", help="Keep it in the agent's system prompt, or not.")] = None,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Correct a memory: its text (--content) or whether it is pinned."""
    if content is None and pinned is None:
        raise InvalidMemory("nothing to change: give the new content, pinned, or both")

    async def local(runtime: Runtime) -> dict[str, Any]:
        async with runtime.audit.recording(cli_actor(), "memory.edit", "cli",
                                           target=memory_id):
            return (await runtime.memory.edit(memory_id, content=content,
                                              pinned=pinned)).to_json()

    async def remote(client: TorenClient) -> dict[str, Any]:
        return dict(await client.edit_memory(memory_id, content=content, pinned=pinned))

    record = _on(url, local, remote)
    if as_json:
        print_json(record)
        return
    console.print(f"Changed memory {record['id']}.")


@app.command("rm")
def remove(
    memory_ids: Annotated[list[str] | None, typer.Argument(
        metavar="[MEMORY_ID]...", help="The memories to erase.")] = None,
    subject: SubjectOption = None,
    agent: AgentOption = None,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Erase memories: by id, or every memory about --subject (of --agent, or of every agent).
    Erased memories are gone: no agent recalls them again."""
    if bool(memory_ids) == (subject is not None):
        raise InvalidMemory("give memory ids, or --subject to erase everything about someone "
                            "(not both)")

    async def local(runtime: Runtime) -> list[str]:
        if memory_ids:
            erased = []
            for memory_id in memory_ids:
                async with runtime.audit.recording(cli_actor(), "memory.delete", "cli",
                                                   target=memory_id):
                    erased.append((await runtime.memory.delete(memory_id)).id)
            return erased
        assert subject is not None
        async with runtime.audit.recording(cli_actor(), "memory.erase_subject", "cli",
                                           target=subject):
            return await runtime.memory.erase_subject(subject, agent=agent)

    async def remote(client: TorenClient) -> list[str]:
        if memory_ids:
            return [str((await client.delete_memory(memory_id))["id"])
                    for memory_id in memory_ids]
        assert subject is not None
        return await client.erase_subject(subject, agent=agent)

    erased = _on(url, local, remote)
    if as_json:
        print_json({"erased": erased})
        return
    console.print(f"Erased {len(erased)} memor{'y' if len(erased) == 1 else 'ies'}.")
