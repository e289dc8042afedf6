"""A policy's decision survives SIGKILL (issue 39 §5): a real ``toren worker`` kills itself
right after the policies' decisions on a response and its tool call are appended and before
the call runs (``after_policy_decided``); the next worker replays the decisions from the log:
no hook is asked again (their side effects, counted in a file outside the database, happen
once), and the call runs once, with the arguments the policy rewrote."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.chaos.helpers import create_run, run_events, run_row, start_worker
from tests.conftest import wait_until
from tests.durable import check_log
from toren.core.events import TERMINAL_STATUSES
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOOLS = """
import toren

@toren.tool(idempotent=True)  # its key dedupes the payment: run again after a crash
def pay(to: str, amount: int) -> str:
    'Pay someone.'
    with open({effects!r}, "a") as f:
        f.write(f"{{toren.current_tool_call().idempotency_key}} {{to}} {{amount}}\\n")
    return f"paid {{amount}} to {{to}}"
"""


def test_a_decision_is_replayed_after_sigkill_never_asked_again(
        database_url: str, toren_cli, start_toren, tmp_path: Path) -> None:
    effects, count = tmp_path / "effects.log", tmp_path / "hooks.log"
    directory = write_agent_dir(
        tmp_path, "payer", tools_py=TOOLS.format(effects=str(effects)),
        policies=[{"name": "testplugin", "settings": {
            "rewrite": {"pay": {"amount": 10}}, "count_file": str(count)}}])
    env = {"DATABASE_URL": database_url, "TOREN_LOAD_PLUGINS": "testplugin"}
    run_id = create_run(toren_cli, directory, "payer", json.dumps(
        {"toolCalls": [{"name": "pay", "arguments": {"to": "ann", "amount": 500}}]}), env)
    crashing = env | {"TOREN_CRASH_AT": "after_policy_decided",
                      "TOREN_CRASH_ONCE": str(tmp_path / "crashed")}
    doomed = start_toren("worker", "--dir", str(directory), "--json", env=crashing)
    assert doomed.next_json()["event"] == "ready"
    assert doomed.proc.wait(timeout=60) == -signal.SIGKILL, doomed.stderr
    assert not effects.exists()  # killed between the decision and its effect
    asked = count.read_text().splitlines()
    assert [line.split()[0] for line in asked] == [
        "before_run_start", "after_model_response", "before_tool_call"]

    worker = start_worker(start_toren, directory, crashing)
    assert wait_until(lambda: run_row(database_url, "agent_payer", run_id)[0]
                      in TERMINAL_STATUSES, 90), worker.stderr
    worker.stop()
    status, _output, error = run_row(database_url, "agent_payer", run_id)
    assert status == "completed", error
    events = run_events(database_url, "agent_payer", run_id)
    check_log(events, executed=[line.split()[0] for line in effects.read_text().splitlines()])
    # the call ran once, as rewritten; each hook was asked once per subject across the kill
    [paid] = effects.read_text().splitlines()
    assert paid.endswith(" ann 10")
    lines = count.read_text().splitlines()
    assert [line.split()[0] for line in lines] == [
        "before_run_start", "after_model_response", "before_tool_call", "after_tool_call",
        "after_model_response"]
    assert len(set(lines)) == len(lines)
    decided = [e for e in events if e.type == "PolicyDecided"]
    assert [(e.data["hook"], e.data["decision"]) for e in decided] == [
        ("after_model_response", "keep"), ("before_tool_call", "rewrite"),
        ("after_tool_call", "keep"), ("after_model_response", "keep")]
    # the first two were decided under the killed worker's lease, the others after it
    epochs = [e.data["epoch"] for e in decided]
    assert epochs[0] == epochs[1] < epochs[2] == epochs[3]
    receipt = toren_cli("jobs", "receipt", run_id, "--json", env=env)
    assert receipt.returncode == 0, receipt.stderr
    policies = json.loads(receipt.stdout)["tasks"][0]["policies"]
    assert [p["replayed"] for p in policies] == [True, True, False, False]
    shown = toren_cli("jobs", "receipt", run_id, env=env).stdout
    assert "Policy decisions" in shown
    [row] = [line for line in shown.splitlines() if "rewrite" in line]
    assert [cell.strip() for cell in row.split("│")[1:-1]] == [
        "main", "1", "before_tool_call", "pay", "rewrite", "testplugin", "capped by testplugin",
        "yes"]
