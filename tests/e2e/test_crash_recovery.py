"""SIGKILL at random moments against real worker processes and real Postgres.

A worker paused past its lease (SIGSTOP) and poison messages are tested in tests/chaos/
(test_lease_races.py, test_messages.py)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from tests.chaos.helpers import (
    create_run,
    idempotent_tools_source,
    run_events,
    run_row,
    start_worker,
    work_then_kill,
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
        work_then_kill(start_toren, directory, env, rng.uniform(0.2, 2.5))
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
