"""``toren approvals``: list, show, approve and deny the tool calls that wait for a person."""

from __future__ import annotations

import getpass
import json
import re
import uuid
from typing import Annotated, Any

import typer
from rich.table import Table

from toren.cli.common import with_database
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe
from toren.core.approvals import APPROVAL_STATUSES, ApprovalRecord
from toren.errors import ApprovalNotFound
from toren.host.runtime import Runtime

app = typer.Typer(help="Tool calls waiting for a person: list, show, approve, deny.",
                  no_args_is_help=True)
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
ApprovalArgument = Annotated[str, typer.Argument(
    metavar="APPROVAL_ID", help="The approval's id, or the start of it (unique among the "
                                "latest 200).")]
ReasonOption = Annotated[str | None, typer.Option(
    "--reason", metavar="TEXT", help="Why; recorded with the decision (a denial's reason goes "
                                     "to the model).")]


def cli_identity() -> str:
    """Who decides from the CLI: ``cli:<os user>`` (what agent.yaml's approvers name)."""
    return f"cli:{getpass.getuser()}"


async def resolve_approval(runtime: Runtime, id_or_prefix: str) -> ApprovalRecord:
    """The approval whose id is ``id_or_prefix`` or the only one of the latest 200 whose id
    starts with it; ``ApprovalNotFound`` otherwise."""
    text = id_or_prefix.strip().lower()
    try:
        return await runtime.get_approval(str(uuid.UUID(text)))
    except ValueError:
        pass
    matches = []
    if re.fullmatch(r"[0-9a-f][0-9a-f-]{0,35}", text):
        matches = [a for a in await runtime.list_approvals(limit=200) if a.id.startswith(text)]
    if len(matches) != 1:
        found = "several approvals' ids start" if matches else "no approval's id starts"
        raise ApprovalNotFound(f"{found} with {id_or_prefix!r}; give the whole id (see "
                               "`toren approvals list`)")
    return matches[0]


@app.command("list")
def list_approvals(
    status: Annotated[str | None, typer.Option(
        metavar="STATUS", help=f"Only these ({', '.join(APPROVAL_STATUSES)}). Default: "
                               "pending.")] = "pending",
    all_: Annotated[bool, typer.Option("--all", help="Every status.")] = False,
    agent: Annotated[str | None, typer.Option(metavar="NAME", help="Only this agent's.")] = None,
    run: Annotated[str | None, typer.Option(metavar="RUN_ID", help="Only this run's.")] = None,
    limit: Annotated[int, typer.Option(metavar="N", min=1, max=200,
                                       help="At most this many.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """Approvals, newest request first (pending ones unless --status or --all)."""
    found = with_database(lambda rt: rt.list_approvals(
        agent=agent, run_id=run, status=None if all_ else status, limit=limit))
    if as_json:
        print_json({"approvals": [a.to_json() for a in found]})
        return
    table = Table()
    table.add_column("approval", no_wrap=True)
    for column in ("agent", "run", "tool", "status", "requested", "decided by"):
        table.add_column(column)
    for a in found:
        table.add_row(safe(a.id), safe(a.agent), safe(a.run_id[:8]), safe(a.tool), a.status,
                      a.requested_at.strftime("%Y-%m-%d %H:%M:%S") if a.requested_at else "",
                      safe(a.decided_by or ""))
    print_table(table)


@app.command("show")
def show(approval_id: ApprovalArgument, as_json: JsonOption = False) -> None:
    """One approval: the tool, its arguments, who may decide, the decision."""
    record = with_database(lambda rt: resolve_approval(rt, approval_id))
    if as_json:
        print_json(record.to_json())
        return
    _print(record.to_json())


def _print(data: dict[str, Any]) -> None:
    table = Table(show_header=False)
    table.add_column("field")
    table.add_column("value")
    for key, value in data.items():
        if isinstance(value, list):
            value = ", ".join(value)
        elif isinstance(value, dict):
            value = json.dumps(value, ensure_ascii=False)
        table.add_row(key, safe("" if value is None else str(value)))
    print_table(table)


def _decide(approval_id: str, outcome: str, reason: str | None, as_json: bool) -> None:
    async def decide(runtime: Runtime) -> ApprovalRecord:
        record = await resolve_approval(runtime, approval_id)
        return await runtime.decide_approval(record.id, outcome, decided_by=cli_identity(),
                                             reason=reason)

    record = with_database(decide)
    if as_json:
        print_json(record.to_json())
        return
    console.print(f"approval {safe(record.id)} of {safe(record.tool)}: {record.status} by "
                  f"{safe(record.decided_by or '')}; run {safe(record.run_id)} continues")


@app.command("approve")
def approve(approval_id: ApprovalArgument, reason: ReasonOption = None,
            as_json: JsonOption = False) -> None:
    """Let the call run (exactly once); the parked task continues."""
    _decide(approval_id, "approved", reason, as_json)


@app.command("deny")
def deny(approval_id: ApprovalArgument, reason: ReasonOption = None,
         as_json: JsonOption = False) -> None:
    """Refuse the call; the model reads the refusal and the reason as the tool's result."""
    _decide(approval_id, "denied", reason, as_json)
