"""SIGKILL a real ``toren worker`` mid-run, with the fake server in its own process: a model call
that completed is never paid twice; at most the one in flight at each kill is repeated."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from toren.core.catalog import validate_event
from toren.testing import OutputProcess, write_agent_dir

#: The console script installed next to this interpreter.
TOREN = Path(sys.executable).parent / "toren"
FAKE = Path(__file__).parent / "fake_openai.py"
N_TOOLS = 8
SCHEMA = "agent_crashy"


def tools_source() -> str:
    lines = ["from toren import tool", ""]
    for i in range(N_TOOLS):
        lines += ["@tool(idempotent=True)", f"def step_{i}(text: str) -> str:",
                  f'    """Step number {i}."""', f"    return 'result {i} for ' + text", ""]
    return "\n".join(lines) + "\n"


@pytest.fixture
def processes() -> Iterator[list[OutputProcess]]:
    started: list[OutputProcess] = []
    yield started
    for process in reversed(started):
        process.stop()


def run_row(url: str, run_id: str) -> tuple[str, Any]:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT status, output FROM {SCHEMA}.runs WHERE id = %s",
                           [run_id]).fetchone()
    assert row is not None
    return row[0], row[1]


def wait_until_done(url: str, run_id: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        status, _ = run_row(url, run_id)
        if status in ("completed", "failed", "stopped", "cancelled") or \
                time.monotonic() > deadline:
            return status
        time.sleep(0.2)


@pytest.mark.slow
def test_sigkill_mid_run_repays_at_most_the_call_in_flight(
        database_url: str, tmp_path: Path, processes: list[OutputProcess]) -> None:
    env = {key: value for key, value in os.environ.items()
           if key != "DATABASE_URL" and not key.startswith(("TOREN_", "OPENAI_"))}
    env |= {"DATABASE_URL": database_url, "OPENAI_API_KEY": "x",
            "TOREN_LOAD_PLUGINS": "toren-openai", "TOREN_LEASE_TTL": "1",
            "TOREN_POLL_INTERVAL": "0.2", "TOREN_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    fake = OutputProcess([sys.executable, str(FAKE), "--delay", "0.3"], env=env,
                         stderr_path=tmp_path / "fake.err")
    processes.append(fake)
    url = fake.next_json(timeout=30)["url"]
    directory = write_agent_dir(tmp_path, "crashy", model="openai/gpt-4o-mini", baseUrl=url,
                                tools_py=tools_source())

    created = subprocess.run([str(TOREN), "run", "crashy", "go", "--no-follow", "--json",
                              "--dir", str(directory)], env=env, capture_output=True, text=True,
                             timeout=60, check=False)
    assert created.returncode == 0, created.stderr
    run_id = json.loads(created.stdout)["id"]

    def start_worker(number: int) -> OutputProcess:
        worker = OutputProcess([str(TOREN), "worker", "--dir", str(directory), "--json"],
                               env=env, stderr_path=tmp_path / f"worker-{number}.err")
        processes.append(worker)
        assert worker.next_json()["event"] == "ready"
        return worker

    seed = int(os.environ.get("TOREN_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    kills = 0
    for number in range(3):
        worker = start_worker(number)
        time.sleep(rng.uniform(0.4, 1.6))
        if run_row(database_url, run_id)[0] in ("completed", "failed"):
            break  # finished already: later kills would test nothing
        worker.proc.kill()
        worker.proc.wait(timeout=10)
        kills += 1
    worker = start_worker(3)
    assert wait_until_done(database_url, run_id, 60) == "completed", f"seed {seed}"
    worker.stop()

    with psycopg.connect(database_url) as conn:
        rows = conn.execute(f"SELECT stream, type, data FROM {SCHEMA}.events WHERE run_id = %s "
                            "ORDER BY stream, seq", [run_id]).fetchall()
    for stream, event_type, data in rows:
        validate_event(stream, event_type, data)
    calls = [data for _, event_type, data in rows if event_type == "ModelCallCompleted"]
    assert sorted(c["step"] for c in calls) == list(range(1, N_TOOLS + 2)), f"seed {seed}"
    with urllib.request.urlopen(url.removesuffix("/v1") + "/_fake/stats", timeout=10) as answer:
        stats = json.load(answer)
    paid = stats["counts"]["/v1/chat/completions"]
    print(json.dumps({"seed": seed, "kills": kills, "model_calls_completed": len(calls),
                      "chat_requests": paid,
                      "repeated": sum(bool(c["repeated"]) for c in calls)}))
    # every completed call was paid exactly once, plus at most the one in flight at each kill
    assert len(calls) <= paid <= len(calls) + kills, (paid, len(calls), kills, seed)
    assert sum(bool(c["repeated"]) for c in calls) <= kills
    _, output = run_row(database_url, run_id)
    assert output == "; ".join(f"result {i} for go" for i in range(N_TOOLS))
