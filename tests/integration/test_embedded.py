"""The embedded Postgres: with DATABASE_URL unset, every toren process started from one
TOREN_HOME shares one server, which stops with the last of them and keeps the data."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
from toren_postgres import embedded

from tests.conftest import TorenCli, TorenProcess, wait_until
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

StartToren = Callable[..., TorenProcess]


@pytest.fixture
def home() -> Iterator[Path]:
    """A TOREN_HOME outside pytest's 0700 temporary root (the server runs as another user when
    the tests run as root), with any server left behind stopped afterwards."""
    path = Path(tempfile.mkdtemp(prefix="toren-home-"))
    try:
        yield path
    finally:
        pid = postmaster_pid(path)
        if pid is not None and psutil.pid_exists(pid):
            os.kill(pid, signal.SIGINT)  # fast shutdown
            wait_until(lambda: not psutil.pid_exists(pid), timeout=20)
        shutil.rmtree(path, ignore_errors=True)


def postmaster_lines(home: Path) -> list[str] | None:
    """postmaster.pid's lines, or ``None`` while there is none or Postgres is still writing
    it (it adds the port and the socket directory, lines 4 and 5, as it starts)."""
    try:
        lines = (home / "pgdata" / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None
    return lines if len(lines) >= 5 else None


def postmaster_pid(home: Path) -> int | None:
    lines = postmaster_lines(home)
    return int(lines[0]) if lines else None


def server_url(home: Path) -> str:
    """The URL of Toren's database on the running embedded server, from postmaster.pid
    (line 4 is the port, line 5 the socket directory)."""
    lines = postmaster_lines(home)
    assert lines is not None, "no embedded server is running"
    return f"host={lines[4]} port={lines[3]} user=postgres dbname=toren"


def postmasters(home: Path) -> list[int]:
    """PIDs of postgres server processes whose command line names this home's pgdata."""
    pgdata = str((home / "pgdata").resolve())
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and pgdata in cmdline:
            found.append(proc.pid)
    return found


