"""``toren keys``: create, list and revoke the API keys of the HTTP API."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

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
from toren.core.actors import cli_actor
from toren.core.scopes import DEFAULT_ROLE, ROLE_NAMES, SCOPES
from toren.keys import (
    ApiKey,
    KeyNotFound,
    check_key_grant,
    check_key_name,
    parse_expiry,
    parse_key,
)

if TYPE_CHECKING:
    from toren.host.runtime import Runtime

app = typer.Typer(help="API keys: create, list, revoke.", no_args_is_help=True)
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]


def _when(moment: datetime | None) -> str:
    # minutes: last_used_at is only recorded once a minute anyway
    return moment.strftime("%Y-%m-%d %H:%M") if moment else ""


def _role(key: ApiKey) -> str:
    return f"custom: {' '.join(key.scopes)}" if key.role == "custom" else key.role


def _grant(key: ApiKey) -> str:
    agents = ", ".join(key.agents) if key.agents is not None else "every agent"
    expires = f", expires {_when(key.expires_at)}" if key.expires_at else ""
    return f"role {_role(key)}, {safe(agents)}{expires}"


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="Who or what uses the key, e.g. `ci`.")],
    role: Annotated[str, typer.Option(
        "--role", metavar="ROLE", envvar="TOREN_KEY_ROLE",
        help=f"What it may do: {', '.join(ROLE_NAMES)} (custom: the --scope list). See "
             "docs/guides/auth.md.")] = DEFAULT_ROLE,
    scope: Annotated[list[str] | None, typer.Option(
        "--scope", metavar="SCOPE", envvar="TOREN_KEY_SCOPES",
        help="A scope of a custom key (repeat for more; TOREN_KEY_SCOPES: separated by "
             "spaces): " + ", ".join(SCOPES))] = None,
    agent: Annotated[list[str] | None, typer.Option(
        "--agent", metavar="NAME", envvar="TOREN_KEY_AGENTS",
        help="Limit it to this agent's runs, sessions, approvals and schedules (repeat for "
             "more; TOREN_KEY_AGENTS: separated by spaces). Default: every agent.")] = None,
    expires: Annotated[str | None, typer.Option(
        "--expires", metavar="WHEN", envvar="TOREN_KEY_EXPIRES",
        help="When it stops working: a lifetime (30d, 12h, 90m, 2w) or an ISO 8601 time. "
             "Default: never.")] = None,
    if_none: Annotated[bool, typer.Option(
        "--if-none", help="Create it only if no active key exists yet (the first boot of a "
                          "deployment); otherwise print that one exists and exit 0.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Create a key and print it, once: only its hash is stored."""
    check_key_name(name)  # before the database starts
    grant = check_key_grant(role.strip(), scope or (), agent)
    expires_at = parse_expiry(expires) if expires is not None else None

    async def create_key(rt: Runtime) -> tuple[ApiKey, str] | list[ApiKey]:
        async with rt.audit.recording(cli_actor(), "key.create", "cli", details={
                "name": name, "role": grant.role, "scopes": list(grant.scopes) or None,
                "agents": list(grant.agents or []) or None,
                "expires_at": expires}) as note:
            if if_none:
                made = await rt.keys.create_if_none(name, role=grant.role, scopes=grant.scopes,
                                                    agents=grant.agents, expires_at=expires_at)
            else:
                made = await rt.keys.create(name, role=grant.role, scopes=grant.scopes,
                                            agents=grant.agents, expires_at=expires_at)
            if isinstance(made, list):  # one is active already: nothing was created
                note.details["created"] = False
            else:
                note.target = made[0].id
            return made

    created = with_database(create_key, create=True)  # a key may come before `toren dev`
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
    err_console.print(f"Created API key [bold]{key.prefix}[/] ({safe(key.name)}, {_grant(key)}). "
                      "Copy it now: "
                      "it is shown only this once. Send it as `Authorization: Bearer <key>`.")
    console.print(token, markup=False)  # alone on stdout, so `KEY=$(toren keys create ci)`


@app.command("list")
def list_keys(as_json: JsonOption = False) -> None:
    """List keys, newest first: id, name, prefix, role, agents, created, last used, expires,
    revoked."""
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
    table.add_column("role")
    table.add_column("agents")
    for column in ("created", "last used", "expires", "revoked"):
        table.add_column(column)
    for key in keys:
        expires = _when(key.expires_at) + (" (expired)" if key.expired else "")
        table.add_row(key.id, safe(key.name), key.prefix, _role(key),
                      ", ".join(key.agents) if key.agents is not None else "all",
                      _when(key.created_at), _when(key.last_used_at), expires,
                      _when(key.revoked_at))
    print_table(table)


@app.command("revoke")
def revoke(
    id_or_prefix: Annotated[str, typer.Argument(
        metavar="ID_OR_PREFIX", help="The key's id or prefix (as `toren keys list` shows).")],
    as_json: JsonOption = False,
) -> None:
    """Revoke a key for good; running servers refuse it within a few seconds."""
    parsed = parse_key(id_or_prefix.strip())
    shown = parsed[0] if parsed else id_or_prefix  # never echo (or record) a whole key

    async def revoke_key(rt: Runtime) -> ApiKey:
        async with rt.audit.recording(cli_actor(), "key.revoke", "cli", target=shown) as note:
            key = await rt.keys.revoke(id_or_prefix)
            if key is None:
                raise KeyNotFound(f"no API key has the id or prefix {shown!r}; see "
                                  "`toren keys list`")
            note.target, note.details["name"] = key.id, key.name
            return key

    key = with_database(revoke_key)
    if as_json:
        print_json(key.to_json())
        return
    from toren.server.auth import CACHE_TTL_S  # the server module imports aiohttp: only here

    revoked_at = key.revoked_at.strftime("%Y-%m-%d %H:%M:%S") if key.revoked_at else ""
    console.print(f"Revoked API key {key.prefix} ({safe(key.name)}) at {revoked_at}; servers "
                  f"refuse it within {CACHE_TTL_S:g} seconds.")
