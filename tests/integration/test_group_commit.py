"""Group commit: concurrent appends share one transaction, each keeps its own compare-and-swap."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest

from toren.core.events import NewEvent
from toren.core.runs import RunUpdate
from toren.errors import LeaseLost
from toren.seams.shapes import Lease, OutgoingMessage
from toren.testing import write_agent_dir


def started(epoch: int) -> NewEvent:
    return NewEvent("TaskStarted", {
        "task_id": "main", "subagent": None, "model": "toren/scripted", "input": "x",
        "limits": {}, "tools": [], "prompt_sha256": "0", "epoch": epoch})


async def leased_runs(runtime: Any, count: int) -> list[Lease]:
    leases = []
    for _ in range(count):
        run_id = await runtime.start_run("a", "x")
        lease = await runtime.store.acquire_lease(run_id, "task:main", "w", 60)
        assert lease is not None
        leases.append(lease)
    return leases


async def writing_transactions(database_url: str, run_ids: list[str]) -> int:
    """How many transactions wrote these runs' events (each row's ``xmin``)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cursor = await conn.execute("SELECT count(DISTINCT xmin::text) FROM agent_a.events "
                                    "WHERE run_id = ANY(%s) AND stream = 'task:main'",
                                    [run_ids])
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def test_concurrent_appends_share_commits_and_all_land(
        make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False)
    store = runtime.store
    leases = await leased_runs(runtime, 16)
    group = store._group_commit()
    batches_before, grouped_before = group.batches, group.grouped
    await asyncio.gather(*(store.append("a", lease, 1, [started(1)], ttl_s=60)
                           for lease in leases))
    # 16 appends made in one turn of the event loop: one shared transaction
    assert group.grouped - grouped_before == 16
    assert group.batches - batches_before == 1
    for lease in leases:
        events = await store.load_stream("a", lease.run_id, "task:main")
        assert [(e.seq, e.type) for e in events] == [(1, "TaskStarted")]


@pytest.mark.parametrize("group_commit", [True, False], ids=["grouped", "alone"])
async def test_a_conflict_in_a_group_fails_only_its_own_append(
        make_runtime, tmp_path: Path, group_commit: bool) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False,
                                 group_commit=group_commit)
    store = runtime.store
    leases = await leased_runs(runtime, 7)
    contested = leases[3]
    # two appends of sequence number 1 to one stream, among six appends to other streams: the
    # primary key lets one of the two commit; the six others all commit
    appends = [*(store.append("a", lease, 1, [started(1)], ttl_s=60) for lease in leases),
               store.append("a", contested, 1, [started(1)], ttl_s=60)]
    results = await asyncio.gather(*appends, return_exceptions=True)
    failed = [r for r in results if r is not None]
    assert len(failed) == 1 and isinstance(failed[0], LeaseLost), results
    assert "already has event 1" in str(failed[0])
    for lease in leases:
        events = await store.load_stream("a", lease.run_id, "task:main")
        assert [(e.seq, e.type) for e in events] == [(1, "TaskStarted")]


async def test_a_lost_lease_in_a_group_fails_only_its_own_append(
        make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False)
    store = runtime.store
    leases = await leased_runs(runtime, 6)
    stale = leases[2]
    # another worker takes the stream over: the stale holder's append writes nothing
    await store.release_lease(stale)
    taken = await store.acquire_lease(stale.run_id, "task:main", "w2", 60)
    assert taken is not None and taken.epoch == 2
    group = store._group_commit()
    batches_before = group.batches
    results = await asyncio.gather(
        *(store.append("a", lease, 1, [started(1)], ttl_s=60) for lease in leases),
        return_exceptions=True)
    # a rejected lease is no error in the transaction: the batch still committed the others
    assert group.batches - batches_before < len(leases)
    assert isinstance(results[2], LeaseLost) and "held by w2 at epoch 2" in str(results[2])
    assert [r for i, r in enumerate(results) if i != 2] == [None] * 5
    assert await store.load_stream("a", stale.run_id, "task:main") == []
    for lease in leases[:2] + leases[3:]:
        assert len(await store.load_stream("a", lease.run_id, "task:main")) == 1
    await store.append("a", taken, 1, [started(2)], ttl_s=60)


async def test_grouped_appends_take_fewer_transactions(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    """What group commit is for: under concurrency, fewer commits than appends; with it off,
    one commit per append."""
    for group_commit in (True, False):
        runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False,
                                     group_commit=group_commit)
        leases = await leased_runs(runtime, 32)
        await asyncio.gather(*(runtime.store.append("a", lease, 1, [started(1)], ttl_s=60)
                               for lease in leases))
        transactions = await writing_transactions(database_url, [x.run_id for x in leases])
        if group_commit:
            assert transactions < 32 / 4
        else:
            assert transactions == 32


