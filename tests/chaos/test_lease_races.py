"""Lease races against real ``toren worker`` processes and real Postgres: a worker paused past
its lease, and workers whose wall clocks disagree by hours.

Leases are checked and expire by the database's clock only (``now()`` in every lease query), so
a stalled worker loses its next append and a worker's own clock never decides who holds one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.chaos.effects import executions, recording_tools_source
from tests.chaos.helpers import create_run, run_events, run_row, start_worker
from tests.conftest import wait_until
from tests.durable import check_log
from toren.testing import OutputProcess, write_agent_dir

AGENT = "racy"
SCHEMA = f"agent_{AGENT}"


def model_calls(call_log: Path) -> list[dict[str, Any]]:
    """The offline model's calls as it logged them (``pid``, ``at``: its own clock)."""
    return [json.loads(line) for line in call_log.read_text().splitlines()]


def worker_id(url: str, pid: int) -> str:
    """The id a worker process signed in with (its lease holder name)."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT id FROM toren_control.workers WHERE pid = %s "
                           "ORDER BY started_at DESC LIMIT 1", [pid]).fetchone()
    assert row is not None, f"worker {pid} has not signed in"
    return str(row[0])


# -- a worker paused past its lease ----------------------------------------------------------


@pytest.mark.slow
def test_a_worker_paused_past_its_lease_has_its_stale_append_rejected(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    n_tools = 6
    effects = tmp_path / "effects.log"
    calls = tmp_path / "model-calls.jsonl"
    directory = write_agent_dir(tmp_path, AGENT, tools_py=recording_tools_source(
        [f"step_{i:02d}" for i in range(n_tools)], effects))
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.5",
           "TOREN_SCRIPTED_CALL_LOG": str(calls), "TOREN_LEASE_TTL": "1",
           "TOREN_POLL_INTERVAL": "0.2", "TOREN_LOG_LEVEL": "INFO",
           "COLUMNS": "1000"}  # one log record, one line
    run_id = create_run(toren_cli, directory, AGENT, "pause me", env)
    first = start_worker(start_toren, directory, env)

    def calls_done() -> int:
        return sum(e.type == "ModelCallCompleted" for e in run_events(database_url, SCHEMA, run_id))

    assert wait_until(lambda: calls_done() >= 2, 30)
    os.kill(first.proc.pid, signal.SIGSTOP)
    try:
        # the first worker's lease runs out (by the database clock) while it is frozen, and a
        # second worker takes the task over at the next epoch
        second = start_worker(start_toren, directory, env)
        assert wait_until(lambda: any(
            e.data.get("epoch", 0) >= 2 for e in run_events(database_url, SCHEMA, run_id)
            if e.stream == "task:main"), 30)
    finally:
        os.kill(first.proc.pid, signal.SIGCONT)
    # thawed, the first worker carries on from where it was frozen: its next append must fail
    lost = re.compile(rf"lost the lease on stream task:main of run {run_id} \(epoch 1\); "
                      r"it is now held by \S+ at epoch (\d+)")
    assert wait_until(lambda: lost.search(first.stderr) is not None, 30), first.stderr
    assert wait_until(lambda: run_row(database_url, SCHEMA, run_id)[0] == "completed", 60)
    assert first.proc.poll() is None, "losing a lease must not take the worker down"
    match = lost.search(first.stderr)
    assert match is not None and int(match.group(1)) >= 2
    first.stop()
    second.stop()

    events = run_events(database_url, SCHEMA, run_id)
    check_log(events)  # no duplicate (and no missing) sequence number in any stream
    task = [e for e in events if e.stream == "task:main"]
    epochs = [e.data["epoch"] for e in task if "epoch" in e.data]
    assert epochs == sorted(epochs), f"a stale epoch appended after the takeover: {epochs}"
    assert epochs[0] == 1 and max(epochs) >= 2
    # the run completed once: one start, one finish, each step's model call recorded once
    kinds = Counter(e.type for e in events)
    assert (kinds["TaskStarted"], kinds["TaskFinished"], kinds["RunFinished"]) == (1, 1, 1)
    steps = [e.data["step"] for e in task if e.type == "ModelCallCompleted"]
    assert steps == list(range(1, n_tools + 2))
    assert sorted(e.data["name"] for e in task if e.type == "ToolCallCompleted") == [
        f"step_{i:02d}" for i in range(n_tools)]

    # each tool ran at most once per worker (so once per epoch: each worker held one), every
    # tool ran, and only the step in flight at the freeze can have run in both workers
    done = executions(effects)
    assert len(done) == len(set(done)), f"a worker ran the same tool call twice: {done}"
    assert {pid for _key, pid in done} <= {first.proc.pid, second.proc.pid}
    per_key = Counter(key for key, _pid in done)
    assert len(per_key) == n_tools
    assert sum(count - 1 for count in per_key.values()) <= 1, per_key
    # and the model: every completed call paid once, plus at most the one the frozen worker had
    # in flight (its answer was thrown away with the rejected append)
    paid = len(model_calls(calls))
    assert len(steps) <= paid <= len(steps) + 1
    assert sum(bool(e.data.get("repeated")) for e in task if e.type == "ModelCallCompleted") <= 1


# -- clock skew between workers --------------------------------------------------------------

#: A ``sitecustomize`` that moves this process's wall clock (``time.time``, ``time.time_ns``,
#: ``datetime.datetime.now/utcnow/today``) by ``CHAOS_CLOCK_SKEW_S`` seconds. ``__slots__``
#: keeps the stand-in class the size of ``datetime.datetime``, which psycopg's C module checks.
SKEWED_CLOCK = '''\
"""Skews this process's wall clock by CHAOS_CLOCK_SKEW_S seconds (a clock-skew test)."""

