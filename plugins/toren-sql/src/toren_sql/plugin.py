"""The plugin module (entry point ``sql`` in group ``toren``): registers ``sql_query``."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import toren
from toren.plugin import ToolError, positive_number

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.0,<2"

#: The database the tool reads (an agent may rename it: tools: [{name: sql_query, env: ...}]).
URL_VAR = "SQL_DATABASE_URL"
TIMEOUT_VAR = "TOREN_SQL_TIMEOUT"
MAX_ROWS_VAR = "TOREN_SQL_MAX_ROWS"


def settings(env: Mapping[str, str] | None = None) -> tuple[float, int]:
    """Seconds a query may run (``TOREN_SQL_TIMEOUT``, 30) and the most rows a call returns
    (``TOREN_SQL_MAX_ROWS``, 1000)."""
    env = os.environ if env is None else env
    return (positive_number(env, TIMEOUT_VAR, 30.0, float),
            positive_number(env, MAX_ROWS_VAR, 1000, int))


def allows_privileged_role(agent_config: Mapping[str, Any]) -> bool:
    """Whether the agent set ``sql: {allowPrivilegedRole: true}`` in its agent.yaml."""
    section = agent_config.get("sql") or {}
    return section.get("allowPrivilegedRole") is True


@toren.tool(idempotent=True, requires_env=(URL_VAR,))
async def sql_query(query: str, max_rows: int = 100) -> str:
    """Run one read-only SQL SELECT against the database and get its rows back as JSON.

    The result has columns (name and Postgres type), rows (lists of values, in column order),
    row_count, and truncated/truncated_by when rows were left out (max_rows, or the size
    limit of a tool result): then narrow the query or aggregate. One statement per call;
    writes of any kind, and functions that act outside the query (pg_terminate_backend,
    advisory locks, large objects, nextval, ...), are refused.

    Args:
        query: One SELECT statement (WITH ... SELECT and VALUES too), e.g.
            "SELECT status, count(*) FROM orders GROUP BY status".
        max_rows: The most rows to return.
    """
    call = toren.current_tool_call()
    url = call.getenv(URL_VAR)
    if url is None:
        raise ToolError(f"{call.env_var(URL_VAR)} is not set")
    timeout_s, row_cap = settings()
    from toren_sql.query import run_readonly_query  # psycopg: when the tool is first used

    return (await run_readonly_query(
        url, query, max_rows=max(1, min(max_rows, row_cap)),
        max_bytes=call.max_output_bytes, timeout_s=timeout_s,
        allow_privileged_role=allows_privileged_role(call.agent_config))).to_json()


@toren.hookimpl
def register_tools(register: Callable[..., None]) -> None:
    register(sql_query)
