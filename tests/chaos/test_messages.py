"""Queue messages delivered twice at once, and messages that kill their worker every time,
against real ``toren worker`` processes and real Postgres.

The queue is at-least-once; the log makes handling idempotent (a task's lease and the
compare-and-swap append), and a message that never completes is dead-lettered after
``TOREN_MAX_DELIVERIES`` deliveries instead of taking workers down forever.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from tests.chaos.effects import executions, recording_tools_source
from tests.chaos.helpers import (
    create_run,
    idempotent_tools_source,
    run_events,
    run_row,
    start_worker,
)
from tests.conftest import wait_until
from tests.durable import check_log
from toren.testing import OutputProcess, write_agent_dir


def queued(url: str, run_id: str) -> list[tuple[int, str | None]]:
    """``(attempts, claimed_by)`` of the messages still queued for a run."""
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT attempts, claimed_by FROM toren_control.queue "
                            "WHERE run_id = %s ORDER BY id", [run_id]).fetchall()


# -- the same message delivered twice at once ------------------------------------------------

DUP_TOOLS = 4


@pytest.mark.slow
def test_a_task_message_delivered_to_two_workers_at_once_runs_each_step_once(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    effects = tmp_path / "effects.log"
    calls = tmp_path / "model-calls.jsonl"
    directory = write_agent_dir(tmp_path, "dup", tools_py=recording_tools_source(
        [f"step_{i}" for i in range(DUP_TOOLS)], effects))
    # one message at a time per worker, so that each worker claims its own copy
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.2",
           "TOREN_SCRIPTED_CALL_LOG": str(calls), "TOREN_LEASE_TTL": "2",
           "TOREN_POLL_INTERVAL": "0.2", "TOREN_CONCURRENCY": "1"}
    run_id = create_run(toren_cli, directory, "dup", "twice", env)
    with psycopg.connect(database_url, autocommit=True) as conn, conn.transaction():
        # three copies of the run's task message, all held back for now
        conn.execute("UPDATE toren_control.queue SET available_at = now() + interval '1 hour' "
                     "WHERE run_id = %s AND kind = 'task'", [run_id])
        for _ in range(2):
            conn.execute("INSERT INTO toren_control.queue (agent, run_id, kind, payload, "
                         "available_at) SELECT agent, run_id, kind, payload, available_at "
                         "FROM toren_control.queue WHERE run_id = %s AND kind = 'task' "
                         "LIMIT 1", [run_id])
    assert len(queued(database_url, run_id)) == 3
    workers = [start_worker(start_toren, directory, env) for _ in range(2)]
    with psycopg.connect(database_url, autocommit=True) as conn, conn.transaction():
        # released together with one wake-up: both idle workers claim a copy at the same moment
        conn.execute("UPDATE toren_control.queue SET available_at = now() WHERE run_id = %s",
                     [run_id])
        conn.execute("SELECT pg_notify('toren_queue', 'dup')")
    # both workers hold a copy while the task runs (the loser hands its copy back until the
    # winner's lease is free, without counting the delivery)
    def claimants() -> set[str]:
        return {claimed for _attempts, claimed in queued(database_url, run_id) if claimed}

    assert wait_until(lambda: len(claimants()) == 2, 10, interval=0.02), claimants()

    def model_calls_done() -> int:
        return sum(e.type == "ModelCallCompleted" for e in run_events(database_url, "agent_dup",
                                                                      run_id))

    assert wait_until(lambda: model_calls_done() >= 2, 20)
    with psycopg.connect(database_url, autocommit=True) as conn:
        for _ in range(2):  # and two more copies mid-task (their insert wakes the workers)
            conn.execute("INSERT INTO toren_control.queue (agent, run_id, kind, payload) "
                         "SELECT agent, run_id, kind, payload FROM toren_control.queue "
                         "WHERE run_id = %s AND kind = 'task' LIMIT 1", [run_id])
    assert wait_until(lambda: run_row(database_url, "agent_dup", run_id)[0] == "completed", 30)
    # every leftover copy is handled (a no-op on a finished task) and acknowledged
    assert wait_until(lambda: not queued(database_url, run_id), 30), queued(database_url, run_id)
    for worker in workers:
        assert worker.proc.poll() is None
        worker.stop()

    events = run_events(database_url, "agent_dup", run_id)
    check_log(events, executed=[key for key, _pid in executions(effects)],
              calls=[json.loads(line) for line in calls.read_text().splitlines()])
    kinds = Counter(e.type for e in events)
    assert (kinds["TaskStarted"], kinds["TaskFinished"], kinds["RunFinished"]) == (1, 1, 1)
    steps = range(1, DUP_TOOLS + 2)
    for kind in ("ModelCallStarted", "ModelCallCompleted"):
        assert sorted(e.data["step"] for e in events if e.type == kind) == list(steps), kind
    for kind in ("ToolCallStarted", "ToolCallCompleted"):
        assert sorted(e.data["name"] for e in events if e.type == kind) == [
            f"step_{i}" for i in range(DUP_TOOLS)], kind
    # one lease epoch did the whole task: no copy ever got in between
    epochs = {e.data["epoch"] for e in events if e.stream == "task:main" and "epoch" in e.data}
    assert epochs == {1}
    # effects outside the database: each tool once, each model call paid once
    done = executions(effects)
    assert sorted(key for key, _pid in done) == sorted(
        f"toren:{run_id}:main:{i + 1}:0" for i in range(DUP_TOOLS))
    assert len({pid for _key, pid in done}) == 1
    assert len(calls.read_text().splitlines()) == len(steps)
    output = run_row(database_url, "agent_dup", run_id)[1]
    assert all(f"result {i} for twice" in output for i in range(DUP_TOOLS))
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM toren_control.dead_letters").fetchone() == (0,)


# -- a message that kills its worker every time ----------------------------------------------

POISON_TOOLS = '''
import os
import signal
import time

from toren import current_tool_call, tool


@tool(idempotent=True)
def handle(text: str) -> str:
    """Handles the text; text with "boom" in it kills the process running it."""
    with open({effects!r}, "a") as f:
        f.write(f"{{current_tool_call().idempotency_key}} {{os.getpid()}}\\n")
    if "boom" in text:
        time.sleep({linger})  # what was claimed with it finishes first
        os.kill(os.getpid(), signal.SIGKILL)
    return "handled " + text
'''
MAX_DELIVERIES = 3
POISON_REASON = (f"delivered {MAX_DELIVERIES} times without being completed (its worker died or "
                 "timed out each time)")


def poison_crew(tmp_path: Path, *, linger: float) -> tuple[Path, Path]:
    """``crews/poison``, whose tool kills its worker ``linger`` s into the call, recording
    each execution in the returned effects file."""
    crews, effects = tmp_path / "crews", tmp_path / "effects.log"
    write_agent_dir(crews, "poison", tools_py=POISON_TOOLS.format(effects=str(effects),
                                                                  linger=linger))
    return crews, effects


@pytest.mark.slow
def test_a_poison_message_is_dead_lettered_after_n_deliveries_and_other_runs_still_run(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    crews, effects = poison_crew(tmp_path, linger=1.0)
    write_agent_dir(crews, "fine")
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_MAX_DELIVERIES": str(MAX_DELIVERIES)}
    # before the poison: another agent's run and a harmless run of the poison's own agent,
    # claimed in the same batch as the poison by the first worker
    before = {"fine": create_run(toren_cli, crews, "fine", "hello", env),
              "poison": create_run(toren_cli, crews, "poison", "harmless", env)}
    poison = create_run(toren_cli, crews, "poison", "boom", env)

    deaths = 0
    worker: OutputProcess = start_worker(start_toren, crews, env)
    deadline = time.monotonic() + 60
    while run_row(database_url, "agent_poison", poison)[0] != "failed":
        assert time.monotonic() < deadline, f"not dead-lettered after {deaths} deaths"
        if worker.proc.poll() is not None:  # the poison killed it: restart, like a supervisor
            deaths += 1
            worker = start_worker(start_toren, crews, env)
        time.sleep(0.1)
    # after the poison: the same two kinds of run
    after = {"fine": create_run(toren_cli, crews, "fine", "hello again", env),
             "poison": create_run(toren_cli, crews, "poison", "harmless again", env)}
    others = [(agent, run_id) for runs in (before, after) for agent, run_id in runs.items()]
    assert wait_until(lambda: all(run_row(database_url, f"agent_{agent}", run_id)[0]
                                  == "completed" for agent, run_id in others), 30), [
        run_row(database_url, f"agent_{agent}", run_id) for agent, run_id in others]
    assert worker.proc.poll() is None, "the poison killed a worker after it was dead-lettered"
    worker.stop()

    # one death per delivery, and no more
    assert deaths == MAX_DELIVERIES
    status, _output, error = run_row(database_url, "agent_poison", poison)
    assert status == "failed"
    assert error["code"] == "dead_lettered"
    assert f"was delivered {MAX_DELIVERIES} times without completing" in error["message"]
    events = run_events(database_url, "agent_poison", poison)
    check_log(events)
    dead = [e for e in events if e.type == "RunDeadLettered"]
    assert len(dead) == 1 and dead[0].stream == "run"
    assert dead[0].data["attempts"] == MAX_DELIVERIES and dead[0].data["kind"] == "task"
    assert dead[0].data["reason"] == error["message"]
    # the poison's tool ran once per delivery, each time in a different (then dead) process
    runs_of_poison = [(key, pid) for key, pid in executions(effects) if poison in key]
    assert len(runs_of_poison) == MAX_DELIVERIES
    assert len({key for key, _pid in runs_of_poison}) == 1
    assert len({pid for _key, pid in runs_of_poison}) == MAX_DELIVERIES
    # the harmless run from before was worked alongside the poison, by its first victim
    harmless = [pid for key, pid in executions(effects) if before["poison"] in key]
    assert harmless == [runs_of_poison[0][1]]
    with psycopg.connect(database_url) as conn:
        letters = conn.execute("SELECT run_id::text, kind, attempts, reason "
                               "FROM toren_control.dead_letters").fetchall()
    assert letters == [(poison, "task", MAX_DELIVERIES, POISON_REASON)]
    assert queued(database_url, poison) == []  # nothing left to kill the next worker

    for agent, run_id in others:
        status, output, _error = run_row(database_url, f"agent_{agent}", run_id)
        assert status == "completed", (agent, run_id)
        run_log = run_events(database_url, f"agent_{agent}", run_id)
        check_log(run_log)
        assert "RunDeadLettered" not in {e.type for e in run_log}
        if agent == "poison":
            assert "handled harmless" in output
    print(json.dumps({"deaths": deaths, "dead_letters": len(letters)}))


@pytest.mark.slow
def test_a_run_in_flight_next_to_a_poison_message_is_not_dead_lettered_with_it(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    crews, _effects = poison_crew(tmp_path, linger=0.5)
    # eight steps of 0.4 s: longer than the poison leaves it, delivery after delivery
    write_agent_dir(crews, "busy", tools_py=idempotent_tools_source(
        [f"step_{i}" for i in range(8)]))
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_MAX_DELIVERIES": str(MAX_DELIVERIES), "TOREN_SCRIPTED_DELAY": "0.4"}
    busy = create_run(toren_cli, crews, "busy", "innocent", env)
    poison = create_run(toren_cli, crews, "poison", "boom", env)
    worker = start_worker(start_toren, crews, env)
    deadline = time.monotonic() + 60
    while run_row(database_url, "agent_poison", poison)[0] != "failed":
        assert time.monotonic() < deadline
        if worker.proc.poll() is not None:
            worker = start_worker(start_toren, crews, env)
        time.sleep(0.1)
    assert wait_until(lambda: run_row(database_url, "agent_busy", busy)[0]
                      in ("completed", "failed"), 30)
    worker.stop()
    events = run_events(database_url, "agent_busy", busy)
    check_log(events)
    progress = sum(e.type == "ModelCallCompleted" for e in events)
    status, _output, error = run_row(database_url, "agent_busy", busy)
    # today: failed, {"code": "dead_lettered", ...}, after completing a step in every delivery
    assert status == "completed", (status, error, f"{progress} model calls completed")
