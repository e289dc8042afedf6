"""A database with a table, a sequence and functions that write, for the hostile queries; roles
made as docs/tools/database.md makes them, and roles with more privileges than that."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

DOCS = Path(__file__).parents[3] / "docs" / "tools" / "database.md"

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


def docs_recipe() -> str:
    """The SELECT-only role's SQL as docs/tools/database.md gives it (its first sql block)."""
    return DOCS.read_text().split("```sql\n", 1)[1].split("```", 1)[0]


class Role(NamedTuple):
    url: str
    name: str
    #: The role between it and its grants, when there is one.
    through: str | None


MakeRole = Callable[..., Role]


@pytest.fixture
def make_role(sql_database: str) -> Iterator[MakeRole]:
    """``make_role(*grants, attributes="", through=None)``: a new login role with SELECT on
    ``orders``, member of the roles ``grants`` (directly, or through a new role with the
    attributes ``through``, e.g. ``"NOLOGIN"`` or ``"SUPERUSER NOLOGIN"``). Roles are
    cluster-wide, so names are unique; they are dropped after the test."""
    made: list[str] = []

    def make(*grants: str, attributes: str = "", through: str | None = None) -> Role:
        name = f"toren_sql_{uuid.uuid4().hex[:10]}"
        via = f"{name}_via" if through is not None else None
        with psycopg.connect(sql_database, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN " + attributes).format(
                sql.Identifier(name)))
            made.append(name)
            conn.execute(sql.SQL("GRANT SELECT ON orders TO {}").format(sql.Identifier(name)))
            member = name
            if via is not None:
                conn.execute(sql.SQL("CREATE ROLE {} " + str(through)).format(
                    sql.Identifier(via)))
                made.append(via)
                conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(via),
                                                              sql.Identifier(name)))
                member = via
            for grant in grants:
                conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(grant),
                                                              sql.Identifier(member)))
        return Role(make_conninfo(sql_database, user=name), name, via)

    yield make
    with psycopg.connect(sql_database, autocommit=True) as conn:
        for name in reversed(made):
            conn.execute(sql.SQL("DROP OWNED BY {}; DROP ROLE {}").format(
                sql.Identifier(name), sql.Identifier(name)))


@pytest.fixture
def select_only_url(sql_database: str) -> Iterator[str]:
    """A role made by the docs' recipe as it stands (a unique name: roles are cluster-wide)."""
    name = f"toren_reader_{uuid.uuid4().hex[:10]}"
    dbname = str(conninfo_to_dict(sql_database)["dbname"])
    script = (docs_recipe().replace("toren_reader", name).replace("analytics_db", dbname)
              .replace("change-me", "reader-password"))
    with psycopg.connect(sql_database, autocommit=True) as conn:
        conn.execute(script)  # type: ignore[arg-type]
    yield make_conninfo(sql_database, user=name, password="reader-password")
    with psycopg.connect(sql_database, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}; DROP ROLE {}").format(
            sql.Identifier(name), sql.Identifier(name)))
