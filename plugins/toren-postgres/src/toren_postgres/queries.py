"""Named SQL queries from ``sql/queries.sql`` (procrastinate-style ``-- name --`` blocks)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from psycopg import sql
from psycopg.abc import AdaptContext

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


class RenderedQuery(sql.Composed):
    """A composed query whose text is rendered once, not at every execution.

    psycopg renders a ``Composed`` each time it runs one (each identifier escaped through
    libpq, each part encoded): a measurable share of an append's CPU on the worker's hot
    path. The queries hold ASCII only and agents' schema names are ``[a-z0-9_]``, so the
    rendering does not depend on the connection (its encoding or libpq's escaping).
    """

    def __init__(self, composed: sql.Composed) -> None:
        super().__init__(list(composed))
        self._rendered = composed.as_bytes(None)

    def as_bytes(self, context: AdaptContext | None = None) -> bytes:
        return self._rendered


@cache
def agent_query(name: str, schema: str) -> sql.Composed:
    """A named query with ``{runs}``, ``{events}``, ``{prompts}``, ``{tool_blobs}``,
    ``{tool_manifests}``, ``{budgets}``, ``{budget_warnings}``, ``{append_one}``,
    ``{acquire_and_load}``, ``{send_signal}``, ``{run_totals}``, ``{model_call_costs}`` and
    ``{model_call_cost_rows}`` bound to one agent's schema (cached, rendered once:
    ``RenderedQuery``)."""
    return RenderedQuery(sql.SQL(query(name)).format(
        runs=sql.Identifier(schema, "runs"), events=sql.Identifier(schema, "events"),
        prompts=sql.Identifier(schema, "prompts"),
        tool_blobs=sql.Identifier(schema, "tool_blobs"),
        tool_manifests=sql.Identifier(schema, "tool_manifests"),
        budgets=sql.Identifier(schema, "budget_reservations"),
        budget_warnings=sql.Identifier(schema, "budget_warnings"),
        append_one=sql.Identifier(schema, "append_one"),
        acquire_and_load=sql.Identifier(schema, "acquire_and_load"),
        send_signal=sql.Identifier(schema, "send_signal"),
        run_totals=sql.Identifier(schema, "run_totals"),
        model_call_costs=sql.Identifier(schema, "model_call_costs"),
        model_call_cost_rows=sql.Identifier(schema, "model_call_cost_rows")))
