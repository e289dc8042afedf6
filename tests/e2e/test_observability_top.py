"""``toren top --json`` against a live fleet: two worker processes working runs, a failed run,
locally (DATABASE_URL) and remotely (TOREN_URL, GET /fleet)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

import toren
from tests.chaos.helpers import create_run, run_row, start_worker
from tests.conftest import TOREN, wait_until
from toren.testing import write_agent_dir

TOOLS = '''
from toren import tool


@tool(idempotent=True)
def note(text: str) -> str:
    """Note something down."""
    return "ok"
'''


def top(toren_cli, env: dict[str, str], *args: str) -> dict[str, Any]:
    done = toren_cli("top", "--json", *args, env=env)
    assert done.returncode == 0, done.stderr
    snapshot: dict[str, Any] = json.loads(done.stdout)
    return snapshot


@pytest.mark.slow
def test_top_json_shows_workers_queue_runs_in_flight_and_failures(
        toren_cli, start_toren, database_url: str, tmp_path: Path) -> None:
    slow = write_agent_dir(tmp_path / "crews", "slow", tools_py=TOOLS)
    broken = write_agent_dir(tmp_path / "crews", "broken")
    (broken / "workflow.py").write_text(
        "async def workflow(ctx):\n    raise ValueError('the plan fell apart')\n")
    # CLI commands take seconds on a loaded machine: calls slow enough to be seen in flight
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "6",
           "TOREN_LEASE_TTL": "2", "TOREN_POLL_INTERVAL": "0.2", "TOREN_CONCURRENCY": "2"}
    toren_cli("db", "migrate", "--dir", str(slow), "--dir", str(broken), env=env)
    runs = [create_run(toren_cli, slow, "slow", f"job {i}", env) for i in range(5)]
    failed = create_run(toren_cli, broken, "broken", "go", env)
    workers = [start_worker(start_toren, slow, env) for _ in range(2)]

    seen: list[dict[str, Any]] = []

    def two_runs_past_their_first_call() -> bool:
        seen.append(top(toren_cli, env))
        return sum(run["step"] >= 1 for run in seen[-1]["runs_in_flight"]) >= 2

    assert wait_until(two_runs_past_their_first_call, 60), json.dumps(seen[:3], indent=1)
    snapshot = seen[-1]
    assert len(snapshot["workers"]) == 2
    assert {worker["version"] for worker in snapshot["workers"]} == {toren.__version__}
    assert snapshot["versions"] == [toren.__version__]
    assert all(worker["agents"] == ["slow"] for worker in snapshot["workers"])
    in_flight = {run["id"]: run for run in snapshot["runs_in_flight"]}
    assert set(in_flight) <= set(runs) | {failed}
    assert {run["agent"] for run in in_flight.values()} <= {"slow", "broken"}
    moving = [run for run in in_flight.values() if run["step"] >= 1]
    assert all(run["status"] == "running" and run["tasks"] == 1 and run["elapsed_s"] > 0
               for run in moving)
    # two workers, two messages each: at most four in hand, the rest wait in the queue
    slow_queue = snapshot["agents"]["slow"]["queue"]
    assert slow_queue["in_flight"] <= 4
    assert snapshot["agents"]["slow"]["runs"].get("running", 0) >= 2
    assert snapshot["agents"]["broken"]["queue"]["ready"] == 1  # no worker serves it

    broken_worker = start_worker(start_toren, broken, env)
    assert wait_until(lambda: run_row(database_url, "agent_broken", failed)[0] == "failed", 30)
    for run_id in runs:
        assert wait_until(lambda run_id=run_id: run_row(database_url, "agent_slow", run_id)[0]
                          == "completed", 90)
    after = top(toren_cli, env)
    assert after["runs_in_flight"] == []
    assert [run["id"] for run in after["recent_failures"]] == [failed]
    assert "the plan fell apart" in after["recent_failures"][0]["error"]["message"]
    assert len(after["workers"]) == 3
    assert after["agents"]["slow"]["queue"] == {
        "ready": 0, "in_flight": 0, "delayed": 0, "oldest_ready_age_s": 0.0,
        "waiting": {"queued": 0, "concurrency": 0, "delayed": 0}}
    for worker in [*workers, broken_worker]:
        worker.stop()


@pytest.mark.slow
def test_top_json_remotely_matches_local(toren_cli, start_toren, database_url: str,
                                         tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path / "crews", "remote-crew")
    env = {"DATABASE_URL": database_url}
    made = toren_cli("keys", "create", "ops", "--json", env=env)
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)["key"]
    server = start_toren("serve", "--dir", str(crew), "--port", "0", "--json", env=env)
    url = str(server.next_json()["url"])
    create_run(toren_cli, crew, "remote-crew", "queued only", env)
    local = top(toren_cli, env)
    remote = top(toren_cli, {"TOREN_URL": url, "TOREN_API_KEY": key})
    for snapshot in (local, remote):  # what moves with the clock
        snapshot.pop("at")
        for run in snapshot["runs_in_flight"]:
            run.pop("elapsed_s")
        assert snapshot["agents"]["remote-crew"]["queue"].pop("oldest_ready_age_s") > 0
    assert remote == local
    assert local["agents"]["remote-crew"]["queue"]["ready"] == 1
    refused = toren_cli("top", "--json", env={"TOREN_URL": url, "TOREN_API_KEY": "wrong"})
    assert refused.returncode == 1
    assert json.loads(refused.stdout)["error"]["code"] == "unauthorized"
    server.stop()


def test_top_refuses_a_bad_interval(tmp_path: Path, toren_env: dict[str, str]) -> None:
    done = subprocess.run([str(TOREN), "top", "--interval", "0"], env=toren_env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--interval" in done.stderr
