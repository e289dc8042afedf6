"""Flow control in the Postgres queue's claim (control migration 0024): highest effective
priority first with aging, FIFO within a priority, and each agent's concurrency limit per key
(runs executing = runs with a claimed, unexpired message). Messages are written by hand and
claimed by hand, so the order is the claim's alone."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg

from toren.testing import write_agent_dir


async def insert(conn: psycopg.AsyncConnection, agent: str, *, ago_s: float = 0.0,
                 priority: int = 0, key: str | None = None, run_id: str | None = None,
                 claimed_by: str | None = None) -> tuple[int, str]:
    """One message of a run (a new run unless ``run_id``); with ``claimed_by``, one that
    worker holds now (its run is executing). Returns (message id, run id)."""
    run_id = run_id or str(uuid.uuid4())
    held = claimed_by is not None
    cursor = await conn.execute(
        "INSERT INTO toren_control.queue (agent, run_id, kind, payload, available_at, "
        "priority, concurrency_key, claimed_by, attempts) "
        "VALUES (%s, %s, 'task', '{}', now() + %s * interval '1 second', %s, %s, %s, %s) "
        "RETURNING id",
        [agent, run_id, 60 if held else -ago_s, priority, key, claimed_by, 1 if held else 0])
    row = await cursor.fetchone()
    assert row is not None
    return row[0], run_id


async def runtime_of(make_runtime, tmp_path: Path, **agent: Any):  # type: ignore[no-untyped-def]
    """A runtime serving the agent "flow" (agent.yaml fields ``agent``), without workers."""
    return await make_runtime(dirs=[write_agent_dir(tmp_path, "flow", **agent)], workers=False)


async def claim_ids(runtime, limit: int = 10, worker: str = "w") -> list[int]:  # type: ignore[no-untyped-def]
    claimed, _ = await runtime.queue.claim(["flow"], worker, limit, 30, 5)
    return [m.id for m in claimed]


async def test_higher_priority_is_claimed_first_and_fifo_within_a_priority(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await runtime_of(make_runtime, tmp_path)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        low_old, _ = await insert(conn, "flow", ago_s=5, priority=-5)
        normal_old, _ = await insert(conn, "flow", ago_s=4)
        normal_new, _ = await insert(conn, "flow", ago_s=1)
        high_new, _ = await insert(conn, "flow", ago_s=0.5, priority=10)
        high_newer, _ = await insert(conn, "flow", ago_s=0.1, priority=10)

        claimed, _ = await runtime.queue.claim(["flow"], "w", 3, 30, 5)
        assert [m.id for m in claimed] == [high_new, high_newer, normal_old]
        # the worker sees each message's priority (what rate-limit waiters order by)
        assert [m.priority for m in claimed] == [10, 10, 0]
        assert await claim_ids(runtime) == [normal_new, low_old]


async def test_aging_lets_long_waiting_low_priority_work_win_over_fresh_high_priority(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    # one point of priority per 0.05 s waited: a message waiting 100 s has gained 2,000
    # points, more than the 200 between the lowest and the highest priority
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "flow")], workers=False,
                                 priority_aging_s=0.05)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        starved, _ = await insert(conn, "flow", ago_s=100, priority=-100)
        stream = [(await insert(conn, "flow", ago_s=0, priority=100))[0] for _ in range(5)]
        assert (await claim_ids(runtime, limit=1))[0] == starved
        assert sorted(await claim_ids(runtime)) == stream

    # with the default (30 s a point), the same wait is worth 3 points: the stream goes first
    other = await make_runtime(dirs=[write_agent_dir(tmp_path / "b", "flow")], workers=False)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("DELETE FROM toren_control.queue")
        waiting, _ = await insert(conn, "flow", ago_s=100, priority=-100)
        fresh, _ = await insert(conn, "flow", ago_s=0, priority=100)
        assert await claim_ids(other) == [fresh, waiting]


async def test_a_limit_leaves_runs_beyond_it_queued_and_lets_executing_runs_go_on(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await runtime_of(make_runtime, tmp_path, concurrency=2)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        runs = [await insert(conn, "flow", ago_s=10 - n) for n in range(6)]
        # one claim of room 10 takes two runs: the limit, oldest first
        assert await claim_ids(runtime) == [runs[0][0], runs[1][0]]
        assert await claim_ids(runtime, worker="w2") == []
        # a second message of an executing run (a wave's task) is claimed: it has its slot
        second, _ = await insert(conn, "flow", run_id=runs[0][1])
        assert await claim_ids(runtime, worker="w2") == [second]
        # a run's messages all done (acknowledged): its slot frees for the next run in order
        await conn.execute("DELETE FROM toren_control.queue WHERE run_id = %s", [runs[0][1]])
        assert await claim_ids(runtime, worker="w3") == [runs[2][0]]
        # a claim that expired unacknowledged (its worker died) no longer holds a slot: the
        # oldest waiting run takes it (the expired message waits again, from its expiry)
        await conn.execute("UPDATE toren_control.queue SET available_at = now() - interval "
                           "'1 second' WHERE run_id = %s", [runs[1][1]])
        assert await claim_ids(runtime, worker="w4") == [runs[3][0]]
        assert await claim_ids(runtime, worker="w4") == []


async def test_a_keyed_limit_keeps_one_tenant_from_delaying_another(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await runtime_of(make_runtime, tmp_path,
                               concurrency={"limit": 1, "key": "input.customer"})
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        tenant_a = [await insert(conn, "flow", ago_s=100 - n, key="a") for n in range(10)]
        late_b, _ = await insert(conn, "flow", ago_s=1, key="b")
        # a worker with room for 4: tenant A's first run and, in the same claim or the next,
        # tenant B's run: B waits at most for one slot of A, not for A's backlog
        first = await claim_ids(runtime, limit=4)
        assert first[0] == tenant_a[0][0]
        second = [] if late_b in first else await claim_ids(runtime, limit=4)
        assert late_b in first + second
        assert [m for m in first + second if m != late_b] == [tenant_a[0][0]]


async def test_the_agent_wide_key_and_runs_without_a_limit(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "flow", concurrency=1),
                                       write_agent_dir(tmp_path, "free")], workers=False)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await insert(conn, "flow", claimed_by="elsewhere")  # its one slot is taken
        waiting, _ = await insert(conn, "flow", ago_s=5)
        free = [(await insert(conn, "free", ago_s=4))[0] for _ in range(3)]
        claimed, _ = await runtime.queue.claim(["flow", "free"], "w", 10, 30, 5)
        assert [m.id for m in claimed] == free
        assert waiting not in [m.id for m in claimed]


async def test_the_previous_versions_claim_honours_limits_during_a_rolling_deploy(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    await runtime_of(make_runtime, tmp_path, concurrency=1)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        first, _ = await insert(conn, "flow", ago_s=3)
        await insert(conn, "flow", ago_s=2)
        urgent, _ = await insert(conn, "flow", ago_s=1, priority=50)
        # control migration 0012's signature, as a worker of the previous version calls it
        cursor = await conn.execute("SELECT o_id FROM toren_control.claim_messages("
                                    "ARRAY['flow'], 'old-worker', 10, 30, 5)")
        assert [row[0] for row in await cursor.fetchall()] == [urgent]
        assert first != urgent


def test_the_claim_benchmark_runs_in_smoke_mode(database_url: str) -> None:
    """bench/flow_claim.py (the flow-control claim against 0012's, side by side) is run here
    at its smoke size so it cannot rot: it measures every scenario on a database of its own
    and drops it after. No figure is judged here (figures live in bench/)."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(root / "bench" / "flow_claim.py"), "--smoke"],
                          env=os.environ | {"DATABASE_URL": database_url}, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert {"empty", "backlog", "backlog_priorities", "limited_blocked", "insert"} <= set(out)
    assert out["backlog"]["old_ms_p50"] > 0 and out["backlog"]["new_ms_p50"] > 0
