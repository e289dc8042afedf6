"""``toren worker --processes N`` and ``toren serve --workers --processes N`` with real worker
processes on a real database: a child killed with SIGKILL is replaced (a new worker signs in
under the same supervisor) and the run it held completes; SIGTERM drains every child with its
work in hand within the grace, and the supervisor exits 0; nothing is lost when the grace is
too short for the work. ``--processes 1`` is today's single process."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psycopg
import pytest

from tests.chaos.helpers import create_run, run_row
from tests.conftest import wait_until
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

#: The agent's one tool waits until the test opens its gate (a file): the run stays in its
#: worker's hands until then. Each call that finishes adds a line to the effects file.
HOLD = '''
import time
from pathlib import Path
from toren import tool

@tool(idempotent=True)
def hold(topic: str) -> str:
    """Work on a topic until the gate opens."""
    while not Path({gate!r}).exists():
        time.sleep(0.05)
    with open({effects!r}, "a") as effects:
        effects.write(topic + "\\n")
    return f"held {{topic}}"
'''

#: Short leases, so a killed child's work is taken over within seconds (as the crash tests).
FAST = {"TOREN_LEASE_TTL": "2", "TOREN_POLL_INTERVAL": "0.2", "TOREN_GUARDIAN_INTERVAL": "0.5",
        "TOREN_CONCURRENCY": "1"}


def signed_in(url: str) -> dict[int, tuple[str, str | None]]:
    """Workers signed in now, by process id: ``(worker id, supervisor id)``."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT pid, id, supervisor FROM toren_control.workers").fetchall()
    return {pid: (worker_id, supervisor) for pid, worker_id, supervisor in rows}


def holder_of(url: str, run_id: str) -> str | None:
    """The worker holding a live lease of the run, if any."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT holder FROM toren_control.leases WHERE run_id = %s "
                           "AND expires_at > now() LIMIT 1", [run_id]).fetchone()
    return row[0] if row else None


def crew(tmp_path: Path) -> tuple[Path, Path]:
    """The crew directory and the gate of its agent's tool (effects: ``tmp_path/effects``)."""
    gate = tmp_path / "gate"
    crews = tmp_path / "crews"
    write_agent_dir(crews, "slow", tools_py=HOLD.format(gate=str(gate),
                                                        effects=str(tmp_path / "effects")))
    return crews, gate


def effects(tmp_path: Path) -> list[str]:
    """The topics of the tool calls that finished, in order."""
    path = tmp_path / "effects"
    return sorted(path.read_text().splitlines()) if path.exists() else []


