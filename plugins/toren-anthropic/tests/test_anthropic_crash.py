"""SIGKILL a real ``toren worker`` mid-run: a completed Claude call is never paid twice, and the
resumed run's requests are the uninterrupted run's, breakpoints and all, so they read the cache
the killed worker wrote."""

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
from psycopg import sql

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


def run_state(database_url: str, run_id: str, agent: str = "crashy-claude"
              ) -> tuple[str, Any, list[tuple[str, dict]]]:
    schema = sql.Identifier("agent_" + agent.replace("-", "_"))
    with psycopg.connect(database_url) as conn:
        status, output = conn.execute(
            sql.SQL("SELECT status, output FROM {}.runs WHERE id = %s").format(schema),
            [run_id]).fetchone()  # type: ignore[misc]
        events = conn.execute(
            sql.SQL("SELECT stream, type, data FROM {}.events WHERE run_id = %s "
                    "ORDER BY stream, seq").format(schema), [run_id]).fetchall()
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


#: Long enough for the fake (like Sonnet) to cache it: 1,024 tokens and more.
LONG_PROMPT = "You are a careful agent. " * 240
CACHE_STEPS = 6


def fetch_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


@pytest.mark.slow
def test_a_resumed_run_sends_the_uninterrupted_runs_requests_and_reads_their_cache(
        database_url: str, tmp_path: Path, output_processes: list[OutputProcess]) -> None:
    env = clean_env(database_url, tmp_path / "toren-home")

    def start(what: list[str], name: str) -> OutputProcess:
        process = OutputProcess(what, env=env, stderr_path=tmp_path / f"{name}.stderr")
        output_processes.append(process)
        return process

    def fake_server(name: str) -> str:
        server = start([sys.executable, str(FAKE), "--tool-steps", str(CACHE_STEPS),
                        "--delay", "0.2", "--cache"], name)
        return f"http://127.0.0.1:{server.next_json(timeout=30)['port']}"

    def create_run(agent: str, url: str) -> tuple[Path, str]:
        directory = write_agent_dir(tmp_path, agent, model="anthropic/claude-sonnet-4-6",
                                    baseUrl=url, tools_py=TOOLS, prompt=LONG_PROMPT)
        created = subprocess.run([str(TOREN), "run", agent, "go", "--no-follow", "--json",
                                  "--dir", str(directory)], env=env, cwd=tmp_path,
                                 capture_output=True, text=True, timeout=60, check=False)
        assert created.returncode == 0, created.stderr
        return directory, json.loads(created.stdout)["id"]

    def worker(directory: Path, name: str) -> OutputProcess:
        process = start([str(TOREN), "worker", "--dir", str(directory), "--json"], name)
        assert process.next_json()["event"] == "ready", process.stderr
        return process

    # the run as it goes without a crash, against a fake of its own (its own cache)
    steady_url = fake_server("steady-fake")
    directory, run_id = create_run("steady-claude", steady_url)
    steady = worker(directory, "steady-worker")
    assert wait_for(lambda: run_state(database_url, run_id, "steady-claude")[0] == "completed",
                    60), steady.stderr
    steady.stop()
    expected = [made["body"] for made in fetch_json(f"{steady_url}/_fake/requests")]
    assert len(expected) == CACHE_STEPS + 1

    # the same run, its worker SIGKILLed once two calls were answered
    crashy_url = fake_server("crashy-fake")
    directory, run_id = create_run("crashy-claude", crashy_url)
    first = worker(directory, "crashy-worker-1")
    assert wait_for(lambda: fetch_json(f"{crashy_url}/_fake/stats").get("/v1/messages", 0) >= 3,
                    60), first.stderr
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(timeout=10)
    before_kill = len(fetch_json(f"{crashy_url}/_fake/requests"))
    second = worker(directory, "crashy-worker-2")
    assert wait_for(lambda: run_state(database_url, run_id)[0] == "completed", 60), (
        second.stderr)
    second.stop()

    made = fetch_json(f"{crashy_url}/_fake/requests")
    bodies = [entry["body"] for entry in made]
    # the call in flight at the kill may be made again, identically; otherwise every request,
    # its prefix and its breakpoints, is the uninterrupted run's, byte for byte
    distinct = [body for index, body in enumerate(bodies)
                if index == 0 or body != bodies[index - 1]]
    assert [json.dumps(body, sort_keys=True) for body in distinct] == [
        json.dumps(body, sort_keys=True) for body in expected]
    resumed = made[before_kill]
    assert resumed["usage"]["cache_read_input_tokens"] > 0, resumed["usage"]
    # what it read is a prefix an earlier request of the killed worker wrote
    written = {entry_tokens(entry) for entry in made[:before_kill] if entry["usage"]}
    assert resumed["usage"]["cache_read_input_tokens"] in written
    _status, _output, events = run_state(database_url, run_id)
    completed = [data for kind, data in events if kind == "ModelCallCompleted"]
    assert all(c["usage"]["cache_read_tokens"] > 0 for c in completed if c["step"] > 1)


def entry_tokens(entry: dict[str, Any]) -> int:
    """The whole prompt of a request the fake answered: what its last breakpoint cached."""
    usage = entry["usage"]
    return int(usage["input_tokens"] + usage["cache_read_input_tokens"]
               + usage["cache_creation_input_tokens"])
