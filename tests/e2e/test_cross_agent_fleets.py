"""Cross-agent calls between two fleets on one database (real ``toren worker`` processes with
different ``--dir``s): the peer's run is claimed only by the peer's fleet, and a caller whose
worker is SIGKILLed while it waits resumes waiting in a new worker, without a second peer run."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from tests.chaos.helpers import create_run, run_row, start_worker
from tests.conftest import wait_until
from toren.testing import write_agent_dir

WRITER_TOOLS = '''
def facts(topic: str) -> str:
    """Look a topic up in the writer's own notes."""
    return f"the writer's facts about {topic}"
'''


def two_fleets(tmp_path: Path) -> tuple[Path, Path]:
    """Fleet a serves ``desk`` (peers: writer), fleet b ``writer`` (acceptsFrom: desk)."""
    desk_fleet = write_agent_dir(tmp_path / "a", "desk", peers=["writer"]).parent
    writer_fleet = write_agent_dir(tmp_path / "b", "writer", tools_py=WRITER_TOOLS,
                                   acceptsFrom=["desk"]).parent
    return desk_fleet, writer_fleet


def rows(url: str, sql: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql, list(params)).fetchall()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_caller_killed_while_waiting_resumes_and_the_peer_runs_once(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    desk_fleet, writer_fleet = two_fleets(tmp_path)
    calls = tmp_path / "writer-calls.jsonl"
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "2", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_GUARDIAN_INTERVAL": "0.5"}
    writer_env = env | {"TOREN_SCRIPTED_DELAY": "2", "TOREN_SCRIPTED_CALL_LOG": str(calls)}
    writer_worker = start_worker(start_toren, writer_fleet, writer_env)
    desk_worker = start_worker(start_toren, desk_fleet, env)

    run_id = create_run(toren_cli, desk_fleet, "desk", "tides", env)
    assert wait_until(lambda: run_row(database_url, "agent_desk", run_id)[0] == "waiting", 60), (
        desk_worker.stderr)
    # parked: the caller holds no message and no live lease while the peer works
    assert rows(database_url, "SELECT 1 FROM toren_control.queue WHERE run_id = %s", run_id) == []
    desk_worker.proc.kill()
    desk_worker.proc.wait(timeout=10)

    (writer_run,) = rows(database_url, "SELECT id, status, parent_run_id::text, depth "
                                       "FROM agent_writer.runs")
    assert writer_run[2] == run_id and writer_run[3] == 1
    assert wait_until(lambda: run_row(database_url, "agent_writer", str(writer_run[0]))[0]
                      == "completed", 60), writer_worker.stderr
    # no desk worker is up: its wake-up waits in the queue, labelled for the desk fleet
    assert rows(database_url, "SELECT agent, kind, claimed_by FROM toren_control.queue "
                              "WHERE run_id = %s", run_id) == [("desk", "task", None)]
    assert run_row(database_url, "agent_desk", run_id)[0] == "waiting"

    resumed = start_worker(start_toren, desk_fleet, env)
    assert wait_until(lambda: run_row(database_url, "agent_desk", run_id)[0] == "completed",
                      60), resumed.stderr
    _status, output, _error = run_row(database_url, "agent_desk", run_id)
    assert "the writer's facts about tides" in output
    assert len(rows(database_url, "SELECT id FROM agent_writer.runs")) == 1
    # the writer's two model calls (tool, answer) were each made once, by its own fleet
    assert len(calls.read_text().splitlines()) == 2
    holders = rows(database_url, "SELECT DISTINCT holder FROM toren_control.leases "
                                 "WHERE run_id = %s", str(writer_run[0]))
    workers = {pid: worker_id for pid, worker_id in rows(
        database_url, "SELECT pid, id FROM toren_control.workers")}
    assert holders == [(workers[writer_worker.proc.pid],)]

    shown = toren_cli("jobs", "show", run_id, "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    (child,) = detail["children"]
    assert child["id"] == str(writer_run[0]) and child["agent"] == "writer"
    assert child["parent"]["kind"] == "peer" and child["status"] == "completed"
    assert detail["peer_calls"][0]["run_id"] == str(writer_run[0])
    human = toren_cli("jobs", "show", run_id, env=env)
    assert f"peer writer run {writer_run[0]} completed" in human.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_caller_killed_between_creating_the_peer_run_and_recording_it_does_not_start_two(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    import signal

    desk_fleet, writer_fleet = two_fleets(tmp_path)
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_GUARDIAN_INTERVAL": "0.5"}
    crashing = env | {"TOREN_CRASH_AT": "after_child_run",
                      "TOREN_CRASH_ONCE": str(tmp_path / "crashed")}
    start_worker(start_toren, writer_fleet, env)
    run_id = create_run(toren_cli, desk_fleet, "desk", "tides", env)
    doomed = start_worker(start_toren, desk_fleet, crashing)
    assert doomed.proc.wait(timeout=60) == -signal.SIGKILL, doomed.stderr
    # the peer's run exists; the caller's log does not say so yet
    assert len(rows(database_url, "SELECT id FROM agent_writer.runs")) == 1
    assert rows(database_url, "SELECT 1 FROM agent_desk.events WHERE run_id = %s AND "
                              "type = 'PeerCallStarted'", run_id) == []
    resumed = start_worker(start_toren, desk_fleet, crashing)
    assert wait_until(lambda: run_row(database_url, "agent_desk", run_id)[0] == "completed",
                      90), resumed.stderr
    assert "the writer's facts about tides" in run_row(database_url, "agent_desk", run_id)[1]
    assert len(rows(database_url, "SELECT id FROM agent_writer.runs")) == 1
    assert len(rows(database_url, "SELECT 1 FROM agent_desk.events WHERE run_id = %s AND "
                                  "type = 'PeerCallStarted'", run_id)) == 1
