"""``toren keys``: create, list and revoke the API keys of the HTTP API."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from rich.table import Table

from toren.cli.common import with_database
from toren.cli.output import (
    JSON_OPTION_HELP,
    console,
    err_console,
    print_json,
    print_table,
    safe,
)
from toren.host.runtime import Runtime
from toren.keys import ApiKey, KeyNotFound, check_key_name, parse_key

app = typer.Typer(help="API keys: create, list, revoke.", no_args_is_help=True)
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]


def _when(moment: datetime | None) -> str:
    # minutes: last_used_at is only recorded once a minute anyway
    return moment.strftime("%Y-%m-%d %H:%M") if moment else ""


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="Who or what uses the key, e.g. `ci`.")],
    if_none: Annotated[bool, typer.Option(
        "--if-none", help="Create it only if no active key exists yet (the first boot of a "
                          "deployment); otherwise print that one exists and exit 0.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Create a key and print it, once: only its hash is stored."""
    check_key_name(name)  # before the database starts

    async def create_key(rt: Runtime) -> tuple[ApiKey, str] | list[ApiKey]:
        return await (rt.keys.create_if_none(name) if if_none else rt.keys.create(name))

    created = with_database(create_key)
    if isinstance(created, list):
        names = ", ".join(sorted(key.name for key in created))
        if as_json:
            print_json({"created": False, "active_keys": len(created)})
        else:
            err_console.print(f"An active API key exists already ({safe(names)}); none created. "
                              "Create more with `toren keys create NAME`.")
        return
    key, token = created
    if as_json:
        print_json(key.to_json() | {"key": token} | ({"created": True} if if_none else {}))
        return
    err_console.print(f"Created API key [bold]{key.prefix}[/] ({safe(key.name)}). Copy it now: "
                      "it is shown only this once. Send it as `Authorization: Bearer <key>`.")
    console.print(token, markup=False)  # alone on stdout, so `KEY=$(toren keys create ci)`


@app.command("list")
def list_keys(as_json: JsonOption = False) -> None:
    """List keys, newest first: id, name, prefix, created, last used, revoked."""
    keys = with_database(lambda rt: rt.keys.list_keys())
    if as_json:
        print_json({"keys": [key.to_json() for key in keys]})
        return
    if not keys:
        console.print("No API keys yet: create one with `toren keys create NAME`.")
        return
    table = Table()
    table.add_column("id", no_wrap=True)
    table.add_column("name")
    table.add_column("prefix", no_wrap=True)
    for column in ("created", "last used", "revoked"):
        table.add_column(column)
    for key in keys:
        table.add_row(key.id, safe(key.name), key.prefix, _when(key.created_at),
                      _when(key.last_used_at), _when(key.revoked_at))
    print_table(table)


@app.command("revoke")
def revoke(
    id_or_prefix: Annotated[str, typer.Argument(
        metavar="ID_OR_PREFIX", help="The key's id or prefix (as `toren keys list` shows).")],
    as_json: JsonOption = False,
) -> None:
    """Revoke a key for good; running servers refuse it within a few seconds."""
    key = with_database(lambda rt: rt.keys.revoke(id_or_prefix))
    if key is None:
        parsed = parse_key(id_or_prefix.strip())
        shown = parsed[0] if parsed else id_or_prefix  # never echo a whole key's secret
        raise KeyNotFound(f"no API key has the id or prefix {shown!r}; see `toren keys list`")
    if as_json:
        print_json(key.to_json())
        return
    from toren.server.auth import CACHE_TTL_S  # the server module imports aiohttp: only here

    revoked_at = key.revoked_at.strftime("%Y-%m-%d %H:%M:%S") if key.revoked_at else ""
    console.print(f"Revoked API key {key.prefix} ({safe(key.name)}) at {revoked_at}; servers "
                  f"refuse it within {CACHE_TTL_S:g} seconds.")
