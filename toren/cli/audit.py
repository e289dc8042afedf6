"""``toren audit``: who did what, from where, and how it ended (the audit trail)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from toren.cli.operator import UrlOption, operate
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe
from toren.core.audit import MAX_LIMIT, AuditQuery, parse_moment


def audit(
    actor: Annotated[str | None, typer.Option(
        metavar="WHO", help="Only this actor's: a key's id or name, cli:<user>, or "
                            "<channel>:<user>.")] = None,
    action: Annotated[str | None, typer.Option(
        metavar="ACTION", help="Only this action (run.cancel) or the actions it starts "
                               "(approval).")] = None,
    agent: Annotated[str | None, typer.Option(metavar="NAME", help="Only this agent's.")] = None,
    run: Annotated[str | None, typer.Option(metavar="RUN_ID",
                                            help="Only this run's or session's.")] = None,
    outcome: Annotated[str | None, typer.Option(
        metavar="OUTCOME", help="Only this outcome: ok, or an error's code (forbidden, "
                                "not_found...).")] = None,
    since: Annotated[str | None, typer.Option(
        metavar="WHEN", help="Only entries at or after this: an age back from now (1h, 7d) "
                             "or an ISO 8601 time.")] = None,
    until: Annotated[str | None, typer.Option(
        metavar="WHEN", help="Only entries before this (an age or an ISO 8601 time).")] = None,
    limit: Annotated[int, typer.Option(metavar="N", min=1, max=MAX_LIMIT,
                                       help="At most this many.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False,
    url: UrlOption = None,
) -> None:
    """The audit trail, newest first: every state-changing call (runs started, cancelled,
    signalled, forked, upgraded, archived, restored; approvals decided; questions answered;
    keys created and revoked; files uploaded and deleted; schedules paused, resumed,
    triggered), allowed, denied or
    failed, with who, when, from where and how it ended. Through --url the key needs the
    audit:read scope."""
    # every filter checked here, before the database starts or a request goes
    AuditQuery(actor=actor, action=action, agent=agent, run_id=run, outcome=outcome,
               since=parse_moment(since, "--since") if since else None,
               until=parse_moment(until, "--until") if until else None,
               limit=limit).checked()
    filters: dict[str, Any] = {"actor": actor, "action": action, "agent": agent, "run": run,
                               "outcome": outcome, "since": since, "until": until,
                               "limit": limit}
    entries = operate(lambda op: op.audit(filters), url=url)
    if as_json:
        print_json({"entries": entries})
        return
    if not entries:
        console.print("No audit entries match.")
        return
    table = Table()
    for column in ("at", "actor", "source", "action", "on", "outcome", "from"):
        table.add_column(column, no_wrap=column in ("at", "action"))
    for entry in entries:
        on = " ".join(part for part in (entry["agent"], (entry["run_id"] or "")[:8],
                                        entry["target"]) if part)
        outcome_text = entry["outcome"] + (f" ({entry['status']})"
                                           if entry["status"] and entry["outcome"] != "ok"
                                           else "")
        table.add_row(entry["at"][:19].replace("T", " "), safe(entry["actor"]["name"]
                                                                or entry["actor"]["id"]),
                      entry["source"], safe(entry["action"]), safe(on), safe(outcome_text),
                      safe(entry["remote"] or ""))
    print_table(table)