def test_a_child_killed_with_sigkill_is_replaced_and_its_run_completes(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    crews, gate = crew(tmp_path)
    env = {"DATABASE_URL": database_url} | FAST
    supervisor = start_toren("worker", "--dir", str(crews), "--processes", "2", "--json",
                             env=env)
    ready = supervisor.next_json()
    assert ready["event"] == "ready" and ready["processes"] == 2
    assert ready["supervisor_pid"] == supervisor.proc.pid
    children = {child["pid"]: child["worker"] for child in ready["children"]}
    assert len(children) == 2 and supervisor.proc.pid not in children
    # each child signed in as a worker of this supervisor
    workers = signed_in(database_url)
    assert {pid: workers[pid] for pid in children} == {
        pid: (worker, ready["supervisor"]) for pid, worker in children.items()}

    run_id = create_run(toren_cli, crews, "slow", "the archive", env)
    assert wait_until(lambda: holder_of(database_url, run_id) is not None, 60), supervisor.stderr
    holder = holder_of(database_url, run_id)
    (victim,) = [pid for pid, worker in children.items() if worker == holder]
    os.kill(victim, signal.SIGKILL)

    exited = supervisor.next_json()
    assert (exited["event"], exited["pid"], exited["signal"], exited["exit_code"]) == (
        "child_exited", victim, "SIGKILL", None)
    assert exited["failures_in_a_row"] == 1 and exited["restart_in_s"] > 0
    back = supervisor.next_json()
    assert (back["event"], back["slot"], back["restarted"]) == ("child_ready", exited["slot"],
                                                                True)
    assert back["pid"] not in children and back["worker"] not in children.values()
    assert signed_in(database_url)[back["pid"]] == (back["worker"], ready["supervisor"])
    assert "killed by SIGKILL" in supervisor.stderr  # the death is logged, with its signal

    gate.touch()
    # the killed child's lease expires and one of the live children takes the run over
    assert wait_until(lambda: run_row(database_url, "agent_slow", run_id)[0] == "completed",
                      90), supervisor.stderr
    assert "held the archive" in json.dumps(run_row(database_url, "agent_slow", run_id)[1])
    assert supervisor.stop(signal.SIGTERM) == 0


def two_children_each_holding_a_run(start_toren, toren_cli, database_url: str,  # type: ignore[no-untyped-def]
                                    crews: Path, env: dict[str, str]):
    """A supervisor of two worker processes (concurrency 1 each) with one run of the slow
    agent in each child's hands: the supervisor, its ready line and the two runs."""
    supervisor = start_toren("worker", "--dir", str(crews), "--processes", "2", "--json",
                             env=env)
    ready = supervisor.next_json()
    children = {child["worker"] for child in ready["children"]}
    runs = [create_run(toren_cli, crews, "slow", f"topic {i}", env) for i in range(2)]
    assert wait_until(lambda: {holder_of(database_url, run) for run in runs} == children,
                      60), supervisor.stderr
    return supervisor, ready, runs


def test_sigterm_drains_every_child_with_its_work_in_hand_and_exits_0(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    crews, gate = crew(tmp_path)
    env = {"DATABASE_URL": database_url, "TOREN_SHUTDOWN_GRACE": "60"} | FAST
    supervisor, ready, runs = two_children_each_holding_a_run(start_toren, toren_cli,
                                                               database_url, crews, env)
    supervisor.proc.send_signal(signal.SIGTERM)
    # the children are draining: they claim nothing more, and their work in hand goes on
    gate.touch()
    assert supervisor.proc.wait(timeout=90) == 0, supervisor.stderr
    lines = [json.loads(line) for line in iter(supervisor.lines.get, None)]
    stopped = [line for line in lines if line["event"] == "child_stopped"]
    assert sorted((line["exit_code"], line["signal"]) for line in stopped) == [(0, None)] * 2
    assert lines[-1] == {"event": "stopped", "supervisor": ready["supervisor"], "clean": True}
    # the step each child had in hand finished during the drain; the rest of each run went
    # back to the queue (a draining worker takes no new message), and each child signed out
    assert effects(tmp_path) == ["topic 0", "topic 1"]
    assert all(pid not in signed_in(database_url) for pid in
               (child["pid"] for child in ready["children"]))
    later = start_toren("worker", "--dir", str(crews), "--json", env=env)
    later.next_json()
    assert wait_until(lambda: all(run_row(database_url, "agent_slow", run)[0] == "completed"
                                  for run in runs), 90), later.stderr
    assert effects(tmp_path) == ["topic 0", "topic 1"]  # nothing done twice, nothing lost
    assert later.stop(signal.SIGTERM) == 0


def test_work_a_short_grace_cannot_finish_is_handed_back_not_lost(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    crews, gate = crew(tmp_path)
    env = {"DATABASE_URL": database_url, "TOREN_SHUTDOWN_GRACE": "1"} | FAST
    supervisor, _, runs = two_children_each_holding_a_run(start_toren, toren_cli,
                                                           database_url, crews, env)
    assert supervisor.stop(signal.SIGTERM, timeout=60) == 0, supervisor.stderr
    assert all(run_row(database_url, "agent_slow", run)[0] != "completed" for run in runs)
    # a later worker takes the handed-back runs and finishes them
    gate.touch()
    later = start_toren("worker", "--dir", str(crews), "--json", env=env)
    later.next_json()
    assert wait_until(lambda: all(run_row(database_url, "agent_slow", run)[0] == "completed"
                                  for run in runs), 90), later.stderr
    assert later.stop(signal.SIGTERM) == 0


def test_one_process_is_todays_worker_with_no_supervisor(
        start_toren, database_url: str, tmp_path: Path) -> None:
    crews, _gate = crew(tmp_path)
    for args, env in ((["--processes", "1"], {}), ([], {}), ([], {"TOREN_PROCESSES": "1"})):
        worker = start_toren("worker", "--dir", str(crews), *args, "--json",
                             env={"DATABASE_URL": database_url} | env)
        ready = worker.next_json()
        assert (ready["event"], ready["pid"], ready["supervisor"]) == (
            "ready", worker.proc.pid, None)
        assert "children" not in ready
        assert signed_in(database_url)[worker.proc.pid] == (ready["worker"], None)
        assert worker.stop(signal.SIGTERM) == 0


def test_serve_with_worker_processes_serves_the_api_and_supervises_them(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    crews, gate = crew(tmp_path)
    gate.touch()
    env = {"DATABASE_URL": database_url, "TOREN_PROCESSES": "2"} | FAST
    keys = toren_cli("keys", "create", "admin", "--json", env=env)
    assert keys.returncode == 0, keys.stderr
    server = start_toren("serve", "--workers", "--dir", str(crews), "--port", "0", "--json",
                         env=env)
    ready = server.next_json()
    assert ready["url"].startswith("http://") and ready["processes"] == 2
    assert ready["supervisor_pid"] == server.proc.pid
    pids = {child["pid"] for child in ready["children"]}
    assert server.proc.pid not in pids
    # the API process works no runs: only its two children are signed in as workers
    done = toren_cli("top", "--json", env={"DATABASE_URL": database_url})
    assert done.returncode == 0, done.stderr
    workers = json.loads(done.stdout)["workers"]
    assert {(worker["pid"], worker["supervisor"]) for worker in workers} == {
        (pid, ready["supervisor"]) for pid in pids}
    run_id = create_run(toren_cli, crews, "slow", "served", env)
    assert wait_until(lambda: run_row(database_url, "agent_slow", run_id)[0] == "completed",
                      60), server.stderr
    assert server.stop(signal.SIGTERM, timeout=60) == 0


@pytest.mark.parametrize(("command", "env", "said"), [
    (["worker", "--processes", "0"], {}, "--processes='0' is not a number of worker processes"),
    (["worker", "--processes", "abc"], {}, "--processes='abc' is not a number"),
    (["worker"], {"TOREN_PROCESSES": "-2"}, "TOREN_PROCESSES='-2' is not a number"),
    (["serve", "--processes", "2"], {}, "add --workers"),
])
def test_a_bad_process_count_is_refused_before_anything_starts(
        toren_cli, tmp_path: Path, command: list[str], env: dict[str, str], said: str) -> None:
    crews, _gate = crew(tmp_path)
    done = toren_cli(*command, "--dir", str(crews), env=env)
    assert done.returncode == 1
    assert said in done.stderr, done.stderr
    assert len(done.stderr) < 500
