"""Leases, compare-and-swap appends, guardians and dead letters against real Postgres."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from tests.durable import check_log
from toren.core.events import NewEvent
from toren.errors import LeaseFenced, LeaseLost
from toren.testing import write_agent_dir


def started(epoch: int) -> NewEvent:
    return NewEvent("TaskStarted", {
        "task_id": "main", "subagent": None, "model": "toren/scripted", "input": "x",
        "limits": {}, "tools": [], "prompt_sha256": "0", "epoch": epoch})


def call_started(epoch: int) -> NewEvent:
    return NewEvent("ModelCallStarted", {"step": 1, "epoch": epoch})


async def lease_expired(database_url: str, run_id: str, stream: str) -> bool:
    """Whether the stream's lease has run out by the database clock (the one leases use)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cursor = await conn.execute("SELECT expires_at <= now() FROM toren_control.leases "
                                    "WHERE run_id = %s AND stream = %s", [run_id, stream])
        row = await cursor.fetchone()
    return row is not None and row[0]


async def test_a_lease_granted_by_another_server_is_fenced_and_free_at_once(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    """After a failover the new primary holds the old one's lease rows (replicated), which
    name the server that granted them: an append under one writes nothing (the worker's memory
    may be ahead of this log) and the lease can be taken over at once, unexpired as it is.
    (tests/chaos/test_failover.py does this with a real replica; here the row is made to name
    another server by hand.)"""
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False)
    store = runtime.store
    run_id = await runtime.start_run("a", "x")
    first = await store.acquire_lease(run_id, "task:main", "worker-1", 60)
    assert first is not None
    await store.append("a", first, 1, [started(1)], ttl_s=60)
    assert await store.acquire_lease(run_id, "task:main", "worker-2", 60) is None  # held here
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("UPDATE toren_control.leases SET server_started_at = "
                           "server_started_at - interval '1 hour' WHERE run_id = %s", [run_id])
    with pytest.raises(LeaseFenced, match="granted by another database server"):
        await store.append("a", first, 2, [call_started(1)], ttl_s=60)
    second = await store.acquire_lease(run_id, "task:main", "worker-2", 60)
    assert second is not None and second.epoch == 2  # at once: no TTL to wait out
    await store.append("a", second, 2, [call_started(2)], ttl_s=60)
    events = await store.load_stream("a", run_id, "task:main")
    assert [(e.seq, e.type, e.data["epoch"]) for e in events] == [
        (1, "TaskStarted", 1), (2, "ModelCallStarted", 2)]
    # a lease a version before this one took (no server recorded) is honoured, as before
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("UPDATE toren_control.leases SET server_started_at = NULL "
                           "WHERE run_id = %s", [run_id])
    await store.append("a", second, 3, [NewEvent("RetryScheduled", {
        "step": 1, "attempt": 1, "error": {"code": "x", "message": "x"}, "delay_s": 0.0,
        "next_attempt_at": "2026-01-01T00:00:00+00:00", "epoch": 2})], ttl_s=60)


async def test_an_append_past_the_end_of_a_shorter_log_is_fenced(
        make_runtime, tmp_path: Path) -> None:
    """A log shorter than its writer believes (what it appended was lost in a failover, and its
    lease row with it, then taken again by the same worker at the same epoch): the append
    after the gap writes nothing, and says so."""
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False)
    store = runtime.store
    run_id = await runtime.start_run("a", "x")
    lease = await store.acquire_lease(run_id, "task:main", "worker-1", 60)
    assert lease is not None
    await store.append("a", lease, 1, [started(1)], ttl_s=60)
    with pytest.raises(LeaseFenced, match=r"ends before seq 2 .* about to append seq 3"):
        await store.append("a", lease, 3, [call_started(1)], ttl_s=60)
    await store.append("a", lease, 2, [call_started(1)], ttl_s=60)  # the lease is intact
    events = await store.load_stream("a", run_id, "task:main")
    assert [(e.seq, e.type) for e in events] == [(1, "TaskStarted"), (2, "ModelCallStarted")]


async def test_an_expired_lease_loses_its_next_append(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False)
    store = runtime.store
    run_id = await runtime.start_run("a", "x")
    first = await store.acquire_lease(run_id, "task:main", "worker-1", 60)
    assert first is not None and first.epoch == 1
    assert await store.acquire_lease(run_id, "task:main", "worker-2", 60) is None  # held
    # worker-1 appends, renewing its lease for a short while only, then stalls past it
    await store.append("a", first, 1, [started(1)], ttl_s=0.3)
    for _ in range(200):
        if await lease_expired(database_url, run_id, "task:main"):
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the lease renewed for 0.3 s had not expired after 10 s")
    second = await store.acquire_lease(run_id, "task:main", "worker-2", 60)
    assert second is not None and second.epoch == 2
    with pytest.raises(LeaseLost, match="held by worker-2 at epoch 2"):
        await store.append("a", first, 2, [call_started(1)], ttl_s=60)
    await store.append("a", second, 2, [call_started(2)], ttl_s=60)
    events = await store.load_stream("a", run_id, "task:main")
    assert [(e.seq, e.type, e.data["epoch"]) for e in events] == [
        (1, "TaskStarted", 1), (2, "ModelCallStarted", 2)]


async def test_two_appends_of_the_same_sequence_number_cannot_both_commit(
        make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False)
    store = runtime.store
    run_id = await runtime.start_run("a", "x")
    lease = await store.acquire_lease(run_id, "task:main", "w", 5)
    results = await asyncio.gather(
        *(store.append("a", lease, 1, [started(1)], ttl_s=5) for _ in range(8)),
        return_exceptions=True)
    assert sum(r is None for r in results) == 1
    assert all(isinstance(r, LeaseLost) for r in results if r is not None)
    assert len(await store.load_stream("a", run_id, "task:main")) == 1


