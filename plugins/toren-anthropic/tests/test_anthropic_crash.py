"""SIGKILL a real ``toren worker`` mid-run: a completed Claude call is never paid twice."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest

from toren.core.catalog import validate_event
from toren.testing import OutputProcess, wait_for, write_agent_dir

TOREN = Path(sys.executable).parent / "toren"
FAKE = Path(__file__).parent / "fake_anthropic.py"
STEPS = 8
KILLS = 3
TOOLS = '''
from toren import tool


@tool(idempotent=True)
def step(n: int) -> str:
    """Do step number n."""
    return f"step {n} done"
'''


def clean_env(database_url: str, home: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key != "DATABASE_URL" and not key.startswith(("TOREN_", "ANTHROPIC_"))}
    env |= {"DATABASE_URL": database_url, "ANTHROPIC_API_KEY": "x",
            "TOREN_LOAD_PLUGINS": "toren-anthropic", "TOREN_LEASE_TTL": "1",
            "TOREN_POLL_INTERVAL": "0.2", "TOREN_HOME": str(home), "NO_COLOR": "1"}
    return env


def run_state(database_url: str, run_id: str) -> tuple[str, Any, list[tuple[str, dict]]]:
    with psycopg.connect(database_url) as conn:
        status, output = conn.execute(
            "SELECT status, output FROM agent_crashy_claude.runs WHERE id = %s",
            [run_id]).fetchone()  # type: ignore[misc]
        events = conn.execute(
            "SELECT stream, type, data FROM agent_crashy_claude.events WHERE run_id = %s "
            "ORDER BY stream, seq", [run_id]).fetchall()
    for stream, kind, data in events:
        validate_event(stream, kind, data)
    return status, output, [(kind, data) for _stream, kind, data in events]


@pytest.mark.slow
def test_sigkill_mid_run_repays_at_most_the_call_in_flight(
        database_url: str, tmp_path: Path, output_processes: list[OutputProcess]) -> None:
    env = clean_env(database_url, tmp_path / "toren-home")
    server = OutputProcess(
        [sys.executable, str(FAKE), "--tool-steps", str(STEPS), "--delay", "0.3"], env=env,
        stderr_path=tmp_path / "fake.stderr")
    output_processes.append(server)
    url = f"http://127.0.0.1:{server.next_json(timeout=30)['port']}"
    directory = write_agent_dir(tmp_path, "crashy-claude", model="anthropic/claude-sonnet-4-6",
                                baseUrl=url, tools_py=TOOLS)

    created = subprocess.run([str(TOREN), "run", "crashy-claude", "go", "--no-follow", "--json",
                              "--dir", str(directory)], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=60, check=False)
    assert created.returncode == 0, created.stderr
    run_id = json.loads(created.stdout)["id"]

    def start_worker(index: int) -> OutputProcess:
        worker = OutputProcess([str(TOREN), "worker", "--dir", str(directory), "--json"],
                               env=env, stderr_path=tmp_path / f"worker-{index}.stderr")
        output_processes.append(worker)
        assert worker.next_json()["event"] == "ready", worker.stderr
        return worker

    seed = int(os.environ.get("TOREN_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    for kill in range(KILLS):
        worker = start_worker(kill)
        time.sleep(rng.uniform(0.3, 1.2))
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait(timeout=10)
    worker = start_worker(KILLS)
    assert wait_for(lambda: run_state(database_url, run_id)[0] == "completed", 60), (
        f"seed {seed}: {worker.stderr}")
    worker.stop()

    _status, output, events = run_state(database_url, run_id)
    assert output == f"finished {STEPS} steps"
    completed = [data for kind, data in events if kind == "ModelCallCompleted"]
    assert sorted(c["step"] for c in completed) == list(range(1, STEPS + 2)), f"seed {seed}"
    with urllib.request.urlopen(f"{url}/_fake/stats", timeout=10) as answer:
        paid = json.load(answer)["/v1/messages"]
    # every completed call was paid once, plus at most the one in flight at each kill
    assert len(completed) <= paid <= len(completed) + KILLS, (paid, len(completed), seed)
    repeated = sum(bool(c.get("repeated")) for c in completed)
    assert repeated <= KILLS
    print(json.dumps({"seed": seed, "paid": paid, "completed": len(completed),
                      "repeated": repeated}))
