"""``watch_appends``: committed appends name their run on one LISTEN connection, so live event
streams wake without polling; a broken listener comes back and says so."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg

from toren.testing import write_agent_dir

TOOLS = '''
from toren import tool

@tool(idempotent=True)
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"
'''


class Notices:
    """What one ``watch_appends`` iterator yielded, collected by a background task."""

    def __init__(self, iterator: AsyncIterator[str | None]) -> None:
        self.seen: list[str | None] = []
        self._iterator = iterator
        self._task = asyncio.create_task(self._collect())

    async def _collect(self) -> None:
        async with contextlib.aclosing(self._iterator) as notices:
            async for notice in notices:
                self.seen.append(notice)

    async def wait_for(self, predicate, timeout_s: float = 20.0) -> None:
        async with asyncio.timeout(timeout_s):
            while not predicate(self.seen):
                await asyncio.sleep(0.02)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def test_appends_name_their_run_once_committed(make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "chat", tools_py=TOOLS)])
    notices = Notices(runtime.store.watch_appends())
    try:
        await notices.wait_for(lambda seen: seen == [None])  # listening: re-read everything
        session_id = await runtime.start_session("chat")
        await runtime.send_message(session_id, "postgres")  # the session's input
        await runtime.wait_for_turn(session_id, timeout_s=30)  # the worker's leased appends
        run_id = await runtime.start_run("chat", "sqlite")
        await runtime.cancel_run(run_id, "changed my mind")  # an append without a lease
        await notices.wait_for(lambda seen: run_id in seen)
        leased = len(notices.seen) - 1 - notices.seen.count(run_id)
        assert set(notices.seen[1:]) == {session_id, run_id}
        # the input, then the turn's appends (model call, tool call, reply, turn ended)
        assert leased >= 3
    finally:
        await notices.close()


async def test_a_listener_that_loses_its_connection_comes_back_and_says_so(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "chat", tools_py=TOOLS)])
    notices = Notices(runtime.store.watch_appends())
    try:
        await notices.wait_for(lambda seen: seen == [None])
        with psycopg.connect(database_url, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN toren_appends%%'"
            ).fetchall()
        assert killed == [(True,)]
        # appends committed while it was away reached nobody: None tells readers to re-read
        await notices.wait_for(lambda seen: seen == [None, None])
        session_id = await runtime.start_session("chat")
        await runtime.send_message(session_id, "postgres")
        await notices.wait_for(lambda seen: session_id in seen)
    finally:
        await notices.close()
