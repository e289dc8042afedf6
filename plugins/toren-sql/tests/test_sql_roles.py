"""Roles that reach outside the database (superusers, members of pg_read_server_files and the
like, directly or not) are refused unless the agent allows a privileged role."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from toren_sql.query import PRIVILEGED_ROLES, run_readonly_query

from toren.errors import ToolError

#: conftest's make_role: a new login role with the given grants (returns url, name, through).
MakeRole = Callable[..., Any]

WAY_OUT = ("give sql_query a role that may only SELECT (docs/tools/database.md, 'A SELECT-only "
           "role'), or set sql: {allowPrivilegedRole: true} in the agent's agent.yaml")


async def count_orders(url: str, *, allow_privileged_role: bool = False) -> object:
    result = await run_readonly_query(url, "SELECT count(*) FROM orders", max_rows=10,
                                      max_bytes=65536, timeout_s=10,
                                      allow_privileged_role=allow_privileged_role)
    return json.loads(result.to_json())["rows"]


async def refusal(url: str) -> str:
    with pytest.raises(ToolError) as info:
        await count_orders(url)
    return info.value.message


async def test_a_superuser_is_refused_naming_the_role_and_the_recipe(sql_database: str) -> None:
    role = conninfo_to_dict(sql_database)["user"]
    message = await refusal(sql_database)
    assert message == (f"refused to run: the database role {role!r} is a superuser, so a query "
                       f"could do anything the server can; {WAY_OUT} to accept that")
    assert await count_orders(sql_database, allow_privileged_role=True) == [[50]]


async def test_a_superuser_login_role_is_refused(make_role: MakeRole) -> None:
    role = make_role(attributes="SUPERUSER")
    assert f"{role.name!r} is a superuser" in await refusal(role.url)


@pytest.mark.parametrize("predefined", sorted(PRIVILEGED_ROLES))
async def test_each_predefined_role_that_reaches_outside_is_refused(
        make_role: MakeRole, predefined: str) -> None:
    role = make_role(predefined)
    message = await refusal(role.url)
    assert message.startswith(
        f"refused to run: the database role {role.name!r} is a member of {predefined} "
        f"(directly or through other roles), so a query could {PRIVILEGED_ROLES[predefined]}; ")
    assert WAY_OUT in message
    assert await count_orders(role.url, allow_privileged_role=True) == [[50]]


async def test_a_membership_through_another_role_is_refused(make_role: MakeRole) -> None:
    role = make_role("pg_signal_backend", "pg_read_server_files", through="NOLOGIN")
    assert (f"{role.name!r} is a member of pg_read_server_files and pg_signal_backend "
            "(directly or through other roles), so a query could read any file the database "
            "server can and cancel or terminate other sessions") in await refusal(role.url)


async def test_a_noinherit_membership_is_refused(make_role: MakeRole) -> None:
    """NOINHERIT only means SET ROLE first, which a query can do with set_config('role')."""
    role = make_role("pg_read_server_files", attributes="NOINHERIT")
    assert "is a member of pg_read_server_files" in await refusal(role.url)


async def test_a_member_of_a_superuser_role_is_refused(make_role: MakeRole) -> None:
    role = make_role(through="SUPERUSER NOLOGIN")
    assert (f"{role.name!r} is a member of the superuser role {role.through!r} (SET ROLE "
            "makes it one), so a query could do anything the server can") in \
        await refusal(role.url)


async def test_a_superuser_login_behind_set_role_is_refused(sql_database: str,
                                                             select_only_url: str) -> None:
    """A superuser URL that starts as a SELECT-only role (options=-c role=...): a query could
    go back with set_config('role', 'none', true), so the login role is what counts."""
    reader = conninfo_to_dict(select_only_url)["user"]
    url = make_conninfo(sql_database, options=f"-c role={reader}")
    role = conninfo_to_dict(sql_database)["user"]
    assert f"the database role {role!r} is a superuser" in await refusal(url)


async def test_roles_with_other_grants_run(make_role: MakeRole) -> None:
    """Predefined roles that only read (statistics, settings, all data) are not refused."""
    role = make_role("pg_monitor", "pg_read_all_data", through="NOLOGIN")
    assert await count_orders(role.url) == [[50]]


async def test_the_privileged_role_is_checked_before_the_query_runs(
        make_role: MakeRole, sql_database: str) -> None:
    """The refusal comes before the query: one that fails would otherwise say so."""
    role = make_role("pg_signal_backend")
    with pytest.raises(ToolError, match="refused to run: the database role"):
        await run_readonly_query(role.url, "SELECT 1/0", max_rows=1, max_bytes=65536,
                                 timeout_s=10)
