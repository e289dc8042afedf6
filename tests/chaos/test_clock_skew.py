"""A worker whose wall clock is 30 s ahead or behind (libfaketime; its monotonic clock steady,
as with a real skew): leases, schedules and expiries still go by the database's clock. Needs
the Debian package faketime (``pytest -m faketime``, .ci/run's faults-below-toren step).

The evidence is the database's own times (lease expiries, event and fire times: Postgres runs
with the true clock), the workers' log lines and the offline model's call log, whose times a
skewed worker writes by its own clock (put back by the skew before they are compared)."""

from __future__ import annotations

import glob
import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.chaos.effects import executions, recording_tools_source
from tests.chaos.helpers import create_run, run_events, run_row, start_worker
from tests.conftest import wait_until
from tests.durable import check_log, model_call_violations, read_call_log, tool_execution_violations
from toren.testing import OutputProcess, write_agent_dir

pytestmark = [pytest.mark.faketime, pytest.mark.slow, pytest.mark.timeout(120)]
SKEWS = [pytest.param(30, id="ahead"), pytest.param(-30, id="behind")]
#: The slack allowed between a moment the database decides (a lease's expiry, a schedule
#: slot, an approval's deadline) and what followed it, on a loaded machine: polls, claims and
#: the lease TTL's own renewal period fit in it; a worker's skew (30 s) would not.
SLACK_S = 6.0


@pytest.fixture(scope="module")
def faketime_library() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    if not found:
        pytest.fail("libfaketime is missing: apt-get install faketime (.ci/run's faults step)")
    return found[0]


def skewed(env: dict[str, str], library: str, skew_s: int) -> dict[str, str]:
    """``env`` for a process whose wall clock is ``skew_s`` seconds off (its monotonic clock
    true: DONT_FAKE_MONOTONIC), checked on a probe process first."""
    env = env | {"LD_PRELOAD": library, "FAKETIME": f"{skew_s:+d}s", "DONT_FAKE_MONOTONIC": "1"}
    probe = subprocess.run([sys.executable, "-c", "import time; print(time.time())"],
                           env=os.environ | env, capture_output=True, text=True, check=True)
    seen = float(probe.stdout) - time.time()
    assert abs(seen - skew_s) < 5, f"libfaketime did not skew the clock: {seen:+.1f}s"
    return env


def database_now(url: str) -> datetime:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


