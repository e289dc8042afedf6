"""A fork survives SIGKILL like any run: the worker that resumes it reads the fork's model from
its log (never the agent's), and the copied steps are never paid for, before or after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chaos.helpers import create_run, run_events, run_row, start_worker
from tests.conftest import wait_until
from tests.durable import check_catalog
from tests.e2e.test_crash_recovery import crew

pytestmark = pytest.mark.timeout(240)
N_TOOLS = 4


def model_calls(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_fork_killed_mid_step_resumes_on_its_own_model(start_toren, toren_cli,
                                                         database_url: str,
                                                         tmp_path: Path) -> None:
    calls = tmp_path / "model-calls.jsonl"
    directory = crew(tmp_path, "forky", n_tools=N_TOOLS, effects=tmp_path / "effects.log")
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_CALL_LOG": str(calls),
           "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2"}
    schema = "agent_forky"
    source = create_run(toren_cli, directory, "forky", "same input", env)
    worker = start_worker(start_toren, directory, env)
    assert wait_until(lambda: run_row(database_url, schema, source)[0] == "completed", 60)
    worker.stop()
    before = len(model_calls(calls))
    assert before == N_TOOLS + 1

    made = toren_cli("jobs", "fork", source, "--at-step", "2", "--model",
                     "toren/scripted-other", "--json", env=env)
    assert made.returncode == 0, made.stderr
    fork = json.loads(made.stdout)["run"]["id"]

    # the first worker dies right after the fork's first live model call answers, before
    # the answer is in the log
    doomed = start_worker(start_toren, directory, env | {"TOREN_CRASH_AT": "after_model_response"})
    assert doomed.proc.wait(timeout=60) == -9
    assert run_row(database_url, schema, fork)[0] == "running"
    worker = start_worker(start_toren, directory, env)
    assert wait_until(lambda: run_row(database_url, schema, fork)[0] == "completed", 60)
    worker.stop()

    status, output, _ = run_row(database_url, schema, fork)
    assert (status, output) == ("completed", run_row(database_url, schema, source)[1])
    paid = model_calls(calls)[before:]
    # steps 3 to 5 live, plus the one call in flight at the kill; steps 1 and 2 never again
    assert len(paid) == N_TOOLS + 1 - 2 + 1
    assert {call["model"] for call in paid} == {"toren/scripted-other"}
    events = run_events(database_url, schema, fork)
    check_catalog(events)
    completed = [e.data for e in events if e.type == "ModelCallCompleted"]
    assert [(c["step"], c["model"], c["repeated"]) for c in completed] == [
        (1, "toren/scripted", False), (2, "toren/scripted", False),
        (3, "toren/scripted-other", True), (4, "toren/scripted-other", False),
        (5, "toren/scripted-other", False)]
    receipt = json.loads(toren_cli("jobs", "receipt", fork, "--json", env=env).stdout)
    assert receipt["totals"]["copied_calls"] == 2 and receipt["totals"]["repeated_calls"] == 1
    assert receipt["tasks"][0]["resumes"] == 1