import datetime as _datetime
import os
import time as _time

_SKEW = float(os.environ.get("CHAOS_CLOCK_SKEW_S") or 0)
if _SKEW:
    _real_time, _real_time_ns = _time.time, _time.time_ns
    _time.time = lambda: _real_time() + _SKEW
    _time.time_ns = lambda: _real_time_ns() + int(_SKEW * 1e9)
    _DELTA = _datetime.timedelta(seconds=_SKEW)
    _Real = _datetime.datetime

    class datetime(_Real):
        __slots__ = ()

        @classmethod
        def now(cls, tz=None):
            return _Real.now(tz) + _DELTA

        @classmethod
        def utcnow(cls):
            return _Real.utcnow() + _DELTA

        @classmethod
        def today(cls):
            return _Real.today() + _DELTA

    datetime.__module__ = "datetime"
    _datetime.datetime = datetime
'''

SKEW_S = 3600.0
TTL_S = 2.0
#: How late after the lease's expiry a takeover may come: the poll interval, a deferral of a
#: message that came back before its lease ran out, and a loaded machine. An hour is not.
TAKEOVER_SLACK_S = 3.0
SKEW_TOOLS = 10
#: Runs kept going at once while workers are killed.
ACTIVE_RUNS = 3


def skewed_env(base: dict[str, str], boot: Path, skew_s: float) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(boot), os.environ.get("PYTHONPATH", "")) if p)
    return base | {"PYTHONPATH": path, "CHAOS_CLOCK_SKEW_S": str(skew_s)}


def stream_events(conn: psycopg.Connection[Any], run_id: str, stream: str
                  ) -> list[tuple[int, str, dict[str, Any], datetime]]:
    return conn.execute(
        f"SELECT seq, type, data, created_at FROM {SCHEMA}.events "
        "WHERE run_id = %s AND stream = %s ORDER BY seq", [run_id, stream]).fetchall()


@pytest.mark.slow
def test_workers_with_skewed_clocks_take_over_after_the_ttl_by_the_database_clock(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    boot = tmp_path / "skewed-clock"
    boot.mkdir()
    (boot / "sitecustomize.py").write_text(SKEWED_CLOCK)
    effects = tmp_path / "effects.log"
    calls = tmp_path / "model-calls.jsonl"
    directory = write_agent_dir(tmp_path, AGENT, tools_py=recording_tools_source(
        [f"step_{i:02d}" for i in range(SKEW_TOOLS)], effects))
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.3",
           "TOREN_SCRIPTED_CALL_LOG": str(calls), "TOREN_LEASE_TTL": str(TTL_S),
           # room for every active run in either worker: a takeover never waits for a slot
           "TOREN_POLL_INTERVAL": "0.2", "TOREN_CONCURRENCY": str(ACTIVE_RUNS + 1),
           # every kill is a failed delivery of the messages in hand: keep the poison detector
           # out of a test of takeovers
           "TOREN_MAX_DELIVERIES": "100"}
    skews = {"ahead": SKEW_S, "behind": -SKEW_S}
    envs = {name: skewed_env(env, boot, skew) for name, skew in skews.items()}
    text = "same input"
    runs = [create_run(toren_cli, directory, AGENT, text, env) for _ in range(ACTIVE_RUNS)]
    workers: dict[str, OutputProcess] = {
        name: start_worker(start_toren, directory, envs[name]) for name in skews}
    skew_of_pid = {w.proc.pid: skews[name] for name, w in workers.items()}

    conn = psycopg.connect(database_url, autocommit=True)
    measured: list[dict[str, Any]] = []
    killed_pids: list[int] = []
    try:
        for victim in ["ahead", "behind", "ahead", "behind"]:
            survivor = "behind" if victim == "ahead" else "ahead"
            holder = worker_id(database_url, workers[victim].proc.pid)

            def mid_task(holder: str = holder) -> bool:
                active = conn.execute(f"SELECT count(*) FROM {SCHEMA}.runs "
                                      "WHERE status IN ('queued', 'running')").fetchone()
                if active is not None and active[0] < ACTIVE_RUNS:  # keep work coming
                    runs.append(create_run(toren_cli, directory, AGENT, text, env))
                # the victim holds a task with at least one step behind it and several ahead
                return conn.execute(
                    f"SELECT 1 FROM toren_control.leases l WHERE l.holder = %s "
                    "AND l.stream LIKE 'task:%%' AND l.expires_at > now() "
                    f"AND (SELECT count(*) FROM {SCHEMA}.events e WHERE e.run_id = l.run_id "
                    "      AND e.stream = l.stream AND e.type = 'ModelCallCompleted') "
                    "    BETWEEN 1 AND %s", [holder, SKEW_TOOLS - 2]).fetchone() is not None

            assert wait_until(mid_task, 30, interval=0.05), f"{victim} never got a task"
            os.kill(workers[victim].proc.pid, signal.SIGKILL)
            # the moment of the kill and the victim's task leases, by the database clock
            held = conn.execute(
                "SELECT clock_timestamp(), l.run_id::text, l.stream, l.epoch, l.expires_at "
                "FROM toren_control.leases l WHERE l.holder = %s AND l.stream LIKE 'task:%%' "
                "AND l.expires_at > clock_timestamp()", [holder]).fetchall()
            workers[victim].proc.wait(timeout=10)
            killed_pids.append(workers[victim].proc.pid)
            assert held, f"the killed {victim} worker held no live task lease"
            kill_at = held[0][0]
            orphans = []
            for _at, run_id, stream, epoch, expires_at in held:
                events = stream_events(conn, run_id, stream)
                if any(kind == "TaskFinished" for _s, kind, _d, _c in events):
                    continue  # its last append committed as it died: nothing to take over
                # set by the database clock: at most one TTL ahead, never an hour either way
                remaining = (expires_at - kill_at).total_seconds()
                assert 0 < remaining <= TTL_S + 0.25, (victim, remaining)
                orphans.append({"victim": victim, "survivor": survivor, "run_id": run_id,
                                "stream": stream, "epoch": epoch, "kill_at": kill_at,
                                "expires_at": expires_at})
            assert orphans, f"the killed {victim} worker held no unfinished task"

            def taken_over(orphan: dict[str, Any]) -> datetime | None:
                later = [created for _s, _k, data, created in
                         stream_events(conn, orphan["run_id"], orphan["stream"])
                         if data.get("epoch", 0) > orphan["epoch"]]
                return min(later) if later else None

            # only the survivor (the other clock) is running: it must take over, and not
            # before the lease has run out by the database clock
            assert wait_until(lambda orphans=orphans: all(taken_over(o) for o in orphans),
                              TTL_S + TAKEOVER_SLACK_S + 10, interval=0.05), orphans
            for orphan in orphans:
                orphan["takeover_at"] = taken_over(orphan)
                measured.append(orphan)
            workers[victim] = start_worker(start_toren, directory, envs[victim])
            skew_of_pid[workers[victim].proc.pid] = skews[victim]

        assert wait_until(lambda: all(run_row(database_url, SCHEMA, r)[0] == "completed"
                                      for r in runs), 60), "not every run completed"
    finally:
        conn.close()
        for worker in workers.values():
            worker.stop()

    for orphan in measured:
        delay = (orphan["takeover_at"] - orphan["kill_at"]).total_seconds()
        assert orphan["takeover_at"] >= orphan["expires_at"], (
            f"{orphan['survivor']} took over {orphan['stream']} of {orphan['run_id']} before "
            f"the {orphan['victim']} worker's lease expired: {orphan}")
        assert delay <= TTL_S + TAKEOVER_SLACK_S, (
            f"{orphan['survivor']} took {delay:.2f}s to take over from {orphan['victim']} "
            f"(lease TTL {TTL_S}s): {orphan}")
    print({"takeovers": [(o["victim"], round((o["takeover_at"] - o["kill_at"])
                                             .total_seconds(), 3)) for o in measured],
           "runs": len(runs)})

    # every run completed once with the same, full answer, and a clean log
    outputs = set()
    completed_calls = 0
    for run_id in runs:
        status, output, _error = run_row(database_url, SCHEMA, run_id)
        assert status == "completed"
        outputs.add(output)
        events = run_events(database_url, SCHEMA, run_id)
        check_log(events)
        kinds = Counter(e.type for e in events)
        assert (kinds["TaskStarted"], kinds["TaskFinished"], kinds["RunFinished"]) == (1, 1, 1)
        steps = sorted(e.data["step"] for e in events if e.type == "ModelCallCompleted")
        assert steps == list(range(1, SKEW_TOOLS + 2)), f"a step was recorded twice in {run_id}"
        completed_calls += len(steps)
    assert len(outputs) == 1, outputs
    (output,) = outputs
    assert all(f"result {i} for {text}" in output for i in range(SKEW_TOOLS)), output

    # tools: every call ran; a call ran again only in a task a kill interrupted, first in the
    # killed process, and at most once per interrupted task
    interrupted = {(o["run_id"], o["stream"].removeprefix("task:")) for o in measured}
    done = executions(effects)
    assert len(done) == len(set(done)), "a process ran the same tool call twice"
    by_key: dict[str, list[int]] = {}
    for key, pid in done:
        by_key.setdefault(key, []).append(pid)
    assert len(by_key) == SKEW_TOOLS * len(runs)
    rerun_tasks: Counter[tuple[str, str]] = Counter()
    for key, pids in by_key.items():
        if len(pids) == 1:
            continue
        _prefix, run_id, task_id, _step, _index = key.split(":")
        assert (run_id, task_id) in interrupted, f"{key} re-ran without a kill: {pids}"
        assert len(pids) == 2 and pids[0] in killed_pids, (key, pids)
        rerun_tasks[(run_id, task_id)] += 1
    assert all(count == 1 for count in rerun_tasks.values()), rerun_tasks
    # model calls: each completed one paid once, plus at most one in flight per killed task
    paid = model_calls(calls)
    assert completed_calls <= len(paid) <= completed_calls + len(measured)

    # and the clocks really were skewed, both ways, in the processes that did the work
    now = time.time()
    offsets: dict[float, list[float]] = {}
    for call in paid:
        offsets.setdefault(skew_of_pid[call["pid"]], []).append(call["at"] - now)
    assert set(offsets) == {SKEW_S, -SKEW_S}
    for skew, seen in offsets.items():
        assert all(skew - 300 < offset < skew + 5 for offset in seen), (skew, seen[:3])
