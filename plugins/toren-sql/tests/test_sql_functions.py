"""Functions that act outside the read-only transaction are refused however the query spells
them, even for an agent that allows a privileged role; names in strings and comments are not."""

from __future__ import annotations

import json
import time

import pytest
from toren_sql.query import run_readonly_query
from toren_sql.screen import REFUSED, identifiers, refused_function

from toren.errors import ToolError


def unicode_escaped(name: str, escape: str = "\\", six: bool = False) -> str:
    return "".join(f"{escape}+{ord(c):06x}" if six else f"{escape}{ord(c):04x}" for c in name)


def mixed_case(name: str) -> str:
    return "".join(c.upper() if i % 2 else c for i, c in enumerate(name))


#: Ways to write a call of ``name`` with the argument 'a': id -> (query, what ``upper`` gives).
#: Run with ``upper`` each is a real call in Postgres (test_each_spelling_calls_the_function).
SPELLINGS = {
    "plain": (lambda f: f"SELECT {f}('a')", [["A"]]),
    "quoted": (lambda f: f'SELECT "{f}"(\'a\')', [["A"]]),
    "qualified": (lambda f: f"SELECT pg_catalog.{f}('a')", [["A"]]),
    "qualified and quoted": (lambda f: f'SELECT "pg_catalog"."{f}"(\'a\')', [["A"]]),
    "upper case": (lambda f: f"SELECT PG_CATALOG.{f.upper()}('a')", [["A"]]),
    "mixed case": (lambda f: f"SELECT {mixed_case(f)}('a')", [["A"]]),
    "comments between": (lambda f: f"SELECT pg_catalog/* x */./* y /* nested */ */{f}"
                                   f"/* z */('a') -- after", [["A"]]),
    "line comment between": (lambda f: f"SELECT pg_catalog -- x\n.{f}\n('a')", [["A"]]),
    "unicode escapes": (lambda f: f'SELECT U&"{unicode_escaped(f)}"(\'a\')', [["A"]]),
    "six-digit unicode escapes": (lambda f: f'SELECT u&"{unicode_escaped(f, six=True)}"(\'a\')',
                                  [["A"]]),
    "unicode escapes, own escape": (
        lambda f: f'SELECT U&"{unicode_escaped(f, "!")}" /* c */ UESCAPE \'!\' (\'a\')', [["A"]]),
    "unicode escapes, escape in a dollar string": (
        lambda f: f'SELECT U&"{unicode_escaped(f, "*")}" UESCAPE $e$*$e$ (\'a\')', [["A"]]),
    "attribute notation": (lambda f: f"SELECT ('a').{f}", [["A"]]),
    "in FROM": (lambda f: f"SELECT * FROM {f}('a')", [["A"]]),
    "in LIMIT": (lambda f: f"SELECT 1 LIMIT length({f}('a'))", [[1]]),
    "in multi-row VALUES": (lambda f: f"VALUES ({f}('a')), ('b')", [["A"], ["b"]]),
    "in a CTE": (lambda f: f"WITH t AS (SELECT {f}('a') AS v) SELECT v FROM t", [["A"]]),
    "in a subquery": (lambda f: f"SELECT 1 WHERE (SELECT {f}($$a$$)) = 'A'", [[1]]),
    "after an escaped quote": (lambda f: f"SELECT E'\\'', {f}('a')", [["'", "A"]]),
}
#: The functions refused whatever the role (the issue's list and its neighbours).
FUNCTIONS = ["pg_reload_conf", "pg_terminate_backend", "pg_cancel_backend", "pg_notify",
             "pg_advisory_lock", "pg_advisory_xact_lock_shared", "pg_try_advisory_lock",
             "pg_advisory_unlock_all", "lo_import", "lo_export", "lo_unlink", "lo_create",
             "lowrite", "nextval", "setval", "pg_read_file", "pg_read_binary_file", "pg_ls_dir",
             "pg_stat_file", "dblink_exec", "query_to_xml", "pg_rotate_logfile",
             "pg_stat_reset"]


async def rows(url: str, text: str) -> object:
    result = await run_readonly_query(url, text, max_rows=100, max_bytes=65536, timeout_s=10,
                                      allow_privileged_role=True)
    return json.loads(result.to_json())["rows"]


@pytest.mark.parametrize("spelling", list(SPELLINGS))
async def test_each_spelling_calls_the_function(postgres_server_url: str,
                                                spelling: str) -> None:
    """With a function sql_query allows, every spelling below runs and calls it: so each is
    a real way to reach the refused ones."""
    write, expected = SPELLINGS[spelling]
    assert await rows(postgres_server_url, write("upper")) == expected


