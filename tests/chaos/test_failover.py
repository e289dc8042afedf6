"""A failover under load (issue 45, "Faults below Toren"): a primary and a streaming replica,
Toren given both in one multi-host ``DATABASE_URL`` (``target_session_attrs=read-write``), runs
in flight in a ``toren worker`` process; the primary is SIGKILLed and the replica promoted.

Synchronous replication loses no commit. Asynchronous replication loses the last ones, those
the replica had not received: here the replica's link is cut for a moment before the kill, so
the loss is certain and its size known. The invariants are checked from evidence kept outside
the database (the tools' effects file, the offline model's call log, the worker's log lines)
against the new primary's log; what was lost is counted from the old primary's own log,
brought back up alone once the test is over."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from tests.chaos.effects import executions, recording_tools_source
from tests.chaos.helpers import start_worker
from tests.chaos.proxy import ProxyThread
from tests.chaos.replication import ReplicatedPostgres
from tests.durable import (
    check_log,
    model_call_violations,
    read_call_log,
    tool_execution_violations,
)
from toren.core.events import Event
from toren.testing import write_agent_dir

AGENT = "failover"
SCHEMA = f"agent_{AGENT}"
TOOLS = [f"step_{i:02d}" for i in range(5)]
#: Runs in flight at the kill (the worker's concurrency is 8: all of them at once).
RUNS = 8
#: How long the replica's link is cut before the kill (asynchronous mode): the primary commits
#: on alone meanwhile, and those commits are the ones the failover loses.
LAG_S = 0.6


def events_by_run(url: str) -> dict[str, list[Event]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"SELECT run_id::text, stream, seq, type, data, created_at "
                            f"FROM {SCHEMA}.events ORDER BY run_id, stream, seq").fetchall()
    found: dict[str, list[Event]] = {}
    for run_id, stream, seq, kind, data, at in rows:
        found.setdefault(run_id, []).append(Event(run_id, stream, seq, kind, data, at))
    return found


def statuses(url: str) -> dict[str, str]:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return dict(conn.execute(f"SELECT id::text, status FROM {SCHEMA}.runs").fetchall())
    except psycopg.OperationalError:
        return {}


def lost_commits(old: dict[str, list[Event]], new: dict[str, list[Event]]) -> list[Event]:
    """The events the old primary committed that the new one does not hold as they were
    (absent, or another event at that number since)."""
    held = {(e.run_id, e.stream, e.seq): (e.type, e.data) for events in new.values()
            for e in events}
    return [e for events in old.values() for e in events
            if held.get((e.run_id, e.stream, e.seq)) != (e.type, e.data)]


def transactions(url: str, events: list[Event]) -> int:
    """How many transactions wrote ``events`` (on the server of ``url``): an append is one, and
    a group commit's batch carries several appends in one."""
    keys = [(e.run_id, e.stream, e.seq) for e in events]
    with psycopg.connect(url) as conn:
        row = conn.execute(
            f"SELECT count(DISTINCT e.xmin::text) FROM {SCHEMA}.events e "
            "JOIN unnest(%s::uuid[], %s::text[], %s::int[]) AS k(run_id, stream, seq) "
            "USING (run_id, stream, seq)",
            [[k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]]).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("replication", ["synchronous", "asynchronous"])
async def test_runs_survive_the_primary_killed_and_the_replica_promoted(
        replication: str, make_runtime, start_toren, toren_cli, tmp_path: Path) -> None:
    synchronous = replication == "synchronous"
    cluster = ReplicatedPostgres(synchronous=synchronous)
    link: ProxyThread | None = None
    try:
        await asyncio.to_thread(cluster.start_primary)
        link = ProxyThread(cluster.primary_url)  # the replica streams through it
        await asyncio.to_thread(cluster.start_replica, link.url)
        await failover_under_load(cluster, link, synchronous, make_runtime, start_toren,
                                  toren_cli, tmp_path)
    finally:
        if link is not None:
            link.close()
        await asyncio.to_thread(cluster.close)