def server_stopped(home: Path, pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def get_json(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def start_dev(start_toren: StartToren, home: Path, crew: Path) -> tuple[TorenProcess, dict]:
    process = start_toren("dev", "--dir", str(crew), "--port", "0", "--json",
                          env={"TOREN_HOME": str(home)})
    return process, process.next_json()


def runs(home: Path) -> list[str]:
    with psycopg.connect(server_url(home)) as conn:
        return [row[0] for row in conn.execute("SELECT input->>'note' FROM agent_crew.runs "
                                               "ORDER BY created_at").fetchall()]


def insert_run(home: Path, note: str) -> None:
    with psycopg.connect(server_url(home)) as conn:
        conn.execute("INSERT INTO agent_crew.runs (id, input) VALUES (gen_random_uuid(), %s)",
                     [json.dumps({"note": note})])


def test_data_survives_from_one_process_to_the_next(home: Path, start_toren: StartToren,
                                                    toren_cli: TorenCli,
                                                    tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")

    migrated = toren_cli("db", "migrate", "--dir", str(crew), "--json",
                         env={"TOREN_HOME": str(home)})
    assert migrated.returncode == 0, migrated.stderr
    assert "agent_crew" in {m["scope"] for m in json.loads(migrated.stdout)["applied"]}
    assert (home / "pgdata" / "PG_VERSION").is_file()

    first, ready = start_dev(start_toren, home, crew)
    assert ready["event"] == "ready"
    assert "embedded Postgres" in ready["database"] and str(home) in ready["database"]
    insert_run(home, "written by the test")
    assert first.stop() == 0

    second, _ = start_dev(start_toren, home, crew)
    assert runs(home) == ["written by the test"]
    assert second.stop() == 0


def test_concurrent_processes_share_one_server(home: Path, start_toren: StartToren,
                                               toren_cli: TorenCli, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")

    # Both start at once on a TOREN_HOME that has no server yet (nor a data directory).
    one = start_toren("dev", "--dir", str(crew), "--port", "0", "--json",
                      env={"TOREN_HOME": str(home)})
    two = start_toren("dev", "--dir", str(crew), "--port", "0", "--json",
                      env={"TOREN_HOME": str(home)})
    ready_one, ready_two = one.next_json(), two.next_json()
    assert "url" in ready_one and "url" in ready_two, (ready_one, ready_two, one.stderr,
                                                       two.stderr)
    pid = postmaster_pid(home)
    assert pid is not None
    # one server: a postmaster the losing process started finds the data directory's lock
    # taken and exits (on a loaded machine it can still be seen for a moment)
    assert wait_until(lambda: postmasters(home) == [pid]), postmasters(home)
    for ready in (ready_one, ready_two):
        status, health = get_json(ready["url"] + "/healthz")
        assert (status, health["status"], health["database"]["reachable"]) == (200, "ok", True)
    with psycopg.connect(server_url(home)) as conn:
        clients = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = 'toren' "
                               "AND pid <> pg_backend_pid()").fetchone()[0]
    assert clients >= 2  # each process holds a pooled connection to the one server
    insert_run(home, "shared")

    # The server outlives the first process to exit, and stops with the last.
    assert one.stop() == 0
    # one ran its exit handlers before it exited: had it stopped the server (pgserver's
    # `pg_ctl -w stop` waits for the shutdown), the postmaster would be gone by now and a new
    # connection refused
    assert psutil.pid_exists(pid) and not server_stopped(home, pid)
    with psycopg.connect(server_url(home)) as conn:
        assert conn.execute("SELECT pg_backend_pid() <> 0").fetchone() == (True,)
    status, health = get_json(ready_two["url"] + "/healthz")
    assert (status, health["database"]["reachable"]) == (200, True)
    assert two.stop() == 0
    assert wait_until(lambda: server_stopped(home, pid), timeout=20), "server still running"

    again = toren_cli("db", "migrate", "--dir", str(crew), "--json",
                      env={"TOREN_HOME": str(home)})
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["applied"] == []
    third, _ = start_dev(start_toren, home, crew)
    assert postmaster_pid(home) != pid
    assert runs(home) == ["shared"]
    assert third.stop() == 0


def handle_pids(home: Path) -> list[int]:
    """pgserver's list of the processes using the server."""
    path = home / "pgdata" / ".handle_pids.json"
    return json.loads(path.read_text()) if path.exists() else []


def test_the_server_stops_with_the_last_process_after_one_was_killed(
        home: Path, start_toren: StartToren, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    killed, _ = start_dev(start_toren, home, crew)
    first_server = postmaster_pid(home)
    assert first_server is not None and handle_pids(home) == [killed.proc.pid]
    killed.stop(signal.SIGKILL)  # no exit handler runs: its id stays on the list

    survivor, _ = start_dev(start_toren, home, crew)
    assert postmaster_pid(home) == first_server  # it joined the server the killed one left
    assert handle_pids(home) == [survivor.proc.pid]  # the dead id is forgotten
    assert survivor.stop() == 0
    assert wait_until(lambda: server_stopped(home, first_server), timeout=20), (
        "the embedded Postgres outlived the last live toren process")
    assert postmasters(home) == [] and postmaster_lines(home) is None


def test_the_server_stops_with_the_last_process_after_a_later_one_was_killed(
        home: Path, start_toren: StartToren, tmp_path: Path) -> None:
    """The Quickstart's order: `toren dev` serves, a `toren run` beside it is killed with
    SIGKILL, then `toren dev` is stopped: nobody joins after the kill, and the server still
    stops with the last live process."""
    crew = write_agent_dir(tmp_path, "crew")
    survivor, _ = start_dev(start_toren, home, crew)
    server = postmaster_pid(home)
    killed, _ = start_dev(start_toren, home, crew)
    assert sorted(handle_pids(home)) == sorted([survivor.proc.pid, killed.proc.pid])
    killed.stop(signal.SIGKILL)
    assert survivor.stop() == 0
    assert wait_until(lambda: server_stopped(home, server), timeout=20), (
        "the embedded Postgres outlived the last live toren process")
    assert handle_pids(home) == []


def test_toren_run_ended_by_sigterm_stops_like_ctrl_c(
        home: Path, start_toren: StartToren, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    run = start_toren("run", "crew", "take your time", "--dir", str(crew),
                      env={"TOREN_HOME": str(home), "TOREN_SCRIPTED_DELAY": "60"})
    # the run exists, so the command is following it (its model call takes a minute)
    assert wait_until(lambda: postmaster_lines(home) is not None and runs_count(home) == 1,
                      timeout=60), run.stderr
    server = postmaster_pid(home)
    assert server is not None

    code = run.stop(signal.SIGTERM)
    assert code == 130, run.stderr  # as after Ctrl-C (128 + SIGINT)
    assert "Stopped following. The run is durable" in run.stderr
    assert handle_pids(home) == []
    assert wait_until(lambda: server_stopped(home, server), timeout=20), (
        "SIGTERM left the embedded Postgres running")


def runs_count(home: Path) -> int:
    try:
        with psycopg.connect(server_url(home), connect_timeout=5) as conn:
            row = conn.execute("SELECT count(*) FROM agent_crew.runs").fetchone()
    except psycopg.Error:
        return 0  # not migrated yet
    return int(row[0]) if row else 0


def test_joining_forgets_dead_and_reused_process_ids_and_keeps_live_ones(tmp_path: Path) -> None:
    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    live = subprocess.Popen(["sleep", "60"])
    dead = subprocess.Popen(["sleep", "60"])
    dead.kill()
    dead.wait()
    try:
        unknown = os.getppid()  # alive, joined before start times were noted: kept
        (pgdata / ".handle_pids.json").write_text(json.dumps(
            [live.pid, dead.pid, os.getpid(), unknown]))
        (pgdata / ".toren_handle_starts.json").write_text(json.dumps({
            str(live.pid): psutil.Process(live.pid).create_time(),
            # this id now belongs to another process than the one that joined
            str(os.getpid()): psutil.Process().create_time() - 3600}))

        embedded._forget_dead_handles(threading.Lock(), pgdata)

        assert handle_pids_in(pgdata) == [live.pid, unknown]
        assert set(json.loads((pgdata / ".toren_handle_starts.json").read_text())) == {
            str(live.pid)}
    finally:
        live.kill()
        live.wait()

    (pgdata / ".handle_pids.json").write_text("not json")
    embedded._forget_dead_handles(threading.Lock(), pgdata)
    assert handle_pids_in(pgdata) == []  # pgserver could not read it: it starts afresh


def handle_pids_in(pgdata: Path) -> list[int]:
    return json.loads((pgdata / ".handle_pids.json").read_text())


class _Pids:
    """pgserver's list of the processes using a server (its ``get_and_remove``)."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def get_and_remove(self, pid: int) -> list[int]:
        before = list(self.pids)
        self.pids = [p for p in self.pids if p != pid]
        return before


class _Server:
    def __init__(self, pgdata: Path, pids: list[int], postmaster: int) -> None:
        self.pgdata = pgdata
        self.system_user = None
        self.global_process_id_list = _Pids(pids)
        self._postmaster_info = type("Info", (), {"process": psutil.Process(postmaster)})()


def test_the_last_process_asks_the_server_to_stop_without_waiting(tmp_path: Path) -> None:
    # a process leaving waited for the shutdown checkpoint's fsyncs (pgserver's `pg_ctl -w
    # stop`): seconds on a busy disk, and `toren run` ended by SIGTERM did not exit in 30 s
    calls: list[list[str]] = []
    postmaster = subprocess.Popen(["sleep", "60"])  # stands for the running postmaster
    try:
        other = _Server(tmp_path, [os.getpid(), postmaster.pid], postmaster.pid)
        embedded._leave(other, threading.Lock(), lambda args, **_: calls.append(args))
        assert calls == [] and other.global_process_id_list.pids == [postmaster.pid]

        last = _Server(tmp_path, [os.getpid()], postmaster.pid)
        embedded._leave(last, threading.Lock(), lambda args, **_: calls.append(args))
        assert calls == [["-m", "fast", "-W", "stop"]]  # -W: no wait
        assert last.global_process_id_list.pids == []
    finally:
        postmaster.kill()
        postmaster.wait()


def test_a_process_starting_waits_while_the_server_is_stopping(tmp_path: Path) -> None:
    stopping = subprocess.Popen(["sleep", "1"])  # a postmaster finishing its shutdown
    lines = [str(stopping.pid), str(tmp_path), "1700000000", "5432", str(tmp_path), "",
             "1 2", "stopping"]
    (tmp_path / "postmaster.pid").write_text("\n".join(lines) + "\n")
    try:
        started = time.monotonic()
        embedded._wait_while_stopping(tmp_path, timeout_s=30)
        assert stopping.poll() is not None  # it waited for the postmaster to go
        assert time.monotonic() - started < 20
        ready = [*lines[:7], "ready   "]
        (tmp_path / "postmaster.pid").write_text("\n".join(ready) + "\n")
        live = subprocess.Popen(["sleep", "60"])
        try:
            (tmp_path / "postmaster.pid").write_text(
                "\n".join([str(live.pid), *ready[1:]]) + "\n")
            started = time.monotonic()
            embedded._wait_while_stopping(tmp_path, timeout_s=30)  # a running server: no wait
            assert time.monotonic() - started < 1
        finally:
            live.kill()
            live.wait()
    finally:
        stopping.kill()
        stopping.wait()
