"""``toren approvals``: list, show, approve and deny the tool calls that wait for a person."""

from __future__ import annotations

import getpass
import json
from typing import Annotated, Any

import typer
from rich.table import Table

from toren.cli.operator import Operator, UrlOption, operate
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe
from toren.core.approvals import APPROVAL_STATUSES

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
    url: UrlOption = None,
) -> None:
    """Approvals, newest request first (pending ones unless --status or --all)."""
    found = operate(lambda op: op.list_approvals(
        agent=agent, run_id=run, status=None if all_ else status, limit=limit), url=url)
    if as_json:
        print_json({"approvals": found})
        return
    table = Table()
    table.add_column("approval", no_wrap=True)
    for column in ("agent", "run", "tool", "status", "requested", "decided by"):
        table.add_column(column)
    for a in found:
        requested = a["requested_at"]
        table.add_row(safe(a["id"]), safe(a["agent"]), safe(a["run_id"][:8]), safe(a["tool"]),
                      a["status"], str(requested)[:19].replace("T", " ") if requested else "",
                      safe(a["decided_by"] or ""))
    print_table(table)


@app.command("show")
def show(approval_id: ApprovalArgument, as_json: JsonOption = False,
         url: UrlOption = None) -> None:
    """One approval: the tool, its arguments, who may decide, the decision."""
    record = operate(lambda op: op.resolve_approval(approval_id), url=url)
    if as_json:
        print_json(record)
        return
    _print(record)


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


def _decide(approval_id: str, outcome: str, reason: str | None, as_json: bool,
            url: str | None) -> None:
    async def decide(operator: Operator) -> dict[str, Any]:
        record = await operator.resolve_approval(approval_id)
        return await operator.decide_approval(record["id"], outcome, reason)

    record = operate(decide, url=url, decided_by=cli_identity())
    if as_json:
        print_json(record)
        return
    console.print(f"approval {safe(record['id'])} of {safe(record['tool'])}: {record['status']} "
                  f"by {safe(record['decided_by'] or '')}; run {safe(record['run_id'])} "
                  "continues")


@app.command("approve")
def approve(approval_id: ApprovalArgument, reason: ReasonOption = None,
            as_json: JsonOption = False, url: UrlOption = None) -> None:
    """Let the call run (exactly once); the parked task continues."""
    _decide(approval_id, "approved", reason, as_json, url)


@app.command("deny")
def deny(approval_id: ApprovalArgument, reason: ReasonOption = None,
         as_json: JsonOption = False, url: UrlOption = None) -> None:
    """Refuse the call; the model reads the refusal and the reason as the tool's result."""
    _decide(approval_id, "denied", reason, as_json, url)