@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("function", FUNCTIONS)
async def test_refused_functions_are_refused_in_every_spelling_even_for_a_superuser(
        postgres_server_url: str, function: str, spelling: str) -> None:
    write, _ = SPELLINGS[spelling]
    with pytest.raises(ToolError) as info:
        await rows(postgres_server_url, write(function))
    assert info.value.message.startswith(f"refused: the query calls {function}, which ")
    assert "sql_query never runs it, whatever the role" in info.value.message


def test_every_refused_function_is_a_name_postgres_reads_back() -> None:
    """Each entry of the list is written as Postgres folds it (lower case), or it could
    never match."""
    assert all(list(identifiers(name)) == [name] for name in REFUSED)


async def test_advisory_locks_are_refused_for_a_select_only_role_too(
        select_only_url: str) -> None:
    with pytest.raises(ToolError, match="takes advisory locks that other sessions wait on"):
        await run_readonly_query(select_only_url, "SELECT pg_advisory_lock(1)", max_rows=1,
                                 max_bytes=65536, timeout_s=10)


NOT_CALLS = {
    "in strings": "SELECT 'pg_reload_conf()' AS a, E'nextval(\\'x\\')' AS b, U&'lo_import' AS c",
    "in dollar quotes": "SELECT $$pg_terminate_backend(1)$$ AS a, $q$ $$ lo_unlink $$ $q$ AS b",
    "in comments": "SELECT 1 AS a /* pg_reload_conf() /* nested */ pg_notify('c', 'x') */ "
                   "-- pg_advisory_lock(1)",
    "a longer name": "SELECT 1 AS pg_reload_conf_count, 2 AS nextval_seen",
    "a LIKE pattern": "SELECT count(*) FROM information_schema.columns "
                      "WHERE column_default LIKE 'nextval(%'",
}


@pytest.mark.parametrize("text", list(NOT_CALLS.values()), ids=list(NOT_CALLS))
async def test_names_in_strings_and_comments_are_not_calls(postgres_server_url: str,
                                                           text: str) -> None:
    assert await rows(postgres_server_url, text)


async def test_a_database_whose_strings_take_backslash_escapes_is_read_as_the_screen_reads_it(
        sql_database: str) -> None:
    """With standard_conforming_strings off, '\\'' would end after the escaped quote and the
    rest be code; sql_query turns it on for its session, so the text stays one string."""
    import psycopg
    from psycopg import sql

    dbname = psycopg.conninfo.conninfo_to_dict(sql_database)["dbname"]
    with psycopg.connect(sql_database, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} SET standard_conforming_strings = off").format(
            sql.Identifier(str(dbname))))
    text = "SELECT '\\'', upper($$a$$) --'"  # upper stands for any refused function
    with psycopg.connect(sql_database, autocommit=True) as conn:  # what the text would do
        assert conn.execute(text).fetchone() == ("'", "A")  # type: ignore[arg-type]
    assert await rows(sql_database, text) == [["\\', upper($$a$$) --"]]


async def test_a_unicode_name_with_too_many_possible_escapes_is_refused(
        postgres_server_url: str) -> None:
    """Each of G..P could be the UESCAPE character; sql_query does not try them all."""
    name = "".join(f"{letter}0041" for letter in "GHIJKLMNOP")
    with pytest.raises(ToolError, match="has more possible UESCAPE characters than sql_query "
                                        "tries; write the name without escapes"):
        await rows(postgres_server_url, f'SELECT 1 AS U&"{name}" UESCAPE \'G\'')


PATHOLOGICAL = {
    "unterminated nested comments": "SELECT 1 " + "/*" * 300_000,
    "quotes": "SELECT " + "''" * 300_000,
    "operators": "SELECT 1" + "+-" * 300_000,
    "many names": "SELECT " + ", ".join(f"c{i}" for i in range(100_000)),
    "many unicode names": "SELECT " + ", ".join('U&"!0061bc" UESCAPE \'!\'' for _ in range(30_000)),
    "a long unicode name": 'SELECT U&"' + "abcdefgh" * 100_000 + '"',
}


@pytest.mark.parametrize("text", list(PATHOLOGICAL.values()), ids=list(PATHOLOGICAL))
def test_screening_takes_time_in_proportion_to_the_text(text: str) -> None:
    """No shape of text makes the screen slow down faster than the text grows (it runs in a
    thread for long texts, but a quadratic case would still hold a thread for hours)."""
    started = time.monotonic()
    assert refused_function(text) is None
    assert time.monotonic() - started < 20  # about a second on a quiet machine