async def failover_under_load(cluster: ReplicatedPostgres, link: ProxyThread, synchronous: bool,
                              make_runtime, start_toren, toren_cli, tmp_path: Path) -> None:
    url = cluster.multi_host_url
    effects = tmp_path / "effects.log"
    calls = tmp_path / "model-calls.jsonl"
    directory = write_agent_dir(tmp_path, AGENT,
                                tools_py=recording_tools_source(TOOLS, effects))
    # the runs are created by an in-process runtime on the same URL: its pool sees the
    # failover too (it starts a run after it)
    runtime = await make_runtime(dirs=[directory], workers=False, database_url=url)
    env = {"DATABASE_URL": url, "TOREN_SCRIPTED_DELAY": "0.25",
           "TOREN_SCRIPTED_CALL_LOG": str(calls), "TOREN_LEASE_TTL": "8",
           "TOREN_POLL_INTERVAL": "0.2", "TOREN_LOG_LEVEL": "INFO",
           "TOREN_DB_TCP_TIMEOUT": "5", "COLUMNS": "1000"}
    worker = await asyncio.to_thread(start_worker, start_toren, directory, env)
    runs = [await runtime.start_run(AGENT, f"topic {i}") for i in range(RUNS)]

    def completed_calls() -> int:
        return sum(e.type == "ModelCallCompleted" for events in events_by_run(
            cluster.primary_url).values() for e in events)

    # mid-run: every run has started, none is near its end (6 model calls each)
    for _ in range(300):
        if completed_calls() >= RUNS:
            break
        await asyncio.sleep(0.05)
    assert completed_calls() >= RUNS, worker.stderr[-4000:]
    if not synchronous:
        link.cut()  # the replica receives nothing more: what the primary commits now is lost
        await asyncio.sleep(LAG_S)
    killed_at = time.time()
    await asyncio.to_thread(cluster.kill_primary)
    await asyncio.to_thread(cluster.promote)
    promoted_at = time.time()

    # every run completes on the new primary, served by the same worker process
    new = cluster.replica_url
    for _ in range(1200):
        done = statuses(new)
        if len(done) == RUNS and set(done.values()) == {"completed"}:
            break
        await asyncio.sleep(0.1)
    assert set(statuses(new).values()) == {"completed"}, (statuses(new), worker.stderr[-4000:])
    assert worker.proc.poll() is None, "the failover must not take the worker down"
    assert "Traceback" not in worker.stderr, worker.stderr[-4000:]
    # a new process (its migrations' fast path, its run) and the worker, still the same one
    created = toren_cli("run", AGENT, "after the failover", "--no-follow", "--json",
                        "--dir", str(directory), env=env)
    assert created.returncode == 0, created.stderr
    after = str(json.loads(created.stdout)["id"])
    later = await runtime.start_run(AGENT, "from the runtime, after the failover")
    for run_id in (after, later):
        record = await runtime.wait_for_run(run_id, timeout_s=60)
        assert record.status == "completed", record
    worker.stop()
    await runtime.stop()

    logs = events_by_run(new)
    everything = [e for events in logs.values() for e in events]
    for run_id in runs:
        events = logs[run_id]
        check_log(events)  # nothing recorded twice, no gap: each stream's seqs exactly 1..n
        task = [e for e in events if e.stream == "task:main"]
        steps = [e.data["step"] for e in task if e.type == "ModelCallCompleted"]
        assert steps == list(range(1, len(TOOLS) + 2)), (run_id, steps)
        assert sorted(e.data["name"] for e in task if e.type == "ToolCallCompleted") == TOOLS
        for stream in {e.stream for e in events}:
            epochs = [e.data["epoch"] for e in events if e.stream == stream and "epoch" in e.data]
            assert epochs == sorted(epochs), f"a stale epoch appended after a takeover: {epochs}"
        kinds = Counter(e.type for e in events)
        assert (kinds["TaskStarted"], kinds["TaskFinished"], kinds["RunFinished"]) == (1, 1, 1)

    # recovery: from the kill to the first append the new primary committed
    first = min(e.created_at for e in everything if e.created_at is not None
                and e.created_at.timestamp() > killed_at)
    recovery_s = first.timestamp() - killed_at
    # the handlers in flight at the kill were fenced on the new primary, not let through
    fenced = len(re.findall(r"stopped work on run \S+: .*(another database server|are gone)",
                            worker.stderr))
    assert fenced >= 1, worker.stderr[-4000:]

    # Tools: executions kept outside the database, against the new primary's log
    done = executions(effects)
    made = read_call_log(calls)
    completed = [e for e in everything if e.type == "ModelCallCompleted"]
    explained: list[str] = [key for key, _pid in done]
    lost: list[Event] = []
    lost_transactions = 0
    if not synchronous:
        # the old primary's own log: what it had committed that the new one never received
        old_url = await asyncio.to_thread(cluster.start_old_primary)
        old_logs = events_by_run(old_url)
        lost = lost_commits(old_logs, logs)
        assert lost, "the replica's link was cut before the kill: commits must have been lost"
        lost_transactions = transactions(old_url, lost)
        # A tool call whose ToolCallStarted was lost ran once against the lost commits; its
        # next run, under the same idempotency key, is the new primary's log's to explain.
        against_lost = Counter(e.data["idempotency_key"] for e in lost
                               if e.type == "ToolCallStarted")
        explained = []
        for key, _pid in done:
            if against_lost[key]:
                against_lost[key] -= 1
            else:
                explained.append(key)
        # A model call was announced on the primary it was made against: the old one's
        # attempts (of the streams that lost events, kept apart as runs of their own) explain
        # the calls made against the lost commits, the new one's every other call
        streams = {(e.run_id, e.stream) for e in lost}
        old_attempts = [dataclasses.replace(e, run_id=f"{e.run_id}/old")
                        for events in old_logs.values() for e in events
                        if (e.run_id, e.stream) in streams]
    else:
        old_attempts = []
    assert tool_execution_violations(everything, explained) == []
    assert model_call_violations(everything + old_attempts, made) == []
    in_window_tools = len(done) - len(explained)
    in_window_calls = sum(e.type == "ModelCallStarted" for e in lost)
    executed = Counter(key for key, _pid in done)
    reexecuted = sum(n - 1 for n in executed.values())
    repaid = len(made) - len(completed)
    repeated = sum(bool(e.data.get("repeated")) for e in completed)
    # Paid again: the call each task had in flight when its lease was fenced (the kill rule,
    # for a crash of the worker's memory), and each call whose recorded answer was lost; run
    # again: a tool call in flight at the fence, and each one whose start was lost. The
    # receipts say so for every call paid again whose first attempt the log still holds.
    answers_lost = sum(e.type == "ModelCallCompleted" for e in lost)
    assert 0 <= repaid <= RUNS + answers_lost
    assert reexecuted <= RUNS + in_window_tools
    if synchronous:
        assert (answers_lost, in_window_tools) == (0, 0)
        assert repeated == repaid
    else:
        assert repeated <= repaid
    print(f"{'sync' if synchronous else 'async'}: recovery {recovery_s:.2f}s from the kill to "
          f"the first append on the new primary (promoted after "
          f"{promoted_at - killed_at:.2f}s); commits lost: {lost_transactions} "
          f"({len(lost)} events: {dict(Counter(e.type for e in lost))}); fenced handlers "
          f"{fenced}; model calls "
          f"{len(made)} for {len(completed)} completed ({repaid} repaid, "
          f"{in_window_calls} announced in lost commits); tool executions {len(done)} for "
          f"{len(executed)} calls ({reexecuted} again, {in_window_tools} started in lost commits)")
