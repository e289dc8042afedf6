"""Signals under SIGKILL: a worker killed right after a workflow took a signal (and committed
what it did next) costs nothing; each signal is taken once, by one wait. Also ``toren jobs
signal`` as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chaos.helpers import create_run, run_events, run_row, start_worker
from tests.conftest import wait_until
from tests.durable import check_log
from toren.testing import write_agent_dir

WORKFLOW = '''
async def workflow(ctx):
    order = await ctx.wait_for_signal("order")
    shipped = await ctx.task("worker", order["item"])
    second = await ctx.wait_for_signal("order")
    return f"{order['item']}+{second['item']}:{shipped.status}"
'''


@pytest.mark.slow
def test_sigkill_after_a_signal_is_taken_takes_it_once(start_toren, toren_cli,
                                                        database_url: str,
                                                        tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "shop", subagents={
        "worker": "---\ndescription: Ships.\ntools: []\n---\nShip it.\n"})
    (directory / "workflow.py").write_text(WORKFLOW)
    once = tmp_path / "crashed-once"
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_CRASH_AT": "after_signal_consumed", "TOREN_CRASH_ONCE": str(once)}
    run_id = create_run(toren_cli, directory, "shop", "go", env)

    def signal(item: str, *extra: str) -> dict[str, object]:
        done = toren_cli("jobs", "signal", run_id[:8], "order", "--data",
                         json.dumps({"item": item}), "--json", *extra, env=env)
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    # sent before any worker runs the workflow: kept for its first wait
    assert signal("apples", "--idempotency-key", "order-1")["number"] == 1
    worker = start_worker(start_toren, directory, env)
    worker.proc.wait(timeout=60)  # it took the signal, committed, and killed itself
    assert once.exists()
    events = run_events(database_url, "agent_shop", run_id)
    assert [e.type for e in events].count("SignalConsumed") == 1
    # a retry of the first send (same key) records nothing; the second order is new
    retried = signal("apples", "--idempotency-key", "order-1")
    assert (retried["number"], retried["created"]) == (1, False)
    assert signal("pears")["number"] == 2
    worker = start_worker(start_toren, directory, env)
    assert wait_until(lambda: run_row(database_url, "agent_shop", run_id)[0] == "completed", 60)
    worker.stop()
    assert run_row(database_url, "agent_shop", run_id)[1] == "apples+pears:completed"
    events = run_events(database_url, "agent_shop", run_id)
    check_log(events)
    run = [e for e in events if e.stream == "run"]
    consumed = [(e.data["wait"], e.data["signal"]) for e in run if e.type == "SignalConsumed"]
    assert consumed == [(1, 1), (2, 2)]
    assert [e.type for e in run].count("WaveStarted") == 1
    assert [e.type for e in events].count("TaskStarted") == 1
    assert len([e for e in events if e.stream == "signals"]) == 2
    refused = toren_cli("jobs", "signal", run_id, "order", "--data", "{}", "--json", env=env)
    assert refused.returncode != 0 and "run_finished" in refused.stdout + refused.stderr