async def test_a_batch_writes_each_appends_run_update_and_messages(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    """A batch of one agent is one statement (``append_batch``): each append's run update and
    outbox messages are written as its statement alone would write them, in order (the second
    append to a run sees the first's events)."""
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False)
    store = runtime.store
    leases = await leased_runs(runtime, 4)
    group = store._group_commit()
    batches_before = group.batches
    output = {"answer": "done", "n": 1.5, "nested": [None, True]}
    await asyncio.gather(*(
        store.append("a", lease, 1, [started(1)], ttl_s=60,
                     messages=[OutgoingMessage("wake", {"i": i}, delay_s=30.0)],
                     run_update=RunUpdate(status="completed", output=output, finished=True))
        for i, lease in enumerate(leases)),
        store.append("a", leases[0], 2, [NewEvent("ModelCallStarted", {
            "step": 1, "epoch": 1})], ttl_s=60))
    assert group.batches - batches_before == 1
    events = await store.load_stream("a", leases[0].run_id, "task:main")
    assert [(e.seq, e.type) for e in events] == [(1, "TaskStarted"), (2, "ModelCallStarted")]
    for lease in leases:
        run = await store.get_run(lease.run_id, "a")
        assert run is not None and run.status == "completed" and run.output == output
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT payload->>'i' FROM toren_control.queue WHERE kind = 'wake' "
            "AND run_id = ANY(%s) ORDER BY id", [[x.run_id for x in leases]])
        assert [r[0] for r in await cursor.fetchall()] == ["0", "1", "2", "3"]


async def test_a_batch_of_several_agents_commits_together(
        make_runtime, tmp_path: Path) -> None:
    """Appends of two agents in one turn: one batch (each its own statement, pipelined)."""
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a"),
                                       write_agent_dir(tmp_path, "b")], workers=False)
    store = runtime.store
    leases = []
    for agent in ("a", "b", "a", "b"):
        run_id = await runtime.start_run(agent, "x")
        lease = await store.acquire_lease(run_id, "task:main", "w", 60)
        assert lease is not None
        leases.append((agent, lease))
    group = store._group_commit()
    batches_before = group.batches
    await asyncio.gather(*(store.append(agent, lease, 1, [started(1)], ttl_s=60)
                           for agent, lease in leases))
    assert group.batches - batches_before == 1
    for agent, lease in leases:
        events = await store.load_stream(agent, lease.run_id, "task:main")
        assert [(e.seq, e.type) for e in events] == [(1, "TaskStarted")]


async def test_the_flusher_keeps_its_connection_while_appends_come_then_gives_it_back(
        make_runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Appends one after another (concurrency 1) borrow the pool's connection once, not once
    each; with nothing to append for HOLD_IDLE_S it is back in the pool for others."""
    from toren_postgres import group_commit

    monkeypatch.setattr(group_commit, "HOLD_IDLE_S", 0.3)
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False)
    store = runtime.store
    [lease] = await leased_runs(runtime, 1)
    requests_before = store.pool.get_stats().get("requests_num", 0)
    for seq in range(1, 6):
        await store.append("a", lease, seq, [NewEvent("Note", {"n": seq})], ttl_s=60)
    assert store.pool.get_stats().get("requests_num", 0) - requests_before == 1
    assert store._group_commit()._held is not None
    for _ in range(100):
        await asyncio.sleep(0.02)
        if store._group_commit()._held is None:
            break
    stats = store.pool.get_stats()
    assert store._group_commit()._held is None
    assert stats["pool_available"] == stats["pool_size"], stats
    events = await store.load_stream("a", lease.run_id, "task:main")
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]


async def test_a_kept_connection_that_died_costs_no_append(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    """The connection kept between batches is killed (a Postgres restart, a proxy's idle
    timeout): the next append still lands, once, on a fresh connection."""
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False)
    store = runtime.store
    [lease] = await leased_runs(runtime, 1)
    await store.append("a", lease, 1, [NewEvent("Note", {"n": 1})], ttl_s=60)
    held = store._group_commit()._held
    assert held is not None
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", [held.info.backend_pid])
    await store.append("a", lease, 2, [NewEvent("Note", {"n": 2})], ttl_s=60)
    events = await store.load_stream("a", lease.run_id, "task:main")
    assert [(e.seq, e.data) for e in events] == [(1, {"n": 1}), (2, {"n": 2})]
    assert store._group_commit()._held is not held
