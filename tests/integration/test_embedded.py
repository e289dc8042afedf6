"""The embedded Postgres: with DATABASE_URL unset, every toren process started from one
TOREN_HOME shares one server, which stops with the last of them and keeps the data."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

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
    try:
        return (home / "pgdata" / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None


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
    assert postmasters(home) == [pid]
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
