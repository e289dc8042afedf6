"""Workflows under SIGKILL: between waves, mid-wave, and during a durable timer."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from tests.chaos.helpers import create_run, run_events, run_row, start_worker, work_then_kill
from tests.conftest import wait_until
from tests.durable import check_log
from toren.testing import write_agent_dir

WORKFLOW = '''
async def workflow(ctx):
    first = await ctx.wave([("worker", f"a{i}") for i in range(3)])
    await ctx.sleep(0.5)
    second = await ctx.wave([("worker", r.task_id) for r in first])
    return " ".join(r.task_id for r in second)
'''
TOOLS = '''
from toren import tool

@tool(idempotent=True)
def note(text: str) -> str:
    """Note something down."""
    return "ok"
'''


def crew(tmp_path: Path) -> Path:
    directory = write_agent_dir(tmp_path, "waves", tools_py=TOOLS, subagents={
        "worker": "---\ndescription: Works.\ntools: [note]\n---\nWork.\n"})
    (directory / "workflow.py").write_text(WORKFLOW)
    return directory


@pytest.mark.slow
def test_sigkill_between_and_inside_waves_repays_nothing(start_toren, toren_cli,
                                                          database_url: str,
                                                          tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    directory = crew(tmp_path)
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.5",
           "TOREN_SCRIPTED_CALL_LOG": str(calls), "TOREN_LEASE_TTL": "1",
           "TOREN_POLL_INTERVAL": "0.2", "TOREN_CONCURRENCY": "3",
           # every kill counts as a failed delivery of the messages in hand: keep the poison
           # detector (tested on its own) out of a test of crash recovery
           "TOREN_MAX_DELIVERIES": "100"}
    run_id = create_run(toren_cli, directory, "waves", "go", env)
    rng = random.Random()
    kills = 0
    while kills < 6 and run_row(database_url, "agent_waves", run_id)[0] != "completed":
        work_then_kill(start_toren, directory, env, rng.uniform(0.3, 1.5))
        kills += 1
    worker = start_worker(start_toren, directory, env)
    done = wait_until(lambda: run_row(database_url, "agent_waves", run_id)[0] == "completed", 90)
    if not done:
        import psycopg
        with psycopg.connect(database_url) as conn:
            queue = conn.execute("SELECT kind, payload, attempts, available_at > now(), claimed_by "
                                 "FROM toren_control.queue").fetchall()
            leases = conn.execute("SELECT stream, holder, epoch, expires_at > now() "
                                  "FROM toren_control.leases").fetchall()
        types = [(e.stream, e.seq, e.type) for e in run_events(database_url, "agent_waves", run_id)]
        pytest.fail(f"stalled after {kills} kills\nqueue {queue}\nleases {leases}\n"
                    f"events {types}\nworker stderr {worker.stderr[-3000:]}")
    worker.stop()
    _status, output, _ = run_row(database_url, "agent_waves", run_id)
    assert output == "w2-0 w2-1 w2-2"
    assert kills >= 2
    events = run_events(database_url, "agent_waves", run_id)
    check_log(events)
    run_types = [e.type for e in events if e.stream == "run"]
    assert run_types.count("WaveStarted") == 2
    assert run_types.count("TimerFired") == 1
    for stream in {e.stream for e in events if e.stream != "run"}:
        task = [e for e in events if e.stream == stream]
        assert sum(e.type == "TaskStarted" for e in task) == 1
        assert sum(e.type == "TaskFinished" for e in task) == 1
    completed = sum(e.type == "ModelCallCompleted" for e in events)
    paid = len(calls.read_text().splitlines())
    assert completed == 12  # 6 tasks x (tool call + answer)
    assert completed <= paid <= completed + kills * 3  # at most the calls in flight per kill


@pytest.mark.slow
def test_a_durable_timer_survives_a_restart_and_fires_once(start_toren, toren_cli,
                                                            database_url: str,
                                                            tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "sleeper")
    (directory / "workflow.py").write_text('''
async def workflow(ctx):
    start = ctx.now()
    await ctx.sleep(3)
    return str(round((ctx.now() - start).total_seconds()))
''')
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2"}
    run_id = create_run(toren_cli, directory, "sleeper", "go", env)
    worker = start_worker(start_toren, directory, env)
    assert wait_until(lambda: any(e.type == "TimerStarted" for e in run_events(
        database_url, "agent_sleeper", run_id)), 30)
    worker.proc.kill()  # nothing holds the timer: it is a delayed message in the database
    worker.proc.wait(timeout=10)
    time.sleep(1)
    worker = start_worker(start_toren, directory, env)
    assert wait_until(lambda: run_row(database_url, "agent_sleeper", run_id)[0] == "completed",
                      30)
    worker.stop()
    _status, output, _ = run_row(database_url, "agent_sleeper", run_id)
    assert int(output) >= 3
    events = run_events(database_url, "agent_sleeper", run_id)
    assert [e.type for e in events].count("TimerFired") == 1
    shown = json.loads(toren_cli("jobs", "show", run_id, "--json", env=env).stdout)
    assert shown["status"] == "completed"


@pytest.mark.slow
def test_a_wave_of_fifty_across_two_worker_processes_runs_each_task_once(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    directory = crew(tmp_path)
    (directory / "workflow.py").write_text('''
async def workflow(ctx):
    results = await ctx.wave([("worker", str(i)) for i in range(50)])
    return str(sum(1 for r in results if r.ok))
''')
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "2", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_SCRIPTED_DELAY": "0.1"}
    toren_cli("db", "migrate", "--dir", str(directory), env=env)
    workers = [start_worker(start_toren, directory, env) for _ in range(2)]
    run_id = create_run(toren_cli, directory, "waves", "go", env)
    assert wait_until(lambda: run_row(database_url, "agent_waves", run_id)[0] == "completed", 90)
    for worker in workers:
        worker.stop()
    assert run_row(database_url, "agent_waves", run_id)[1] == "50"
    events = run_events(database_url, "agent_waves", run_id)
    check_log(events)
    tasks = [e for e in events if e.type == "TaskStarted"]
    assert len(tasks) == len({e.stream for e in tasks}) == 50
    assert sum(e.type == "ToolCallCompleted" for e in events) == 50
    # both processes did some of the work
    import psycopg
    with psycopg.connect(database_url) as conn:
        holders = conn.execute("SELECT count(DISTINCT holder) FROM toren_control.leases "
                               "WHERE run_id = %s AND stream LIKE 'task:%%'",
                               [run_id]).fetchone()[0]
    assert holders == 2
