"""SIGKILL, SIGSTOP and poison messages against real worker processes and real Postgres."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import psycopg
import pytest

from tests.chaos.helpers import (
    create_run,
    idempotent_tools_source,
    run_events,
    run_row,
    start_worker,
)
from tests.conftest import wait_until
from tests.durable import check_log
from toren.testing import write_agent_dir

N_TOOLS = 12


def crew(tmp_path: Path, name: str = "crashy", n_tools: int = N_TOOLS,
         effects: Path | None = None) -> Path:
    """An agent whose offline model calls ``n_tools`` idempotent tools, one per step; each tool
    writes its idempotency key to ``effects`` (a record of executions outside the database)."""
    source = idempotent_tools_source([f"step_{i:02d}" for i in range(n_tools)], effects)
    return write_agent_dir(tmp_path, name, tools_py=source)


@pytest.mark.slow
def test_sigkill_at_random_moments_never_repays_a_completed_model_call(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    effects = tmp_path / "effects.log"
    calls = tmp_path / "model-calls.jsonl"
    directory = crew(tmp_path, effects=effects)
    # checkpoints every few events, so resumes start from checkpoints as well as from the top
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.15",
           "TOREN_SCRIPTED_CALL_LOG": str(calls), "TOREN_LEASE_TTL": "1",
           "TOREN_POLL_INTERVAL": "0.2", "TOREN_CHECKPOINT_EVERY": "9",
           # every kill counts as a failed delivery of the message in hand: keep the poison
           # detector (tested below) out of a test of crash recovery
           "TOREN_MAX_DELIVERIES": "100"}
    schema = "agent_crashy"

    # the reference: one run nobody interrupts
    reference = create_run(toren_cli, directory, "crashy", "same input", env)
    worker = start_worker(start_toren, directory, env)
    assert wait_until(lambda: run_row(database_url, schema, reference)[0] == "completed", 60)
    worker.stop()
    expected_output = run_row(database_url, schema, reference)[1]
    baseline_calls = len(calls.read_text().splitlines())
    assert baseline_calls == N_TOOLS + 1

    seed = int(os.environ.get("TOREN_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    runs = [create_run(toren_cli, directory, "crashy", "same input", env)]
    kills = 0
    while kills < 20:
        if run_row(database_url, schema, runs[-1])[0] == "completed":
            runs.append(create_run(toren_cli, directory, "crashy", "same input", env))
        worker = start_worker(start_toren, directory, env)
        time.sleep(rng.uniform(0.2, 2.5))
        worker.proc.kill()
        worker.proc.wait(timeout=10)
        kills += 1
    worker = start_worker(start_toren, directory, env)
    assert wait_until(lambda: all(run_row(database_url, schema, r)[0] == "completed"
                                  for r in runs), 120), f"seed {seed}"
    worker.stop()

    completed_calls = 0
    repeated = 0
    for run_id in runs:
        status, output, _ = run_row(database_url, schema, run_id)
        assert (status, output) == ("completed", expected_output), f"seed {seed}"
        events = run_events(database_url, schema, run_id)
        check_log(events)
        completed_calls += sum(e.type == "ModelCallCompleted" for e in events)
        repeated += sum(bool(e.data.get("repeated")) for e in events
                        if e.type == "ModelCallCompleted")
        steps = sorted(e.data["step"] for e in events if e.type == "ModelCallCompleted")
        assert steps == list(range(1, N_TOOLS + 2)), f"a step was recorded twice (seed {seed})"
    paid = len(calls.read_text().splitlines()) - baseline_calls
    # every completed call paid exactly once, plus at most the one in flight at each kill
    assert completed_calls <= paid <= completed_calls + kills, (paid, completed_calls, seed)
    assert repeated <= kills
    executions = effects.read_text().splitlines()
    extra = len(executions) - len(set(executions))
    print(json.dumps({"seed": seed, "kills": kills, "runs": len(runs),
                      "model_calls_completed": completed_calls, "model_calls_paid": paid,
                      "repeated_marked": repeated, "tool_reexecutions": extra}))
    assert extra <= kills, f"tools re-ran {extra} times for {kills} kills (seed {seed})"
    assert len(set(executions)) == N_TOOLS * (len(runs) + 1)


@pytest.mark.slow
def test_a_worker_paused_past_its_lease_has_its_stale_append_rejected(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    directory = crew(tmp_path, n_tools=6)
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.5",
           "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2", "TOREN_LOG_LEVEL": "INFO"}
    run_id = create_run(toren_cli, directory, "crashy", "pause me", env)
    first = start_worker(start_toren, directory, env)

    def calls_done() -> int:
        return sum(e.type == "ModelCallCompleted"
                   for e in run_events(database_url, "agent_crashy", run_id))

    assert wait_until(lambda: calls_done() >= 2, 30)
    os.kill(first.proc.pid, signal.SIGSTOP)
    try:
        second = start_worker(start_toren, directory, env)
        assert wait_until(lambda: any(
            e.data.get("epoch", 0) >= 2 for e in run_events(database_url, "agent_crashy", run_id)
            if e.stream == "task:main"), 30)
    finally:
        os.kill(first.proc.pid, signal.SIGCONT)
    assert wait_until(lambda: run_row(database_url, "agent_crashy", run_id)[0] == "completed", 60)
    first.stop()
    second.stop()
    events = [e for e in run_events(database_url, "agent_crashy", run_id)
              if e.stream == "task:main"]
    check_log(events)
    epochs = [e.data["epoch"] for e in sorted(events, key=lambda e: e.seq) if "epoch" in e.data]
    assert epochs == sorted(epochs), f"a stale epoch appended after the takeover: {epochs}"
    assert max(epochs) >= 2
    assert "lost the lease" in first.stderr


@pytest.mark.slow
def test_a_poison_message_is_dead_lettered_and_other_runs_still_run(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    write_agent_dir(tmp_path / "crews", "poison", tools_py=(
        "import os, signal\nfrom toren import tool\n\n"
        "@tool(idempotent=True)\n"
        "def explode(text: str) -> str:\n"
        '    """Kills the process running it."""\n'
        "    os.kill(os.getpid(), signal.SIGKILL)\n"))
    write_agent_dir(tmp_path / "crews", "fine")
    crews = tmp_path / "crews"
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_MAX_DELIVERIES": "2"}
    poison = create_run(toren_cli, crews, "poison", "boom", env)
    deadline = time.monotonic() + 90
    worker = start_worker(start_toren, crews, env)
    fine = None
    while time.monotonic() < deadline:
        if fine is None and run_row(database_url, "agent_poison", poison)[0] == "failed":
            # the next run: the poison no longer takes the worker down with it
            fine = create_run(toren_cli, crews, "fine", "hello", env)
        if fine is not None and run_row(database_url, "agent_fine", fine)[0] == "completed":
            break
        if worker.proc.poll() is not None:  # the poison killed it: restart, like a supervisor
            worker = start_worker(start_toren, crews, env)
        time.sleep(0.2)
    worker.stop()
    assert fine is not None, "the poison run was never dead-lettered"
    status, _output, error = run_row(database_url, "agent_poison", poison)
    assert status == "failed"
    assert error["code"] == "dead_lettered" and "delivered 2 times" in error["message"]
    assert run_row(database_url, "agent_fine", fine)[0] == "completed"
    events = run_events(database_url, "agent_poison", poison)
    check_log(events)
    assert "RunDeadLettered" in [e.type for e in events]
    with psycopg.connect(database_url) as conn:
        reasons = conn.execute("SELECT reason FROM toren_control.dead_letters WHERE run_id = %s",
                               [poison]).fetchall()
    assert len(reasons) == 1 and "without being completed" in reasons[0][0]
