"""sql_query against the real Postgres: hostile queries are refused or capped, nothing changes.

These run as a superuser (``allow_privileged_role``): each layer must hold even under the role
the docs tell people not to use."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from toren_sql.query import run_readonly_query

from toren.errors import ToolError

Snapshot = Callable[[str], tuple[object, ...]]


async def query(url: str, text: str, *, max_rows: int = 100, max_bytes: int = 65536,
                timeout_s: float = 5, allow_privileged_role: bool = True) -> dict[str, object]:
    result = await run_readonly_query(url, text, max_rows=max_rows, max_bytes=max_bytes,
                                      timeout_s=timeout_s,
                                      allow_privileged_role=allow_privileged_role)
    decoded: dict[str, object] = json.loads(result.to_json())
    return decoded


async def test_a_select_returns_columns_with_types_and_rows(sql_database: str) -> None:
    result = await query(sql_database, "SELECT id, customer, total, placed_at FROM orders "
                                       "WHERE id <= 2 ORDER BY id;")
    assert result["columns"] == [{"name": "id", "type": "int4"},
                                 {"name": "customer", "type": "text"},
                                 {"name": "total", "type": "numeric(10,2)"},
                                 {"name": "placed_at", "type": "timestamptz"}]
    assert result["rows"] == [[1, "customer 1", "1.50", "2026-01-02T03:04:05+00:00"],
                              [2, "customer 2", "3.00", "2026-01-02T03:04:05+00:00"]]
    assert (result["row_count"], result["truncated"]) == (2, False)


HOSTILE = {
    "stacked write": ("SELECT 1; DELETE FROM orders", "more than one statement"),
    "commit then write": ("COMMIT; DELETE FROM orders", 'syntax error at or near "COMMIT"'),
    "rollback then write": ("ROLLBACK; BEGIN; DELETE FROM orders; COMMIT",
                            'syntax error at or near "ROLLBACK"'),
    "stacked after a select": ("SELECT 1; COMMIT; BEGIN READ WRITE; DELETE FROM orders",
                               "more than one statement"),
    "plain delete": ("DELETE FROM orders", "syntax error"),
    "update": ("UPDATE orders SET total = 0", "syntax error"),
    "truncate": ("TRUNCATE orders", "syntax error"),
    "drop": ("DROP TABLE orders", "syntax error"),
    "transaction read-write": ("SELECT set_config('transaction_read_only', 'off', true)",
                               "read-write"),
    "do block": ("DO $$ BEGIN DELETE FROM orders; END $$", "syntax error"),
    "copy to program": ("COPY (SELECT 1) TO PROGRAM 'touch /tmp/toren-sql-pwned'",
                        "syntax error"),
    "writable cte": ("WITH gone AS (DELETE FROM orders RETURNING *) SELECT count(*) FROM gone",
                     "data-modifying"),
    "function that writes": ("SELECT wipe_orders()", "read-only"),
    "security definer function": ("SELECT wipe_orders_definer()", "read-only"),
    "procedure": ("CALL wipe_orders_procedure()", "syntax error"),
    "nextval": ("SELECT nextval('invoice_numbers')", "calls nextval, which advances a sequence"),
    "row locks": ("SELECT * FROM orders FOR UPDATE", "read-only"),
    "select into": ("SELECT * INTO stolen FROM orders", "SELECT ... INTO is not allowed"),
    "set role": ("SET ROLE postgres", "syntax error"),
    "create table as": ("CREATE TABLE stolen AS SELECT * FROM orders", "syntax error"),
    "empty": ("  ;  ", "empty"),
}


@pytest.mark.parametrize("text,reason", list(HOSTILE.values()), ids=list(HOSTILE))
async def test_hostile_queries_are_refused_and_the_table_is_unchanged(
        sql_database: str, text: str, reason: str, table_snapshot: Snapshot) -> None:
    snapshot = table_snapshot
    before = snapshot(sql_database)
    with pytest.raises(ToolError) as info:
        await query(sql_database, text)
    assert reason in info.value.message
    assert snapshot(sql_database) == before


async def test_turning_off_default_read_only_does_not_open_a_later_call(
        sql_database: str, table_snapshot: Snapshot) -> None:
    snapshot = table_snapshot
    before = snapshot(sql_database)
    # allowed (it only sets a default for later transactions of this session) ...
    first = await query(sql_database, "SELECT set_config('default_transaction_read_only', "
                                      "'off', false)")
    assert first["rows"] == [["off"]]
    # ... but the session ends with the call, and each call begins READ ONLY anyway
    with pytest.raises(ToolError, match="read-only"):
        await query(sql_database, "SELECT wipe_orders()")
    assert snapshot(sql_database) == before


async def test_a_query_that_sleeps_is_cancelled_at_the_timeout(sql_database: str) -> None:
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"ran past its 1 s limit and was cancelled"):
        await query(sql_database, "SELECT pg_sleep(60)", timeout_s=1)
    assert time.monotonic() - started < 30


async def test_ten_million_rows_are_capped_without_being_read(sql_database: str) -> None:
    started = time.monotonic()
    # a nested loop over two small series streams its 10,000,000 rows (one big series would be
    # materialised by Postgres before the first row)
    result = await query(sql_database, "SELECT a * 10000 + b FROM generate_series(0, 999) a, "
                                       "generate_series(1, 10000) b", max_rows=1000)
    assert result["row_count"] == 1000 and result["rows"][-1] == [1000]  # type: ignore[index]
    assert (result["truncated"], result["truncated_by"]) == (True, "max_rows")
    assert time.monotonic() - started < 30  # one batch, not ten million rows


async def test_wide_rows_are_capped_by_bytes_and_fit_the_tool_output_limit(
        sql_database: str) -> None:
    result = await run_readonly_query(
        sql_database, "SELECT g, repeat('x', 1000) FROM generate_series(1, 500) g",
        max_rows=500, max_bytes=4096, timeout_s=5, allow_privileged_role=True)
    text = result.to_json()
    assert len(text.encode()) <= 4096
    decoded = json.loads(text)
    assert 0 < decoded["row_count"] < 5 and decoded["truncated_by"] == "max_bytes"


async def test_values_json_cannot_hold_are_still_returned(sql_database: str) -> None:
    result = await query(sql_database, "SELECT 'NaN'::float8, '\\xdead'::bytea, "
                                       "gen_random_uuid() IS NOT NULL, interval '1 day', "
                                       "'{\"a\": 1}'::jsonb")
    assert result["rows"] == [["nan", "\\xdead", True, "1 day, 0:00:00", {"a": 1}]]


async def test_an_unreachable_database_is_a_tool_error() -> None:
    with pytest.raises(ToolError, match="cannot connect to the database"):
        await query("postgresql://nobody@127.0.0.1:1/none", "SELECT 1")


async def test_a_select_only_role_as_the_docs_create_it(sql_database: str,
                                                       select_only_url: str) -> None:
    """The SQL in docs/tools/database.md makes a role that can read and not write, even directly,
    and that sql_query runs without allowPrivilegedRole."""
    import psycopg

    result = await query(select_only_url, "SELECT count(*) FROM orders",
                         allow_privileged_role=False)
    assert result["rows"] == [[50]]
    with psycopg.connect(select_only_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("DELETE FROM orders")  # the role's default
        conn.execute("SET default_transaction_read_only = off")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM orders")  # the grants
