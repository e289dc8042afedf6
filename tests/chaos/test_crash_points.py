"""Named crash points (TOREN_CRASH_AT): a worker process SIGKILLs itself at each dangerous
moment of the durable loop, a fresh worker takes over, and the log shows exactly what the
crash cost: nothing recorded is lost or doubled, a completed model call is never paid again."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.durable import check_log
from tests.e2e.test_crash_recovery import create_run, crew, run_events, run_row, start_worker
from toren.core.events import TERMINAL_STATUSES as TERMINAL
from toren.core.events import Event
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def crash_then_recover(start_toren, toren_cli, directory: Path, agent: str, point: str,
                       env: dict[str, str], tmp_path: Path) -> tuple[str, list[Event]]:
    """Start a run; a worker crashes at ``point``; another finishes the run. Returns the run's
    id and events."""
    crashing = env | {"TOREN_CRASH_AT": point,
                      "TOREN_CRASH_ONCE": str(tmp_path / f"crashed-{point}")}
    run_id = create_run(toren_cli, directory, agent, "topic", env)
    doomed = start_toren("worker", "--dir", str(directory), "--json", env=crashing)
    assert doomed.next_json()["event"] == "ready"
    assert doomed.proc.wait(timeout=60) == -signal.SIGKILL, doomed.stderr
    assert (tmp_path / f"crashed-{point}").exists()
    schema = f"agent_{agent.replace('-', '_')}"
    # the same environment again: the marker file lets the new worker past the point
    worker = start_worker(start_toren, directory, crashing)
    assert wait_until(lambda: run_row(env["DATABASE_URL"], schema, run_id)[0] in TERMINAL,
                      90), (run_row(env["DATABASE_URL"], schema, run_id), worker.stderr)
    worker.stop()
    events = run_events(env["DATABASE_URL"], schema, run_id)
    check_log(events)
    return run_id, events


def paid_calls(log: Path) -> int:
    return len(log.read_text().splitlines())


def completed(events: list[Event], purpose: str | None = None) -> list[Event]:
    return [e for e in events
            if e.type == "ModelCallCompleted" and e.data.get("purpose") == purpose]


@pytest.fixture
def env(database_url: str, tmp_path: Path, queue_env: dict[str, str]) -> dict[str, str]:
    """Every crash point on every queue driver (``queue_env``): on SQS, a crash right after
    an append committed also leaves the messages it wrote unsent, for another relay."""
    return {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
            "TOREN_SCRIPTED_CALL_LOG": str(tmp_path / "calls.jsonl"),
            "TOREN_MAX_DELIVERIES": "100"} | queue_env


@pytest.mark.parametrize(("point", "repaid", "reexecuted"), [
    # the response died with the worker: that one call is made (and paid) again, marked
    ("after_model_response", 1, 0),
    # the response and its ToolCallStarted are durable: nothing is repaid or re-run
    ("after_append@2", 0, 0),
    # the tool ran but its result was lost: an idempotent tool runs again, once
    ("after_tool", 0, 1),
])
def test_a_crash_at_a_task_point_costs_only_what_was_in_flight(
        start_toren, toren_cli, env: dict[str, str], tmp_path: Path, point: str, repaid: int,
        reexecuted: int) -> None:
    effects = tmp_path / "effects.log"
    directory = crew(tmp_path, n_tools=2, effects=effects)
    run_id, events = crash_then_recover(start_toren, toren_cli, directory, "crashy", point,
                                        env, tmp_path)
    assert run_row(env["DATABASE_URL"], "agent_crashy", run_id)[0] == "completed"
    calls = completed(events)
    assert [e.data["step"] for e in calls] == [1, 2, 3]  # each step recorded once
    assert paid_calls(tmp_path / "calls.jsonl") == len(calls) + repaid
    assert sum(bool(e.data["repeated"]) for e in calls) == repaid
    keys = effects.read_text().splitlines()
    assert len(set(keys)) == 2 and len(keys) == 2 + reexecuted
    # and from outside the database: no tool ran, no call was made, beyond what the log allows
    check_log(events, executed=keys, calls=[json.loads(line) for line in
                                            (tmp_path / "calls.jsonl").read_text().splitlines()])
    assert [e.type for e in events if e.type == "TaskFinished"] == ["TaskFinished"]
    epochs = {e.data["epoch"] for e in events if e.stream == "task:main" and "epoch" in e.data}
    assert len(epochs) == 2  # the crashed worker's lease, and its successor's


BIG_TOOLS = '''
from toren import tool

@tool(idempotent=True)
def page_one(text: str) -> str:
    """Read page one."""
    return "one " * 1500

@tool(idempotent=True)
def page_two(text: str) -> str:
    """Read page two."""
    return "two " * 1500

@tool(idempotent=True)
def page_three(text: str) -> str:
    """Read page three."""
    return "three " * 1000
'''


def test_a_crash_mid_compaction_repays_only_the_summary_call(
        start_toren, toren_cli, env: dict[str, str], tmp_path: Path) -> None:
    # the offline model does not read summaries: after compacting it starts its tools over,
    # so maxSteps ends the run (the same with or without the crash)
    directory = write_agent_dir(tmp_path, "reader", tools_py=BIG_TOOLS, limits={"maxSteps": 5},
                                compaction={"thresholdTokens": 1000, "keepRecentMessages": 2})
    run_id, events = crash_then_recover(start_toren, toren_cli, directory, "reader",
                                        "mid_compaction", env, tmp_path)
    assert run_row(env["DATABASE_URL"], "agent_reader", run_id)[0] == "stopped"
    summaries = completed(events, "compaction")
    compactions = [e for e in events if e.type == "Compacted"]
    assert len(compactions) == len(summaries) >= 1  # the lost summary was not recorded twice
    assert summaries[0].data["repeated"] is True
    main_calls = completed(events)
    assert not any(e.data["repeated"] for e in main_calls)
    assert paid_calls(tmp_path / "calls.jsonl") == len(main_calls) + len(summaries) + 1


WAVE_WORKFLOW = '''
async def workflow(ctx):
    results = await ctx.wave([("helper", "alpha"), ("helper", "beta"), ("helper", "gamma")])
    final = await ctx.wave([("helper", " + ".join(r.output or "" for r in results))])
    return final[0].output
'''
HELPER = '''---
model: toren/scripted
---
You help.
'''


def test_a_crash_mid_wave_dispatch_schedules_each_task_once(
        start_toren, toren_cli, env: dict[str, str], tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "flow", subagents={"helper": HELPER})
    (directory / "workflow.py").write_text(WAVE_WORKFLOW)
    run_id, events = crash_then_recover(start_toren, toren_cli, directory, "flow",
                                        "mid_wave_dispatch", env, tmp_path)
    run_stream = [e for e in events if e.stream == "run"]
    assert [e.data["wave"] for e in run_stream if e.type == "WaveStarted"] == [1, 2]
    scheduled = [e.data["task_id"] for e in run_stream if e.type == "TaskScheduled"]
    assert scheduled == ["w1-0", "w1-1", "w1-2", "w2-0"]
    assert sorted(e.stream for e in events if e.type == "TaskStarted") == [
        f"task:{task}" for task in sorted(scheduled)]
    # no task's model call was made twice: the crash happened before any task existed
    assert paid_calls(tmp_path / "calls.jsonl") == len(completed(events)) == 4
    status, output, _error = run_row(env["DATABASE_URL"], "agent_flow", run_id)
    assert status == "completed"
    assert "alpha" in json.dumps(output) and "gamma" in json.dumps(output)
