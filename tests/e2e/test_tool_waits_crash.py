"""A tool waiting for a signal, end to end with real processes: `toren jobs show` says what the
run waits for, `toren jobs signal` wakes it, and a worker SIGKILLed after the wait's end is
recorded (before the tool runs again) leaves a next worker that runs the tool once more with
the same payload: the signal is taken once, the code after the wait runs once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chaos.helpers import create_run, run_events, run_row, start_worker
from tests.conftest import wait_until
from tests.durable import check_log
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
SCHEMA = "agent_shop"

TOOLS = '''
import os

import toren


async def await_payment(order: str) -> str:
    """Wait for the payment of an order."""
    effects = os.environ["SHOP_EFFECTS"]
    with open(effects, "a") as out:  # runs again after the wait: counted
        out.write(f"before {order}\\n")
    paid = await toren.wait_for_signal("paid")
    with open(effects, "a") as out:
        out.write(f"after {order}\\n")
    return f"{order} paid {paid['amount']}"
'''


def test_sigkill_after_the_wait_ended_takes_the_signal_once(
        database_url: str, start_toren, toren_cli, tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path / "crews", "shop", tools_py=TOOLS,
                                limits={"maxSteps": 4})
    effects = tmp_path / "effects.txt"
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_CRASH_AT": "after_tool_wait_ended", "SHOP_EFFECTS": str(effects),
           "TOREN_CRASH_ONCE": str(tmp_path / "crashed")}
    plan = json.dumps({"toolCalls": [{"name": "await_payment", "arguments": {"order": "A-1"}}]})
    run_id = create_run(toren_cli, directory, "shop", plan, env)
    first = start_worker(start_toren, directory, env)
    assert wait_until(lambda: run_row(database_url, SCHEMA, run_id)[0] == "waiting", 60)

    shown = toren_cli("jobs", "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    said = " ".join(shown.stdout.split())
    assert "is waiting for the signal 'paid'" in said
    assert f"toren jobs signal {run_id} paid --data JSON" in said
    sent = toren_cli("jobs", "signal", run_id, "paid", "--data", '{"amount": 7}', env=env)
    assert sent.returncode == 0, sent.stderr
    # the worker takes the signal up, records the wait's end and is killed before the re-run
    assert wait_until(lambda: first.proc.poll() is not None, 60), "the crash point was missed"
    assert (tmp_path / "crashed").exists() and first.proc.returncode == -9
    assert effects.read_text().splitlines() == ["before A-1"]

    start_worker(start_toren, directory, env)
    assert wait_until(lambda: run_row(database_url, SCHEMA, run_id)[0] == "completed", 60)
    _status, output, _ = run_row(database_url, SCHEMA, run_id)
    assert "A-1 paid 7" in output
    assert effects.read_text().splitlines() == ["before A-1", "before A-1", "after A-1"]
    events = run_events(database_url, SCHEMA, run_id)
    check_log(events)
    kinds = [e.type for e in events]
    assert kinds.count("ToolWaitStarted") == kinds.count("ToolWaitEnded") == 1
    assert kinds.count("ToolCallCompleted") == 1
    [ended] = [e for e in events if e.type == "ToolWaitEnded"]
    assert (ended.data["signal"], ended.data["payload"]) == (1, {"amount": 7})
