"""Named SQL queries from ``sql/queries.sql`` (procrastinate-style ``-- name --`` blocks)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from psycopg import sql

_HEADER = re.compile(r"^-- ([a-z_]+) --$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """Split a file of ``-- name --`` blocks into a name -> SQL mapping."""
    parts = _HEADER.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


@cache
def queries() -> dict[str, str]:
    text = resources.files("toren_postgres").joinpath("sql/queries.sql").read_text("utf-8")
    return parse_queries(text)


def query(name: str) -> str:
    return queries()[name]


@cache
def agent_query(name: str, schema: str) -> sql.Composed:
    """A named query with ``{runs}``, ``{events}``, ``{prompts}``, ``{tool_blobs}``,
    ``{tool_manifests}``, ``{budgets}`` and ``{budget_warnings}`` bound to one agent's schema
    (cached)."""
    return sql.SQL(query(name)).format(
        runs=sql.Identifier(schema, "runs"), events=sql.Identifier(schema, "events"),
        prompts=sql.Identifier(schema, "prompts"),
        tool_blobs=sql.Identifier(schema, "tool_blobs"),
        tool_manifests=sql.Identifier(schema, "tool_manifests"),
        budgets=sql.Identifier(schema, "budget_reservations"),
        budget_warnings=sql.Identifier(schema, "budget_warnings"))
