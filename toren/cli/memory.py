"""``toren memory``: list, show, edit and erase what agents remember (``memory:``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from toren.cli.common import with_database
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe
from toren.core.actors import cli_actor
from toren.core.memory import MemoryRecord
from toren.errors import InvalidMemory

if TYPE_CHECKING:
    from toren.host.runtime import Runtime

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


def _table(records: list[MemoryRecord]) -> Table:
    table = Table()
    for column in ("id", "agent", "scope", "subject", "pinned", "updated", "content"):
        table.add_column(column, no_wrap=column in ("id", "updated"))
    for record in records:
        table.add_row(record.id, record.agent, record.scope, safe(record.subject or ""),
                      "yes" if record.pinned else "",
                      record.updated_at.strftime("%Y-%m-%d %H:%M") if record.updated_at else "",
                      safe(record.content if len(record.content) <= 120
                           else record.content[:119] + "…"))
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
    as_json: JsonOption = False,
) -> None:
    """List memories, most recently changed first (best match first with --search)."""
    records = with_database(lambda rt: rt.memory.list(agent=agent, subject=subject,
                                                      scope=scope, search=search,
                                                      limit=limit))
    if as_json:
        print_json({"memories": [record.to_json() for record in records]})
        return
    if not records:
        console.print("No memories match." if agent or subject or scope or search
                      else "No memories yet.")
        return
    print_table(_table(records))


@app.command("show")
def show(memory_id: MemoryId, as_json: JsonOption = False) -> None:
    """Show one memory in full: who keeps it, about whom, and since when."""
    record = with_database(lambda rt: rt.memory.get(memory_id))
    if as_json:
        print_json(record.to_json())
        return
    for key, value in record.to_json().items():
        if key != "score":
            console.print(f"{key}: {safe(str(value) if value is not None else '')}")


@app.command("edit")
def edit(
    memory_id: MemoryId,
    content: Annotated[str | None, typer.Option(metavar="TEXT",
                                                help="The memory's new text.")] = None,
    pinned: Annotated[bool | None, typer.Option(
        "--pinned/--unpinned", help="Keep it in the agent's system prompt, or not.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Correct a memory: its text (--content) or whether it is pinned."""

    async def go(runtime: Runtime) -> MemoryRecord:
        async with runtime.audit.recording(cli_actor(), "memory.edit", "cli",
                                           target=memory_id):
            return await runtime.memory.edit(memory_id, content=content, pinned=pinned)

    record = with_database(go)
    if as_json:
        print_json(record.to_json())
        return
    console.print(f"Changed memory {record.id}.")


@app.command("rm")
def remove(
    memory_ids: Annotated[list[str] | None, typer.Argument(
        metavar="[MEMORY_ID]...", help="The memories to erase.")] = None,
    subject: SubjectOption = None,
    agent: AgentOption = None,
    as_json: JsonOption = False,
) -> None:
    """Erase memories: by id, or every memory about --subject (of --agent, or of every agent).
    Erased memories are gone: no agent recalls them again."""
    if bool(memory_ids) == (subject is not None):
        raise InvalidMemory("give memory ids, or --subject to erase everything about someone "
                            "(not both)")

    async def go(runtime: Runtime) -> list[str]:
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

    erased = with_database(go)
    if as_json:
        print_json({"erased": erased})
        return
    console.print(f"Erased {len(erased)} memor{'y' if len(erased) == 1 else 'ies'}.")
