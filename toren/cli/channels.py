"""``toren channels pair``: the people who asked to talk to an agent over a chat app."""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from toren.cli.common import with_database
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe

if TYPE_CHECKING:
    from toren.host.runtime import Runtime
    from toren.seams.store.channels import ChannelPairing

app = typer.Typer(help="Chat channels (Telegram, WhatsApp): pairing of unknown people.",
                  no_args_is_help=True)
pair = typer.Typer(help="People who wrote to an agent without being allow-listed: list them, "
                        "approve or deny their code.", no_args_is_help=True)
app.add_typer(pair, name="pair")
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
CodeArgument = Annotated[str, typer.Argument(metavar="CODE",
                                             help="The code the person was sent.")]


@pair.command("list")
def list_(
    # the store's PAIRING_STATUSES, written out: importing the store would slow every command
    status: Annotated[str, typer.Option(metavar="STATUS", help="Only these "
                                        "(pending, approved, denied).")] = "pending",
    all_: Annotated[bool, typer.Option("--all", help="Every status.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Pairing requests, newest first (pending ones unless --status or --all)."""
    found = with_database(lambda rt: rt.list_pairings(None if all_ else status))
    if as_json:
        print_json({"pairings": [pairing.to_json() for pairing in found]})
        return
    table = Table()
    for column in ("code", "channel", "agent", "user", "name", "status", "asked"):
        table.add_column(column)
    for p in found:
        table.add_row(p.code, safe(p.channel), safe(p.agent), safe(p.user_id),
                      safe(p.display_name), p.status,
                      p.created_at.strftime("%Y-%m-%d %H:%M") if p.created_at else "")
    print_table(table)


def _decide(code: str, outcome: str, as_json: bool) -> None:
    who = f"cli:{getpass.getuser()}"

    async def decide(rt: Runtime) -> tuple[ChannelPairing, bool]:
        return await rt.decide_pairing(code, outcome, who)

    record, decided = with_database(decide)
    if as_json:
        print_json(record.to_json() | {"decided_now": decided})
        return
    if not decided:
        console.print(f"pairing {record.code} was already {record.status} by "
                      f"{safe(record.decided_by or '')}; unchanged")
        return
    verb = "may now talk to" if outcome == "approved" else "may not talk to"
    console.print(f"{safe(record.display_name or record.user_id)} ({record.channel} user "
                  f"{safe(record.user_id)}) {verb} {safe(record.agent)}")


@pair.command("approve")
def approve(code: CodeArgument, as_json: JsonOption = False) -> None:
    """Let the person with this code talk to the agent (their next message is answered)."""
    _decide(code, "approved", as_json)


@pair.command("deny")
def deny(code: CodeArgument, as_json: JsonOption = False) -> None:
    """Refuse the person with this code: they get one polite refusal, then silence."""
    _decide(code, "denied", as_json)