def lease_of(url: str, run_id: str) -> tuple[str, int, datetime]:
    """``(holder, epoch, expires_at)`` of the run's task stream."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT holder, epoch, expires_at FROM toren_control.leases "
                           "WHERE run_id = %s AND stream = 'task:main'", [run_id]).fetchone()
    assert row is not None, f"run {run_id} has no task lease"
    return row


def unskewed_calls(calls: Path, skews: dict[int, int]) -> list[dict]:
    """The call log with each line's time put back by its writer's skew (by pid)."""
    return [line | {"at": float(line["at"]) - skews.get(line["pid"], 0)}
            for line in read_call_log(calls)]


# -- leases ------------------------------------------------------------------------------------


@pytest.mark.parametrize("skew_s", SKEWS)
def test_leases_go_by_the_database_clock_whichever_worker_is_skewed(
        skew_s: int, faketime_library: str, start_toren, toren_cli, database_url: str,
        tmp_path: Path) -> None:
    """Two workers, one skewed. Each in turn holds a run's lease and is frozen (SIGSTOP): the
    other takes the lease over once it has expired by the database's clock, not before and not
    30 s late; thawed, the frozen one's next append is refused (it lost the lease)."""
    agent, n_tools = "skewed", 8
    effects = tmp_path / "effects.log"
    calls = tmp_path / "model-calls.jsonl"
    directory = write_agent_dir(tmp_path, agent, tools_py=recording_tools_source(
        [f"step_{i:02d}" for i in range(n_tools)], effects))
    ttl_s = 2.0
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.4",
           "TOREN_SCRIPTED_CALL_LOG": str(calls), "TOREN_LEASE_TTL": str(ttl_s),
           "TOREN_POLL_INTERVAL": "0.2", "TOREN_LOG_LEVEL": "INFO", "COLUMNS": "1000"}
    schema = f"agent_{agent}"
    runs: list[str] = []
    figures: list[float] = []

    def diagnosis(run_id: str) -> str:
        """What holds the run up: its lease, its messages and the database's sessions."""
        with psycopg.connect(database_url) as conn:
            lease = conn.execute("SELECT holder, epoch, expires_at, clock_timestamp() "
                                 "FROM toren_control.leases WHERE run_id = %s", [run_id]
                                 ).fetchall()
            status = run_row(database_url, schema, run_id)[0]
            queue = conn.execute("SELECT id, kind, claimed_by, available_at, attempts "
                                 "FROM toren_control.queue WHERE run_id = %s", [run_id]
                                 ).fetchall()
            sessions = conn.execute(
                "SELECT pid, state, wait_event_type, wait_event, xact_start, "
                "left(query, 120) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()").fetchall()
        return (f"run {status}, lease {lease}\nqueue {queue}\nsessions:\n"
                + "\n".join(map(str, sessions)) + f"\ntrue worker: {true_worker.stderr[-3000:]}")

    def calls_done(run_id: str) -> int:
        return sum(e.type == "ModelCallCompleted" for e in run_events(database_url, schema,
                                                                       run_id))

    def taken_over(holder: OutputProcess, run_id: str) -> None:
        """Freeze ``holder`` (it holds the run's lease) until another worker has taken the
        lease over and appended; thaw it; check when that happened and the thawed worker's
        append was refused."""
        assert wait_until(lambda: calls_done(run_id) >= 2, 30)
        holder.proc.send_signal(signal.SIGSTOP)
        try:
            holder_id, epoch, expires_at = lease_of(database_url, run_id)
            assert epoch == 1 and f"-{holder.proc.pid}-" in holder_id, holder_id
            # frozen mid-run (its remaining steps take seconds), not after its end
            assert run_row(database_url, schema, run_id)[0] == "running", diagnosis(run_id)
            assert wait_until(lambda: any(e.data.get("epoch") == 2 for e in run_events(
                database_url, schema, run_id)), 30), diagnosis(run_id)
        finally:
            holder.proc.send_signal(signal.SIGCONT)
        taken = min(e.created_at for e in run_events(database_url, schema, run_id)
                    if e.data.get("epoch") == 2)
        after_s = (taken - expires_at).total_seconds()
        figures.append(after_s)
        # not before the lease expired by the database's clock, and not a skew later
        assert 0 <= after_s < SLACK_S, f"taken over {after_s:+.2f}s from the lease's expiry"
        lost = f"lost the lease on stream task:main of run {run_id} (epoch 1)"
        assert wait_until(lambda: lost in holder.stderr, 30), holder.stderr[-2000:]
        assert wait_until(lambda: run_row(database_url, schema, run_id)[0] == "completed", 60)

    skewed_worker = start_worker(start_toren, directory, skewed(env, faketime_library, skew_s))
    skews = {skewed_worker.proc.pid: skew_s}
    # the skewed worker holds a lease, a true one takes it over
    runs.append(create_run(toren_cli, directory, agent, "held by the skewed clock", env))
    assert wait_until(lambda: run_row(database_url, schema, runs[-1])[0] == "running", 30)
    true_worker = start_worker(start_toren, directory, env)
    taken_over(skewed_worker, runs[-1])
    # the true one holds a lease (claimed while the skewed one is frozen), the skewed one
    # takes it over
    skewed_worker.proc.send_signal(signal.SIGSTOP)
    try:
        runs.append(create_run(toren_cli, directory, agent, "held by the true clock", env))
        assert wait_until(lambda: run_row(database_url, schema, runs[-1])[0] == "running", 30)
    finally:
        skewed_worker.proc.send_signal(signal.SIGCONT)
    taken_over(true_worker, runs[-1])
    skewed_worker.stop()
    true_worker.stop()

    # the skewed worker measured its skew against the database's clock, and said so
    side = "ahead of" if skew_s > 0 else "behind"
    assert re.search(rf"this host's clock is 3\d\.\ds {side} the database's",
                     skewed_worker.stderr), skewed_worker.stderr[-2000:]
    assert "clock is" not in true_worker.stderr
    everything = []
    for run_id in runs:
        events = run_events(database_url, schema, run_id)
        check_log(events)
        epochs = [e.data["epoch"] for e in events if e.stream == "task:main"
                  and "epoch" in e.data]
        assert epochs == sorted(epochs) and epochs[-1] == 2  # the stale holder never wrote
        steps = [e.data["step"] for e in events if e.type == "ModelCallCompleted"]
        assert steps == list(range(1, n_tools + 2))
        everything += events
    made = unskewed_calls(calls, skews)
    assert model_call_violations(everything, made) == []
    completed = sum(e.type == "ModelCallCompleted" for e in everything)
    # at most the call in flight at each freeze is paid twice
    assert completed <= len(made) <= completed + len(runs)
    done = [key for key, _pid in executions(effects)]
    assert tool_execution_violations(everything, done) == []
    assert sum(count - 1 for count in Counter(done).values()) <= len(runs)
    print(f"skew {skew_s:+d}s: leases taken over "
          f"{', '.join(f'{s:.2f}s' for s in figures)} after their expiry by the database's "
          f"clock (TTL {ttl_s:g}s; first: the skewed holder frozen, then the true one)")


