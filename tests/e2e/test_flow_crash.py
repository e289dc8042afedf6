"""A worker SIGKILLed while its run holds the agent's only concurrency slot: the slot is
released by the lease rule (its claimed message expires after TOREN_LEASE_TTL), and both the
interrupted run and the run waiting for the slot complete on another worker."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.chaos.helpers import create_run, run_row, start_worker
from tests.conftest import wait_until
from toren.testing import write_agent_dir


def tools(log: Path, marker: Path) -> str:
    """``work`` hangs the first time it works the run "first" (the worker is killed there)."""
    return f'''
import os
import time

def work(text: str) -> str:
    """Work."""
    with open({str(log)!r}, "a") as f:
        f.write("start " + text + "\\n")
    if "first" in text and not os.path.exists({str(marker)!r}):
        open({str(marker)!r}, "w").close()
        time.sleep(120)
    return "done"
'''


def waiting_for_slot(url: str, run_id: str) -> bool:
    """The run's message is ready and unclaimed while the agent's one slot is taken."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE claimed_by IS NULL AND available_at <= now()) "
            "FROM toren_control.queue WHERE run_id = %s", [run_id]).fetchone()
    return row is not None and row[0] == 1


@pytest.mark.slow
def test_a_sigkilled_worker_releases_its_concurrency_slot_by_the_lease_rule(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    log, marker = tmp_path / "work.log", tmp_path / "hung-once"
    directory = write_agent_dir(tmp_path, "slotted", tools_py=tools(log, marker),
                                concurrency=1)
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "2", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_MAX_DELIVERIES": "100"}
    first = create_run(toren_cli, directory, "slotted", "first", env)
    doomed = start_worker(start_toren, directory, env)
    assert wait_until(lambda: log.exists() and "start first" in log.read_text(), 60)
    second = create_run(toren_cli, directory, "slotted", "second", env)
    # the slot is held by the hung run: the second waits, unclaimed, however often it is
    # looked at (the worker has room for 7 more)
    assert wait_until(lambda: waiting_for_slot(database_url, second), 10)
    assert "second" not in log.read_text()

    doomed.proc.kill()
    doomed.proc.wait(timeout=10)
    worker = start_worker(start_toren, directory, env)
    assert wait_until(lambda: all(run_row(database_url, "agent_slotted", run)[0] == "completed"
                                  for run in (first, second)), 90), log.read_text()
    worker.stop()
    assert log.read_text().count("start second") == 1