# The queue driver contract: these run on every queue driver (tests/queue_drivers.py). On
# SQS, messages leave through the outbox relay (which a runtime without workers does not run):
# a message deleted from the outbox before the relay sent it is a lost send.

async def test_a_deleted_queue_message_is_healed_by_a_guardian(
        make_runtime, tmp_path: Path, database_url: str, queue_driver: str) -> None:
    directory = write_agent_dir(tmp_path, "a")
    creator = await make_runtime(dirs=[directory], workers=False, queue_driver=queue_driver)
    run_id = await creator.start_run("a", "heal me")
    with psycopg.connect(database_url, autocommit=True) as conn:
        deleted = conn.execute("DELETE FROM toren_control.queue WHERE run_id = %s",
                               [run_id]).rowcount
    assert deleted == 1
    # nothing else would ever run it: the guardian finds it (once it is a second old: runs
    # touched in the last second are left alone) and queues it again
    worker = await make_runtime(dirs=[directory], guardian_interval_s=0.2,
                                queue_driver=queue_driver)
    record = await worker.wait_for_run(run_id, timeout_s=20)
    assert record.status == "completed"
    check_log(await worker.events(run_id))


async def test_a_lost_task_message_is_resent_by_the_run_tick(
        make_runtime, tmp_path: Path, database_url: str, queue_driver: str) -> None:
    directory = write_agent_dir(tmp_path, "a")
    creator = await make_runtime(dirs=[directory], workers=False, queue_driver=queue_driver)
    run_id = await creator.start_run("a", "x")
    with psycopg.connect(database_url, autocommit=True) as conn:
        # replace the task message by a bare run tick, as if the task message were lost
        conn.execute("DELETE FROM toren_control.queue WHERE run_id = %s", [run_id])
        conn.execute("INSERT INTO toren_control.queue (agent, run_id, kind, payload) "
                     "VALUES ('a', %s, 'run', '{}')", [run_id])
    worker = await make_runtime(dirs=[directory], queue_driver=queue_driver)
    assert (await worker.wait_for_run(run_id, timeout_s=20)).status == "completed"


async def test_the_same_message_delivered_twice_at_once_causes_one_step(
        make_runtime, tmp_path: Path, database_url: str, queue_driver: str) -> None:
    directory = write_agent_dir(tmp_path, "a")
    creator = await make_runtime(dirs=[directory], workers=False, queue_driver=queue_driver)
    run_id = await creator.start_run("a", "x")
    with psycopg.connect(database_url, autocommit=True) as conn:
        for _ in range(3):  # duplicates of the task message
            conn.execute("INSERT INTO toren_control.queue (agent, run_id, kind, payload) "
                         "SELECT agent, run_id, kind, payload FROM toren_control.queue "
                         "WHERE run_id = %s LIMIT 1", [run_id])
    workers = [await make_runtime(dirs=[directory], queue_driver=queue_driver)
               for _ in range(2)]
    record = await workers[0].wait_for_run(run_id, timeout_s=20)
    assert record.status == "completed"
    events = await workers[0].events(run_id)
    check_log(events)
    assert sum(e.type == "TaskStarted" for e in events) == 1
    assert sum(e.type == "ModelCallCompleted" for e in events) == 1


async def test_many_runs_across_two_workers_each_run_once(make_runtime, tmp_path: Path,
                                                          queue_driver: str) -> None:
    directory = write_agent_dir(tmp_path, "a", tools_py='def ping(x: str) -> str:\n'
                                                       '    """Ping."""\n    return "pong"\n')
    workers = [await make_runtime(dirs=[directory], concurrency=4, queue_driver=queue_driver)
               for _ in range(2)]
    run_ids = [await workers[0].start_run("a", f"run {i}") for i in range(20)]
    for run_id in run_ids:
        record = await workers[0].wait_for_run(run_id, timeout_s=30)
        assert record.status == "completed"
        events = await workers[0].events(run_id)
        check_log(events)
        assert sum(e.type == "ModelCallCompleted" for e in events) == 2
        assert sum(e.type == "ToolCallCompleted" for e in events) == 1


async def test_a_heartbeat_never_waits_for_a_lease_another_transaction_holds(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    """A group commit's transaction locks several leases; a heartbeat that waited for one of
    them while holding others could deadlock with it (seen under load: 20 parallel tasks).
    The heartbeat skips what is locked (the append renews it) and renews the rest."""
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False)
    store = runtime.store
    run_id = await runtime.start_run("a", "x")
    busy = await store.acquire_lease(run_id, "task:one", "worker-1", 5)
    free = await store.acquire_lease(run_id, "task:two", "worker-1", 5)
    assert busy is not None and free is not None

    async def expires(stream: str) -> float:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as c:
            cursor = await c.execute(
                "SELECT extract(epoch FROM expires_at - now()) FROM toren_control.leases "
                "WHERE run_id = %s AND stream = %s", [run_id, stream])
            row = await cursor.fetchone()
        assert row is not None
        return float(row[0])

    async with await psycopg.AsyncConnection.connect(database_url) as locker:
        await locker.execute("SELECT 1 FROM toren_control.leases WHERE run_id = %s "
                             "AND stream = 'task:one' FOR UPDATE", [run_id])
        worker = {"id": "worker-1", "version": "test", "agents": ["a"]}
        await asyncio.wait_for(store.heartbeat(worker, 600, [], [busy, free]), 5)
        assert await expires("task:two") > 500  # renewed
        await locker.rollback()
    assert await expires("task:one") < 10  # skipped this time, not waited for
    await asyncio.wait_for(store.heartbeat(worker, 600, [], [busy, free]), 5)
    assert await expires("task:one") > 500  # the next heartbeat renews it