# -- schedules ---------------------------------------------------------------------------------


def test_a_schedule_fires_on_time_once_per_slot_with_both_workers_skewed(
        faketime_library: str, start_toren, database_url: str, tmp_path: Path) -> None:
    """One worker 30 s ahead, one 30 s behind, both ticking a schedule every 2 s: every slot
    fires once, when it is due by the database's clock."""
    schedule = {"name": "tick", "cron": "*/2 * * * * *", "input": "what time is it?"}
    directory = write_agent_dir(tmp_path, "clocked", schedules=[schedule])
    env = {"DATABASE_URL": database_url, "TOREN_SCHEDULE_SECONDS": "1",
           "TOREN_SCHEDULE_INTERVAL": "0.5", "TOREN_POLL_INTERVAL": "0.2"}
    workers = [start_worker(start_toren, directory, skewed(env, faketime_library, skew))
               for skew in (30, -30)]
    started = database_now(database_url)

    def fires() -> list[tuple[datetime, datetime, str]]:
        with psycopg.connect(database_url) as conn:
            return conn.execute(
                "SELECT f.slot_at, r.created_at, f.trigger FROM toren_control.schedule_fires f "
                "JOIN agent_clocked.runs r ON r.id = f.run_id ORDER BY f.slot_at").fetchall()

    assert wait_until(lambda: len(fires()) >= 3, 30)
    for worker in workers:
        worker.stop()
    fired = fires()
    slots = [slot for slot, _created, _trigger in fired]
    assert len(slots) == len(set(slots))  # once each
    assert all(b - a == timedelta(seconds=2) for a, b in itertools.pairwise(slots))
    assert slots[0] >= started - timedelta(seconds=2)  # nothing fired 30 s early
    lateness = [(created - slot).total_seconds() for slot, created, _trigger in fired]
    assert all(0 <= late < SLACK_S for late in lateness), lateness
    assert {trigger for _slot, _created, trigger in fired} <= {"cron"}
    print(f"{len(slots)} slots fired once each, {min(lateness):.2f}-{max(lateness):.2f}s "
          "after they were due, by workers 30 s ahead and 30 s behind")


# -- expiries ----------------------------------------------------------------------------------

REFUND_TOOLS = '''
from toren import tool

@tool
def refund(text: str) -> str:
    """Refund an order."""
    return "refunded " + text
'''


@pytest.mark.parametrize("skew_s", SKEWS)
def test_an_approval_expires_on_time_by_a_skewed_worker(
        skew_s: int, faketime_library: str, start_toren, toren_cli, database_url: str,
        tmp_path: Path) -> None:
    """An approval expires when its deadline passes by the database's clock: the skewed
    worker's wake-up comes then, once (30 s ahead, computed by its own clock, it came 30 s
    early and found nothing due, over and over; 30 s behind, it came 30 s late)."""
    expires_after_s = 3.0
    directory = write_agent_dir(tmp_path, "desk", tools_py=REFUND_TOOLS,
                                approvals={"refund": {"expiresAfterSeconds": expires_after_s}})
    with socket.socket() as probe:  # a free port for the worker's /metrics
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"DATABASE_URL": database_url, "TOREN_POLL_INTERVAL": "0.2"}
    worker = start_worker(start_toren, directory, skewed(env, faketime_library, skew_s)
                          | {"TOREN_METRICS_PORT": str(port)})
    run_id = create_run(toren_cli, directory, "desk", "order A7", env)
    assert wait_until(lambda: run_row(database_url, "agent_desk", run_id)[0] == "completed", 60)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        metrics = answer.read().decode()
    worker.stop()
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT status, requested_at, expires_at, decided_at FROM toren_control.approvals "
            "WHERE run_id = %s", [run_id]).fetchone()
    assert row is not None
    status, requested_at, expires_at, decided_at = row
    assert status == "expired"
    assert expires_at - requested_at == timedelta(seconds=expires_after_s)
    late_s = (decided_at - expires_at).total_seconds()
    assert 0 <= late_s < SLACK_S, f"expired {late_s:+.2f}s from its deadline"
    check_log(run_events(database_url, "agent_desk", run_id))
    # the task's messages: the first, and the wake-up at the expiry (a wake-up that comes a
    # moment early by the database's clock is put off once more); a wake-up computed by the
    # skewed clock came 30 s early and was put off every 50 ms until the deadline
    found = re.search(r'toren_messages_handled_total\{agent="desk",kind="task"\} (\d+)',
                      metrics)
    assert found is not None, metrics
    task_messages = int(found.group(1))
    assert task_messages <= 4, task_messages
    print(f"skew {skew_s:+d}s: the approval expired {late_s:.2f}s after its deadline; the "
          f"task was worked for {task_messages} messages")
