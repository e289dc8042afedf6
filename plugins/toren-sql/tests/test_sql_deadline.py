"""One deadline over the whole sql_query call: a query that resets its own statement_timeout,
or spreads its time over many FETCHes, is cancelled at TOREN_SQL_TIMEOUT and its backend ends."""

from __future__ import annotations

import asyncio
import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from toren_sql.query import run_readonly_query

from toren.errors import ToolError

#: The reported query: the first FETCH (200 rows) is quick and turns the server-side timeout
#: off for the transaction; every later FETCH would then sleep 5 s a row, for 800 rows.
RESETS_ITS_TIMEOUT = ("SELECT g, set_config('statement_timeout', '0', true), "
                      "pg_sleep(CASE WHEN g > 200 THEN 5 ELSE 0 END) "
                      "FROM generate_series(1, 1000) g")
#: Generous: the machine is shared and noisy; before the fix this ran for over an hour.
MARGIN_S = 15


def backends(server_url: str, application_name: str) -> list[tuple[str, str]]:
    """The (state, query) of every backend still connected under ``application_name``."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        return [(str(state), str(query)) for state, query in conn.execute(
            "SELECT state, query FROM pg_stat_activity WHERE application_name = %s",
            (application_name,)).fetchall()]


async def wait_until_gone(server_url: str, application_name: str) -> list[tuple[str, str]]:
    """Poll for the call's backend to end (the server finishes it after the cancel)."""
    for _ in range(50):
        left = await asyncio.to_thread(backends, server_url, application_name)
        if not left:
            return left
        await asyncio.sleep(0.2)
    return left


async def test_a_query_that_turns_off_its_statement_timeout_is_cancelled_at_the_deadline(
        sql_database: str) -> None:
    marker = f"toren-sql-test-{uuid.uuid4().hex[:8]}"
    url = make_conninfo(sql_database, application_name=marker)
    started = time.monotonic()
    async with asyncio.timeout(3 + MARGIN_S + 30):  # the test's own guard, past the bound
        with pytest.raises(ToolError) as info:
            await run_readonly_query(url, RESETS_ITS_TIMEOUT, max_rows=1000, max_bytes=65536,
                                     timeout_s=3, allow_privileged_role=True)
    assert time.monotonic() - started < 3 + MARGIN_S
    assert info.value.message.startswith(
        "the query ran past its 3 s limit and was cancelled (TOREN_SQL_TIMEOUT)")
    assert await wait_until_gone(sql_database, marker) == []


async def test_many_fetches_each_under_the_statement_timeout_still_meet_one_deadline(
        sql_database: str) -> None:
    """Every batch of 200 rows sleeps 1.5 s, each FETCH under its own 2 s statement_timeout;
    the call as a whole may still take only 2 s."""
    with pytest.raises(ToolError, match="ran past its 2 s limit"):
        await run_readonly_query(
            sql_database, "SELECT g, pg_sleep(CASE WHEN g % 200 = 0 THEN 1.5 ELSE 0 END) "
                          "FROM generate_series(1, 1000) g",
            max_rows=1000, max_bytes=1_000_000, timeout_s=2, allow_privileged_role=True)


async def test_a_tool_cancelled_from_outside_cancels_its_backend(sql_database: str) -> None:
    """A run cancelled (or the tool's own timeout) while the query runs: the backend ends
    too, not only the client's wait."""
    marker = f"toren-sql-test-{uuid.uuid4().hex[:8]}"
    url = make_conninfo(sql_database, application_name=marker)
    call = asyncio.create_task(run_readonly_query(
        url, "SELECT pg_sleep(60)", max_rows=10, max_bytes=65536, timeout_s=60,
        allow_privileged_role=True))
    for _ in range(50):
        if await asyncio.to_thread(backends, sql_database, marker):
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # into the FETCH
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await wait_until_gone(sql_database, marker) == []


async def test_the_deadline_covers_the_connection_too() -> None:
    """A server that accepts the TCP connection and never answers: the call ends at the
    deadline, not at libpq's connect_timeout."""
    done = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await done.wait()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    started = time.monotonic()
    try:
        with pytest.raises(ToolError, match=r"cannot connect to the database: no answer within "
                                            r"1 s \(TOREN_SQL_TIMEOUT\)"):
            await run_readonly_query(
                f"postgresql://nobody@127.0.0.1:{port}/none?sslmode=disable", "SELECT 1",
                max_rows=1, max_bytes=65536, timeout_s=1, connect_timeout_s=30)
    finally:
        done.set()
        server.close()
        await server.wait_closed()
    assert time.monotonic() - started < 1 + MARGIN_S
