"""web_search through Toren: results land in the log, and a resumed run never searches again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import psycopg
import pytest
from fake_tavily import TEST_KEY, FakeFactory

from toren.host.runtime import Runtime
from toren.testing import OutputProcess

EXAMPLE = Path(__file__).parents[3] / "contrib" / "examples" / "tool-plugins" / "web-researcher"
TOREN = Path(sys.executable).parent / "toren"
FAKE = Path(__file__).parent / "fake_tavily.py"


async def test_the_example_agent_searches_and_the_results_are_recorded(
        fake_tavily: FakeFactory, toren_runtime: Callable[..., Awaitable[Runtime]],
        tmp_path: Path) -> None:
    fake = await fake_tavily([429])
    runtime = await toren_runtime([shutil.copytree(EXAMPLE, tmp_path / "web-researcher")],
                                  load_plugins=("toren-tavily",))
    run_id = await runtime.start_run("web-researcher", "durable execution")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed"
    (result,) = [e.data for e in await runtime.events(run_id) if e.type == "ToolCallCompleted"]
    assert result["name"] == "web_search" and not result["is_error"]
    assert [r["url"] for r in json.loads(result["output"])["results"]] == [
        "https://example.com/1", "https://example.com/2", "https://example.com/3"]
    assert "https://example.com/1" in (record.output or "")
    assert len(fake.requests) == 2  # the 429, then the search


@pytest.mark.slow
def test_a_worker_killed_after_the_search_resumes_without_searching_again(
        database_url: str, tmp_path: Path, output_processes: list[OutputProcess]) -> None:
    processes = output_processes
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("TOREN_", "TAVILY_")) and key != "DATABASE_URL"}
    env |= {"DATABASE_URL": database_url, "TAVILY_API_KEY": TEST_KEY,
            "TOREN_LOAD_PLUGINS": "toren-tavily", "TOREN_LEASE_TTL": "3",
            "TOREN_POLL_INTERVAL": "0.2", "TOREN_HOME": str(tmp_path / "home"),
            # the second model call comes after the search result was recorded
            "TOREN_CRASH_AT": "after_model_response@2",
            "TOREN_CRASH_ONCE": str(tmp_path / "crashed-once"), "NO_COLOR": "1"}
    server = OutputProcess([sys.executable, str(FAKE)], env=env,
                           stderr_path=tmp_path / "fake.stderr")
    processes.append(server)
    url = f"http://127.0.0.1:{server.next_json(timeout=30)['port']}"
    env["TOREN_TAVILY_BASE_URL"] = url
    directory = shutil.copytree(EXAMPLE, tmp_path / "web-researcher")
    created = subprocess.run([str(TOREN), "run", "web-researcher", "crash safety", "--no-follow",
                              "--json", "--dir", str(directory)], env=env, capture_output=True,
                             text=True, timeout=60, check=False)
    assert created.returncode == 0, created.stderr
    run_id = json.loads(created.stdout)["id"]

    for index in range(2):  # the first worker SIGKILLs itself; the second finishes the run
        worker = OutputProcess([str(TOREN), "worker", "--dir", str(directory), "--json"],
                               env=env, stderr_path=tmp_path / f"worker-{index}.stderr")
        processes.append(worker)
        if index == 0:
            try:
                assert worker.proc.wait(timeout=60) == -9, worker.stderr
            except subprocess.TimeoutExpired:
                pytest.fail(f"the worker did not crash: {worker.stderr}")
            # the crash came after the result was recorded (at the next model call); a
            # search whose result a lost lease kept out of the log may have run again before
            # it, as an idempotent tool may, but none may run after it
            searched_before_crash = searches(url)
            assert searched_before_crash >= 1
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and status(database_url, run_id) != "completed":
        time.sleep(0.2)
    assert status(database_url, run_id) == "completed", worker.stderr

    assert searches(url) == searched_before_crash
    with psycopg.connect(database_url) as conn:
        calls = conn.execute("SELECT count(*) FROM agent_web_researcher.events WHERE run_id = %s "
                             "AND type = 'ToolCallCompleted'", [run_id]).fetchone()
    assert calls == (1,)


def searches(url: str) -> int:
    with urllib.request.urlopen(f"{url}/_fake/stats", timeout=10) as answer:
        return int(json.load(answer)["/search"])


def status(database_url: str, run_id: str) -> str | None:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT status FROM agent_web_researcher.runs WHERE id = %s",
                           [run_id]).fetchone()
    return None if row is None else str(row[0])
