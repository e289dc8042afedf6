"""The store's connection pool after its server went away (a failover, a restart): the idle
connections it holds are dead, and callers must not meet them one by one."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path

import psycopg
import pytest
from toren_postgres.lifecycle import IDLE_CHECK_S, PostgresConnection

from toren.config import Settings

POOL = 4


async def idle_connections(store: PostgresConnection) -> list[int]:
    """Take ``POOL`` connections at once and give them back: their backends' pids."""
    async with AsyncExitStack() as stack:
        conns = [await stack.enter_async_context(store.pool.connection()) for _ in range(POOL)]
        return [conn.info.backend_pid for conn in conns]


async def terminate(database_url: str, pids: list[int]) -> None:
    """End those backends as a server going away does (each client sees its socket closed)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid",
                           [pids])


@pytest.fixture
async def store(database_url: str, tmp_path: Path):
    opened = PostgresConnection(Settings(database_url=database_url, home=tmp_path / "home",
                                         pool_size=POOL))
    await opened.open()
    yield opened
    await opened.close()


async def test_connections_idle_while_their_server_went_away_are_checked_first(
        store: PostgresConnection, database_url: str) -> None:
    await terminate(database_url, await idle_connections(store))
    await asyncio.sleep(IDLE_CHECK_S + 0.2)
    for _ in range(POOL):  # each dead one fails its check and is replaced, unseen
        async with store.pool.connection() as conn:
            assert await (await conn.execute("SELECT 1")).fetchone() == (1,)


async def test_a_connection_found_broken_drains_the_others(
        store: PostgresConnection, database_url: str) -> None:
    pids = await idle_connections(store)
    await terminate(database_url, pids)
    await asyncio.sleep(0.2)  # gone, but not idle long enough to be checked
    # the first caller meets a dead connection (what any pool gives after a failover)...
    with pytest.raises(psycopg.OperationalError):
        async with store.pool.connection() as conn:
            await conn.execute("SELECT 1")
    # ...and its return drains the pool: nobody else does
    for _ in range(POOL):
        async with store.pool.connection() as conn:
            assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
            assert conn.info.backend_pid not in pids
