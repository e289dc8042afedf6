"""A full disk under Postgres: its data directory on a small tmpfs that a filler file fills in
the middle of runs, then frees. Needs root to mount the filesystem (``pytest -m diskfull``,
.ci/run's faults-below-toren step). The invariants are checked from evidence kept outside the
database (the tools' effects file, the offline model's call log, the API's answers and the
processes' own log lines) against the event log."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.chaos.effects import executions, recording_tools_source
from tests.chaos.helpers import run_events, start_worker
from tests.conftest import wait_until
from tests.durable import check_log, model_call_violations, read_call_log, tool_execution_violations
from tests.e2e.test_http_api import call
from toren.core.events import Event
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.diskfull, pytest.mark.slow, pytest.mark.timeout(180)]
AGENT = "filled"
SCHEMA = f"agent_{AGENT}"
#: Room for a fresh cluster (about 40 MB, 16 MB of it the first WAL segment), Toren's
#: schemas and a new WAL segment: the filler takes whatever is left.
DISK_MB = 96


@dataclass
class SmallDisk:
    """A Postgres cluster whose data directory is on a filesystem of its own, ``DISK_MB``
    large, mounted at ``mount``."""

    url: str
    mount: Path
    pgdata: Path

    @property
    def filler(self) -> Path:
        return self.mount / "filler"

    def fill(self) -> int:
        """Take every free byte with a filler file (unbuffered: its last blocks a page at a
        time); return its size."""
        with open(self.filler, "ab", buffering=0) as handle:
            for chunk in (1 << 20, 4096):
                with contextlib.suppress(OSError):
                    while True:
                        handle.write(b"\0" * chunk)
        return self.filler.stat().st_size

    def free(self) -> None:
        self.filler.unlink()

    def available(self) -> int:
        stat = os.statvfs(self.mount)
        return stat.f_bavail * stat.f_frsize


@pytest.fixture(scope="module")
def small_disk() -> Iterator[SmallDisk]:
    if os.geteuid() != 0:
        pytest.fail("the diskfull tests mount a tmpfs: run them as root (pytest -m diskfull, "
                    ".ci/run's faults-below-toren step)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    # not under pytest's tmp_path, whose private permissions the server's user cannot cross
    mount = Path(tempfile.mkdtemp(prefix="toren-small-disk-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m,mode=0755", "tmpfs",
                    str(mount)], check=True)
    server = None
    try:
        pgdata = mount / "pgdata"
        server = pgserver.get_server(pgdata, cleanup_mode="delete")
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE toren_disk")
        yield SmallDisk(server.get_uri("toren_disk"), mount, pgdata)
    finally:
        if server is not None:
            with contextlib.suppress(Exception):
                (mount / "filler").unlink(missing_ok=True)
                server.cleanup()
        subprocess.run(["umount", "-l", str(mount)], check=False)
        shutil.rmtree(mount, ignore_errors=True)


def statuses(url: str, run_ids: list[str]) -> Counter[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"SELECT status FROM {SCHEMA}.runs WHERE id = ANY(%s::uuid[])",
                            [run_ids]).fetchall()
    return Counter(status for (status,) in rows)


def new_wal_segment(url: str) -> None:
    """Start a fresh WAL segment while there is room for it: the full spell then writes its
    WAL into a file that exists (a failed WAL write is a PANIC: the other test's case)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_switch_wal()")
        conn.execute("CHECKPOINT")


def test_a_full_disk_is_a_503_runs_wait_and_resume_when_space_is_freed(
        small_disk: SmallDisk, start_toren, tmp_path: Path) -> None:
    n_tools = 4
    effects = tmp_path / "effects.log"
    calls = tmp_path / "model-calls.jsonl"
    crews = tmp_path / "crews"
    directory = write_agent_dir(crews, AGENT, tools_py=recording_tools_source(
        [f"step_{i:02d}" for i in range(n_tools)], effects))
    # two deliveries only: a handler failure counted as a delivery would dead-letter the run
    # (fail it) within the full spell
    env = {"DATABASE_URL": small_disk.url, "TOREN_SCRIPTED_DELAY": "0.3",
           "TOREN_SCRIPTED_CALL_LOG": str(calls), "TOREN_LEASE_TTL": "2",
           "TOREN_POLL_INTERVAL": "0.2", "TOREN_MAX_DELIVERIES": "2",
           "TOREN_POOL_TIMEOUT": "3", "TOREN_LOG_LEVEL": "INFO", "TOREN_ALLOW_NO_KEYS": "1",
           "COLUMNS": "1000"}  # one log record, one line
    server = start_toren("serve", "--dir", str(crews), "--port", "0", "--json", env=env)
    api = server.next_json()["url"]
    worker = start_worker(start_toren, directory, env)

    def create(text: str) -> tuple[int, dict, dict[str, str]]:
        return call(f"{api}/runs", "POST", {"agent": AGENT, "input": text}, timeout_s=15)

    runs: list[str] = []
    for i in range(4):
        status, answer, _ = create(f"before {i}")
        assert status == 201, answer
        runs.append(answer["id"])
    assert wait_until(lambda: statuses(small_disk.url, runs)["running"] >= 2, 30)

    new_wal_segment(small_disk.url)
    filled = small_disk.fill()
    full_at = time.monotonic()
    try:
        # Creating a run inserts rows; the pages at hand may still hold a few: the first
        # insert that needs a new page is refused, and the API says why, at once
        refused = None
        created_while_full = 0
        for i in range(200):
            status, answer, headers = create(f"while full {i}")
            if status == 201:
                runs.append(answer["id"])
                created_while_full += 1
                continue
            refused = (status, answer, headers)
            break
        assert refused is not None, "200 runs created on a full disk"
        status, answer, headers = refused
        assert (status, answer["error"]["code"]) == (503, "database_unavailable"), answer
        assert headers["Retry-After"] == "2"
        message = answer["error"]["message"]
        assert "no space left on device" in message and "free space" in message, message
        # and the server's log says so (once, not at every request)
        said = "answering 503 database_unavailable: the database server has no space left"
        assert wait_until(lambda: said in server.stderr, 10), server.stderr[-2000:]
        # the worker's appends are refused too: it says why once, and its runs wait
        waits = "waits for the database: the database server has no space left on device"
        assert wait_until(lambda: waits in worker.stderr, 30), worker.stderr
        # long enough for every handler to fail more often than TOREN_MAX_DELIVERIES: a
        # failure counted as a delivery would have dead-lettered its run by now
        time.sleep(max(0.0, 6.0 - (time.monotonic() - full_at)))
        during = statuses(small_disk.url, runs)
        assert set(during) <= {"queued", "running"}, during  # waiting: none failed, none lost
        assert sum(during.values()) == len(runs)
        full_s = time.monotonic() - full_at
    finally:
        small_disk.free()
    freed_at = time.monotonic()
    # the same processes carry on: no restart
    logs = recovered(small_disk.url, api, runs, server, worker)
    resumed_s = time.monotonic() - freed_at
    assert "the database takes writes again" in worker.stderr

    everything = []
    for events in logs:
        kinds = Counter(e.type for e in events)
        assert (kinds["TaskStarted"], kinds["TaskFinished"], kinds["RunFinished"]) == (1, 1, 1)
        steps = [e.data["step"] for e in events if e.type == "ModelCallCompleted"]
        assert steps == list(range(1, n_tools + 2))
        everything += events
    # Model: every call made inside an announced attempt whose answer was not yet recorded
    # (a call is made only after its ModelCallStarted committed); a call whose answer's
    # append was refused is made again, and its completion says so
    made = read_call_log(calls)
    assert model_call_violations(everything, made) == []
    completed = [e for e in everything if e.type == "ModelCallCompleted"]
    repaid = len(made) - len(completed)
    attempts = Counter((e.run_id, e.stream, e.data["step"]) for e in everything
                       if e.type == "ModelCallStarted")
    for done in completed:  # a step attempted again says so in its receipt
        assert done.data.get("repeated", False) == (
            attempts[(done.run_id, done.stream, done.data["step"])] > 1), done
    assert 0 <= repaid <= sum(count - 1 for count in attempts.values())
    # and only a handler that gave up on an append (after retrying it for the lease TTL)
    # loses an answer it held: each such hand-back is one line of the worker's log
    handed_back = worker.stderr.count(" waits for the database: ")
    assert repaid <= handed_back, (repaid, handed_back)
    # Tools: run again only where the log allows it (a result whose append was refused)
    done = [key for key, _pid in executions(effects)]
    assert tool_execution_violations(everything, done) == []
    assert {key for key in done} == {e.data["idempotency_key"] for e in everything
                                      if e.type == "ToolCallStarted"}
    print(f"filler {filled / 2**20:.1f} MiB; disk full {full_s:.1f}s: the API answered 503 "
          f"after {created_while_full} more runs were created; every run finished "
          f"{resumed_s:.1f}s after the space was freed; {len(made)} model calls for "
          f"{len(completed)} completed ({repaid} repaid; {handed_back} hand-backs), "
          f"{len(done)} tool executions for {len(set(done))} calls")


def recovered(url: str, api: str, runs: list[str], server: Any, worker: Any) -> list[list[Event]]:
    """Once the database takes writes again: every run in ``runs`` completes in the same
    server and worker processes (no restart), a run created now completes too (added to
    ``runs``), neither process logged a traceback or answered ``internal_error``; each run's
    events, each stream's seqs exactly 1..n (nothing half-written or lost)."""
    assert wait_until(lambda: statuses(url, runs)["completed"] == len(runs), 60), (
        statuses(url, runs), worker.stderr[-3000:])
    assert server.proc.poll() is None and worker.proc.poll() is None
    status, answer, _ = call(f"{api}/runs", "POST", {"agent": AGENT, "input": "after"},
                             timeout_s=15)
    assert status == 201, answer
    runs.append(answer["id"])
    assert wait_until(lambda: statuses(url, runs)["completed"] == len(runs), 30)
    for log_text in (server.stderr, worker.stderr):
        assert "Traceback" not in log_text and "internal_error" not in log_text
    logs = []
    for run_id in runs:
        events = run_events(url, SCHEMA, run_id)
        check_log(events)
        logs.append(events)
    return logs


def emit_wal_until_refused(url: str) -> str:
    """Write WAL (and only WAL: logical messages touch no table) until Postgres cannot create
    its next WAL segment; return what the client saw."""
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(200):  # 1 MB each: a segment is 16 MB
            try:
                conn.execute("SELECT pg_logical_emit_message(false, 'toren-test', "
                             "repeat('x', 1000000))")
            except psycopg.OperationalError as exc:
                return " ".join(str(exc).split())
    raise AssertionError("200 MB of WAL written to a full disk")


def test_a_full_wal_disk_stops_postgres_and_toren_waits_for_its_restart(
        small_disk: SmallDisk, start_toren, tmp_path: Path) -> None:
    """When the WAL cannot grow Postgres PANICs, and its crash recovery needs room too: it
    stops, and stays down until someone starts it again (with space freed). Toren sees a
    database outage: the API answers 503, workers wait, and the same processes finish the
    runs once Postgres is started again."""
    from tests.chaos.test_database_faults import pg_ctl

    effects = tmp_path / "effects.log"
    calls = tmp_path / "model-calls.jsonl"
    crews = tmp_path / "crews"
    directory = write_agent_dir(crews, AGENT, tools_py=recording_tools_source(
        ["look", "count"], effects))
    env = {"DATABASE_URL": small_disk.url, "TOREN_SCRIPTED_DELAY": "0.3",
           "TOREN_SCRIPTED_CALL_LOG": str(calls), "TOREN_LEASE_TTL": "2",
           "TOREN_POLL_INTERVAL": "0.2", "TOREN_POOL_TIMEOUT": "2", "TOREN_LOG_LEVEL": "INFO",
           "TOREN_ALLOW_NO_KEYS": "1", "COLUMNS": "1000"}
    server = start_toren("serve", "--dir", str(crews), "--port", "0", "--json", env=env)
    api = server.next_json()["url"]
    worker = start_worker(start_toren, directory, env)
    runs = []
    for i in range(4):
        status, answer, _ = call(f"{api}/runs", "POST", {"agent": AGENT, "input": f"wal {i}"})
        assert status == 201, answer
        runs.append(answer["id"])
    assert wait_until(lambda: statuses(small_disk.url, runs)["running"] >= 2, 30)

    small_disk.fill()
    try:
        said = emit_wal_until_refused(small_disk.url)
        # the backend that wanted the segment PANICs (its client may get the words), and
        # the postmaster ends every session
        assert "pg_wal" in said or "terminated abnormally" in said, said
        # crash recovery wants room for WAL too: the server stops rather than come back
        # (its log, on the same full disk, may not hold the PANIC's lines)
        pid_file = small_disk.pgdata / "postmaster.pid"
        assert wait_until(lambda: not pid_file.exists(), 30), "Postgres is still up"
        status, answer, headers = call(f"{api}/runs", "POST", {"agent": AGENT, "input": "x"},
                                       timeout_s=15)
        assert (status, answer["error"]["code"]) == (503, "database_unavailable"), answer
        assert headers["Retry-After"] == "2"
        assert wait_until(lambda: " waits for the database: " in worker.stderr, 30)
        assert set(statuses_or_none(small_disk.url, runs)) == {None}  # no server to ask
    finally:
        small_disk.free()
    # the operator frees space and starts Postgres (systemd, a container restart policy...)
    pg_ctl(small_disk.pgdata, "-w", "restart")  # reuses postmaster.opts: the same socket
    started_at = time.monotonic()
    logs = recovered(small_disk.url, api, runs, server, worker)
    resumed_s = time.monotonic() - started_at
    everything = []
    for events in logs:
        steps = [e.data["step"] for e in events if e.type == "ModelCallCompleted"]
        assert steps == [1, 2, 3]
        everything += events
    assert model_call_violations(everything, read_call_log(calls)) == []
    assert tool_execution_violations(everything, [k for k, _ in executions(effects)]) == []
    print(f"Postgres PANICked on a full WAL disk and stayed down; every run finished "
          f"{resumed_s:.1f}s after it was started again")


def statuses_or_none(url: str, run_ids: list[str]) -> Counter[str | None]:
    """``statuses``, or ``{None: 1}`` when the database cannot be reached."""
    try:
        return Counter(statuses(url, run_ids))
    except psycopg.OperationalError:
        return Counter([None])
