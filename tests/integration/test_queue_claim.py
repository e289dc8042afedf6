"""The Postgres queue's claim (control migration 0012) and the outbox relay's: the oldest
ready messages of the agents asked for, whatever else waits in the queue, and nothing of what
they leave touched."""

from __future__ import annotations

from pathlib import Path

import psycopg

from toren.testing import write_agent_dir

#: messages (agent, seconds ago they became ready), inserted in this order
MESSAGES = [("mine", 30), ("ours", 25), ("mine", 20), ("ours", 15), ("mine", 10)]


async def insert(conn: psycopg.AsyncConnection, agent: str, ago_s: float, count: int = 1
                 ) -> list[int]:
    cursor = await conn.execute(
        "INSERT INTO toren_control.queue (agent, kind, payload, available_at) "
        "SELECT %s, 'noop', '{}', now() - %s * interval '1 second' "
        "FROM generate_series(1, %s) RETURNING id", [agent, ago_s, count])
    return [row[0] for row in await cursor.fetchall()]


async def two_agents(make_runtime, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A runtime of the agents "mine" and "ours", without workers: the tests claim by hand."""
    return await make_runtime(dirs=[write_agent_dir(tmp_path, "mine"),
                                    write_agent_dir(tmp_path, "ours")], workers=False)


async def backlog_and_messages(conn: psycopg.AsyncConnection) -> dict[tuple[str, int], int]:
    """2,000 ready messages of an agent no worker here serves, older than all of ours (a
    backlog), then ``MESSAGES``: their ids by (agent, seconds ago)."""
    await insert(conn, "gone", 3600, count=2000)
    return {(agent, ago): (await insert(conn, agent, ago))[0] for agent, ago in MESSAGES}


async def test_a_claim_takes_the_oldest_of_its_agents_messages_behind_another_agents_backlog(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await two_agents(make_runtime, tmp_path)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        ids = await backlog_and_messages(conn)

        claimed, dead = await runtime.queue.claim(["mine", "ours"], "w1", 3, 30, 5)
        assert dead == []
        # across the agents, oldest first
        assert [m.id for m in claimed] == [ids["mine", 30], ids["ours", 25], ids["mine", 20]]
        assert all(m.attempts == 1 for m in claimed)
        assert all(m.waited_s is not None and m.waited_s >= 19 for m in claimed)

        # what the claim left is as it was: the backlog, and the younger messages of both
        # agents (each agent's were read and locked up to the limit, not claimed)
        cursor = await conn.execute(
            "SELECT count(*) FILTER (WHERE attempts = 0 AND claimed_by IS NULL "
            "AND available_at <= now()), count(*) FROM toren_control.queue WHERE agent = %s",
            ["gone"])
        assert await cursor.fetchone() == (2000, 2000)
        cursor = await conn.execute(
            "SELECT id FROM toren_control.queue WHERE agent IN ('mine', 'ours') "
            "AND attempts = 0 AND claimed_by IS NULL AND available_at <= now() ORDER BY id")
        assert [row[0] for row in await cursor.fetchall()] == [ids["ours", 15],
                                                                 ids["mine", 10]]

        again, _ = await runtime.queue.claim(["mine", "ours"], "w2", 5, 30, 5)
        assert [m.id for m in again] == [ids["ours", 15], ids["mine", 10]]
        nothing, _ = await runtime.queue.claim(["mine", "ours"], "w3", 5, 30, 5)
        assert nothing == []


async def test_a_claim_dead_letters_what_was_delivered_too_often_and_claims_the_rest(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "mine")], workers=False)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        [poison] = await insert(conn, "mine", 20)
        [fresh] = await insert(conn, "mine", 10)
        await conn.execute("UPDATE toren_control.queue SET attempts = 3 WHERE id = %s",
                           [poison])
        claimed, dead = await runtime.queue.claim(["mine"], "w1", 5, 30, 3)
        assert [m.id for m in claimed] == [fresh]
        assert [(m.id, m.attempts) for m in dead] == [(poison, 3)]
        cursor = await conn.execute(
            "SELECT id, agent, attempts FROM toren_control.dead_letters")
        assert await cursor.fetchall() == [(poison, "mine", 3)]
        cursor = await conn.execute("SELECT id FROM toren_control.queue")
        assert await cursor.fetchall() == [(fresh,)]


async def test_the_outbox_relays_claim_takes_the_oldest_of_its_agents_entries_behind_a_backlog(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await two_agents(make_runtime, tmp_path)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        ids = await backlog_and_messages(conn)
        claimed = await runtime.store.claim_outbox(["mine", "ours"], "relay-1", 3, 30.0)
        assert sorted(entry.id for entry in claimed) == sorted(
            [ids["mine", 30], ids["ours", 25], ids["mine", 20]])
        cursor = await conn.execute(
            "SELECT count(*) FROM toren_control.queue WHERE claimed_by IS NULL "
            "AND available_at <= now() AND agent IN ('mine', 'ours', 'gone')")
        assert await cursor.fetchone() == (2002,)  # the backlog and the two younger ones
        again = await runtime.store.claim_outbox(["mine", "ours"], "relay-2", 5, 30.0)
        assert sorted(entry.id for entry in again) == sorted([ids["ours", 15], ids["mine", 10]])
