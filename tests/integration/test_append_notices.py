"""``wait_for_appends`` on the Postgres store: appends to watched runs, and only those, NOTIFY
on commit; one LISTEN connection per process hands them out; a broken listener comes back and
says so."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg

from toren.seams.store import Store
from toren.testing import write_agent_dir

TOOLS = '''
from toren import tool

@tool(idempotent=True)
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"
'''


async def answers_until(store: Store, run_ids: set[str], predicate,
                        timeout_s: float = 20.0) -> list[set[str] | None]:
    """Call ``wait_for_appends`` until an answer satisfies ``predicate``; every answer."""
    answers: list[set[str] | None] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answers.append(await store.wait_for_appends(run_ids, 0.5))
        if predicate(answers[-1]):
            return answers
    raise AssertionError(f"no such answer within {timeout_s}s: {answers}")


async def notices(conn: psycopg.AsyncConnection, quiet_s: float = 1.0) -> list[str]:
    """The payloads a plain LISTEN connection received, until ``quiet_s`` without one."""
    return [notice.payload async for notice in conn.notifies(timeout=quiet_s)]


async def test_appends_to_watched_runs_notify_and_no_others(make_runtime, tmp_path: Path,
                                                            database_url: str) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "chat", tools_py=TOOLS)])
    store = runtime.store
    watched = await runtime.start_session("chat")
    other = await runtime.start_session("chat")
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as listen:
        await listen.execute("LISTEN toren_appends")
        # watched from now: look once ({watched}); once the store listens, "look again" (None),
        # since nothing was heard before
        answers = await answers_until(store, {watched}, lambda answer: answer is None)
        assert all(answer == {watched} for answer in answers[:1] if answer is not None)

        await runtime.send_message(other, "sqlite")
        await runtime.wait_for_turn(other, timeout_s=30)
        await runtime.send_message(watched, "postgres")  # the session's input
        answers = await answers_until(store, {watched}, lambda answer: answer == {watched})
        assert all(answer == set() for answer in answers[:-1])
        await runtime.wait_for_turn(watched, timeout_s=30)  # the worker's leased appends
        heard = await notices(listen)
        assert set(heard) == {watched}  # the other session's appends sent nothing
        assert len(heard) >= 3  # the input, model and tool calls, the turn's end

        assert await store.wait_for_appends(set(), 0.1) == set()  # no longer watched
        await runtime.cancel_run(watched, "done")  # an append without a lease
        assert await notices(listen) == []


async def test_a_listener_that_loses_its_connection_comes_back_and_says_so(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "chat", tools_py=TOOLS)])
    store = runtime.store
    session_id = await runtime.start_session("chat")
    await answers_until(store, {session_id}, lambda answer: answer is None)
    with psycopg.connect(database_url, autocommit=True) as conn:
        killed = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query LIKE 'LISTEN toren_appends%%'"
        ).fetchall()
    assert killed == [(True,)]
    # appends committed while it was away reached nobody: None tells readers to look again
    await answers_until(store, {session_id}, lambda answer: answer is None)
    await runtime.send_message(session_id, "postgres")
    await answers_until(store, {session_id}, lambda answer: answer == {session_id})


async def test_watches_of_a_process_that_died_expire(make_runtime, tmp_path: Path,
                                                      database_url: str) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "chat", tools_py=TOOLS)])
    session_id = await runtime.start_session("chat")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO toren_control.watched_runs VALUES "
                      "(%s, 'a process that died', now() - interval '1 second')", [session_id])
    await runtime.store.wait_for_appends({session_id}, 0.1)  # renews its own, drops the dead
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT watcher, expires_at > now() "
                            "FROM toren_control.watched_runs").fetchall()
    assert len(rows) == 1 and rows[0][0] != "a process that died" and rows[0][1]
