"""``toren approvals``: list, show, approve, deny, edit and answer the tool calls that wait
for a person. Every decision names the digest of the arguments the command read and showed."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from toren.cli.operator import Operator, UrlOption, operate
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe
from toren.core.actors import cli_actor
from toren.core.approvals import APPROVAL_STATUSES
from toren.errors import ConfigError

app = typer.Typer(help="Tool calls waiting for a person: list, show, approve, deny, edit, "
                       "answer.",
                  no_args_is_help=True)
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
ApprovalArgument = Annotated[str, typer.Argument(
    metavar="APPROVAL_ID", help="The approval's id, or the start of it (unique among the "
                                "latest 200).")]
ReasonOption = Annotated[str | None, typer.Option(
    "--reason", metavar="TEXT", help="Why; recorded with the decision (a denial's reason goes "
                                     "to the model).")]


def cli_identity() -> str:
    """Who decides from the CLI on the database: ``cli:$TOREN_ACTOR``, else
    ``cli:<os user>`` (what agent.yaml's approvers name). Over ``--url`` the API key
    decides instead."""
    return cli_actor().id


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
        if key == "parameters":
            continue  # the tool's schema: in --json
        if isinstance(value, list):
            value = ", ".join(value)
        elif isinstance(value, dict):
            value = json.dumps(value, ensure_ascii=False)
        table.add_row(key, safe("" if value is None else str(value)))
    print_table(table)


DigestOption = Annotated[str | None, typer.Option(
    "--digest", metavar="SHA256", help="The digest `toren approvals show` gave: decide only if "
                                       "the arguments are still those (default: the digest of "
                                       "the arguments this command shows).")]


def _decide(approval_id: str, outcome: str, reason: str | None, as_json: bool,
            url: str | None, *, digest: str | None = None, scope: str = "call",
            arguments: dict[str, Any] | None = None, answer: str | None = None) -> None:
    shown: dict[str, Any] = {}

    async def decide(operator: Operator) -> dict[str, Any]:
        record = await operator.resolve_approval(approval_id)
        shown.update(record)
        # bound to what this command read and shows below (or to --digest, from an earlier
        # `show`): if the arguments are not those any more, the decision is refused (409)
        return await operator.decide_approval(
            record["id"], outcome, reason, digest=digest or record.get("digest"), scope=scope,
            arguments=arguments, answer=answer)

    record = operate(decide, url=url, decided_by=cli_identity())
    if as_json:
        print_json(record)
        return
    arguments_text = json.dumps(shown.get("arguments"), ensure_ascii=False, sort_keys=True)
    console.print(f"{safe(record['tool'])} {safe(arguments_text)} (digest "
                  f"{safe(str(shown.get('digest', ''))[:12])}…)")
    always = " always (same tool and arguments, rest of the run)" if scope == "run" else ""
    console.print(f"approval {safe(record['id'])}: {record['status']}{always} by "
                  f"{safe(record['decided_by'] or '')}; run {safe(record['run_id'])} continues")


@app.command("approve")
def approve(approval_id: ApprovalArgument, reason: ReasonOption = None,
            always: Annotated[bool, typer.Option(
                "--always", help="Also approve, without asking, every later call of this tool "
                                 "with the same arguments in this run.")] = False,
            digest: DigestOption = None, as_json: JsonOption = False,
            url: UrlOption = None) -> None:
    """Let the call run (exactly once); the parked task continues."""
    _decide(approval_id, "approved", reason, as_json, url, digest=digest,
            scope="run" if always else "call")


@app.command("deny")
def deny(approval_id: ApprovalArgument, reason: ReasonOption = None,
         digest: DigestOption = None, as_json: JsonOption = False,
         url: UrlOption = None) -> None:
    """Refuse the call; the model reads the refusal and the reason as the tool's result."""
    _decide(approval_id, "denied", reason, as_json, url, digest=digest)


@app.command("edit")
def edit(approval_id: ApprovalArgument,
         args: Annotated[str, typer.Option(
             "--args", metavar="JSON", help="The arguments the call runs with instead, as a "
                                            "JSON object (checked against the tool's schema).")],
         reason: ReasonOption = None, digest: DigestOption = None,
         as_json: JsonOption = False, url: UrlOption = None) -> None:
    """Let the call run with other arguments; the model is told what changed."""
    try:
        arguments = json.loads(args)
    except ValueError as exc:
        raise ConfigError(f"--args is not JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise ConfigError("--args must be a JSON object: the tool's arguments, edited")
    _decide(approval_id, "edited", reason, as_json, url, digest=digest, arguments=arguments)


@app.command("answer")
def answer(approval_id: ApprovalArgument,
           text: Annotated[str, typer.Option(
               "--answer", metavar="TEXT", help="The tool's result, as the model will read "
                                                "it; the tool does not run.")],
           reason: ReasonOption = None, digest: DigestOption = None,
           as_json: JsonOption = False, url: UrlOption = None) -> None:
    """Answer in the tool's stead: the text is its result and the tool never runs."""
    _decide(approval_id, "answered", reason, as_json, url, digest=digest, answer=text)
