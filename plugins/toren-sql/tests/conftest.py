"""A database with a table, a sequence and functions that write, for the hostile queries."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

SETUP = """
CREATE TABLE orders (id serial PRIMARY KEY, customer text NOT NULL, total numeric(10, 2),
                     placed_at timestamptz NOT NULL DEFAULT '2026-01-02T03:04:05Z');
INSERT INTO orders (customer, total) SELECT 'customer ' || g, g * 1.5 FROM generate_series(1, 50) g;
CREATE SEQUENCE invoice_numbers;
CREATE FUNCTION wipe_orders() RETURNS integer LANGUAGE plpgsql AS $$
BEGIN DELETE FROM orders; RETURN 1; END $$;
CREATE FUNCTION wipe_orders_definer() RETURNS integer LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN DELETE FROM orders; RETURN 1; END $$;
CREATE PROCEDURE wipe_orders_procedure() LANGUAGE sql AS $$ DELETE FROM orders $$;
"""


@pytest.fixture
def sql_database(database_url: str) -> str:
    """``database_url`` with the ``orders`` table (50 rows) and writing functions."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(SETUP)
    return database_url


def snapshot(url: str) -> tuple[object, ...]:
    """Everything a write could change: the rows, the sequence, the tables in public (and the
    file a COPY ... TO PROGRAM would create)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT md5(string_agg(o::text, ',' ORDER BY id)) FROM orders o"
                            ).fetchone()
        sequence = conn.execute("SELECT last_value, is_called FROM invoice_numbers").fetchone()
        tables = conn.execute("SELECT array_agg(tablename ORDER BY tablename) FROM pg_tables "
                              "WHERE schemaname NOT IN ('pg_catalog', 'information_schema', "
                              "'toren_control')").fetchone()
        return rows, sequence, tables, Path("/tmp/toren-sql-pwned").exists()


@pytest.fixture
def table_snapshot() -> Callable[[str], tuple[object, ...]]:
    """``table_snapshot(url)``: what a write could change, to compare before and after."""
    return snapshot
