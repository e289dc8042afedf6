"""SIGKILL a real worker between two changing calls of the example agent: a second worker, on
another disk, continues the run with the same files, and the call that was cut short runs again
on the workspace as it was before it (its half-done effects do not leak in).

Needs bubblewrap (``pytest -m bwrap``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from toren.core.catalog import validate_event
from toren.testing import OutputProcess, wait_for

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

TOREN = Path(sys.executable).parent / "toren"
EXAMPLE = Path(__file__).parents[3] / "contrib" / "examples" / "with-plugins" / "sandbox-crew"
SCHEMA = "agent_sandbox_crew"


def worker_env(database_url: str, tmp_path: Path, disk: str, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key != "DATABASE_URL" and not key.startswith("TOREN_")}
    return env | {"DATABASE_URL": database_url, "TOREN_LOAD_PLUGINS": "toren-sandbox",
                  "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
                  "TOREN_HOME": str(tmp_path / "home"), "NO_COLOR": "1",
                  "TOREN_SANDBOX_DIR": str(tmp_path / disk)} | extra


def run_state(database_url: str, run_id: str) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(f"SELECT status FROM {SCHEMA}.runs WHERE id = %s",
                           [run_id]).fetchone()
        events = conn.execute(f"SELECT stream, type, data FROM {SCHEMA}.events "
                              "WHERE run_id = %s ORDER BY stream, seq", [run_id]).fetchall()
    assert row is not None
    for stream, kind, data in events:
        validate_event(stream, kind, data)
    return row[0], [(kind, data) for _stream, kind, data in events]


def start_worker(env: dict[str, str], tmp_path: Path, name: str) -> OutputProcess:
    worker = OutputProcess([str(TOREN), "worker", "--dir", str(EXAMPLE), "--json"], env=env,
                           stderr_path=tmp_path / f"{name}.stderr")
    assert worker.next_json()["event"] == "ready", worker.stderr
    return worker


def test_a_second_worker_continues_with_the_same_files_after_a_sigkill(
        database_url: str, tmp_path: Path, output_processes: list[OutputProcess]) -> None:
    plan = (EXAMPLE / "plan.json").read_text()
    # the first worker kills itself after the second call (the first bash) ran, before its
    # result is recorded: between the recorded write_file and the edit that follows
    first_env = worker_env(database_url, tmp_path, "disk-1", TOREN_CRASH_AT="after_tool@2",
                           TOREN_CRASH_ONCE=str(tmp_path / "crashed-once"))
    created = subprocess.run(
        [str(TOREN), "run", "sandbox-crew", plan, "--no-follow", "--json", "--dir",
         str(EXAMPLE)], env=first_env, capture_output=True, text=True, timeout=60, check=False)
    assert created.returncode == 0, created.stderr
    run_id = json.loads(created.stdout)["id"]

    first = start_worker(first_env, tmp_path, "first")
    output_processes.append(first)
    assert first.proc.wait(timeout=60) == -9, first.stderr  # SIGKILL, at the crash point
    _status, events = run_state(database_url, run_id)
    recorded = [data["name"] for kind, data in events if kind == "ToolCallCompleted"]
    assert recorded == ["write_file"]
    disk_1 = next((tmp_path / "disk-1" / "sandbox-crew" / run_id).iterdir())
    assert (disk_1 / "runs.log").read_text() == "ran\n"  # the cut-short call did run there

    second = start_worker(worker_env(database_url, tmp_path, "disk-2"), tmp_path, "second")
    output_processes.append(second)
    assert wait_for(lambda: run_state(database_url, run_id)[0] == "completed", 90), \
        second.stderr
    _status, events = run_state(database_url, run_id)
    results = [data for kind, data in events if kind == "ToolCallCompleted"]
    assert [r["name"] for r in results] == ["write_file", "bash", "edit_file", "bash",
                                            "read_file"]
    assert not any(r["is_error"] for r in results), results
    assert results[1]["output"].endswith("55\n")
    assert "55" in results[-1]["output"] and "sum to 100 is 5050" in results[-1]["output"]
    disk_2 = next((tmp_path / "disk-2" / "sandbox-crew" / run_id).iterdir())
    # two recorded runs of the script: the crashed attempt's line was rolled back first
    assert (disk_2 / "runs.log").read_text() == "ran\nran\n"
    assert "sum to" in (disk_2 / "count.py").read_text()
