"""Workflows and waves through the real orchestrator and Postgres."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from tests.durable import check_log, types
from toren.testing import write_agent_dir

EXAMPLES = Path(__file__).resolve().parents[2] / "contrib" / "examples"
ECHO = {"echo": "---\ndescription: Repeats its input.\ntools: []\n---\nRepeat the input.\n"}
SHAKY = {"shaky": "---\ndescription: Fails.\nmodel: test/broken\n---\nFail.\n"}


def crew(tmp_path: Path, workflow: str, name: str = "flow",
         subagents: dict[str, str] | None = None, **fields: object) -> Path:
    directory = write_agent_dir(tmp_path, name, subagents=subagents or ECHO, **fields)
    (directory / "workflow.py").write_text(workflow)
    return directory


async def finish(runtime, agent: str, text: str = "go", timeout: float = 30):
    run_id = await runtime.start_run(agent, text)
    record = await runtime.wait_for_run(run_id, timeout_s=timeout)
    return record, await runtime.events(run_id)


async def test_the_planner_example_runs_offline_with_a_tree_receipt(make_runtime,
                                                                    tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "planner-crew", tmp_path / "planner-crew")
    runtime = await make_runtime(dirs=[tmp_path / "planner-crew"])
    record, events = await finish(runtime, "planner-crew",
                                  "How does durable execution use event sourcing?")
    assert record.status == "completed", record.error
    assert "Event sourcing stores every change" in record.output
    assert "Durable execution persists each step" in record.output
    check_log(events)
    waves = [e.data for e in events if e.type == "WaveStarted"]
    assert [len(w["tasks"]) for w in waves] == [1, 2, 1]
    assert [t["subagent"] for t in waves[1]["tasks"]] == ["researcher", "researcher"]
    receipt = await runtime.receipt(record.id)
    assert set(receipt["by_subagent"]) == {"planner", "researcher", "writer"}
    assert receipt["by_subagent"]["researcher"]["tasks"] == 2
    assert receipt["why"] == "the workflow returned"


async def test_a_failed_task_is_visible_to_the_workflow(make_runtime, tmp_path: Path) -> None:
    from tests.integration.test_task_loop import Flaky

    directory = crew(tmp_path, '''
async def workflow(ctx):
    results = await ctx.wave([("echo", "a"), ("shaky", "b")])
    return " | ".join(f"{r.subagent}:{r.status}:{(r.error or {}).get('code')}" for r in results)
''', subagents=ECHO | SHAKY)
    runtime = await make_runtime(dirs=[directory],
                                 models={"broken": Flaky(100, retryable=False)})
    record, _events = await finish(runtime, "flow")
    assert record.status == "completed"
    assert record.output == "echo:completed:None | shaky:failed:provider_error"


async def test_now_uuid_and_log_are_recorded_once(make_runtime, tmp_path: Path) -> None:
    directory = crew(tmp_path, '''
async def workflow(ctx):
    started = ctx.now()
    token = ctx.uuid()
    ctx.log("begin", token=token)
    first = await ctx.task("echo", token)
    ctx.log("after first")
    second = await ctx.task("echo", started.isoformat())
    return f"{token} {started.isoformat()} {ctx.uuid() == ctx.uuid()}"
''')
    runtime = await make_runtime(dirs=[directory])
    record, events = await finish(runtime, "flow")
    run_events = [e for e in events if e.stream == "run"]
    values = [e.data for e in run_events if e.type == "ValueRecorded"]
    assert [v["kind"] for v in values] == ["now", "uuid", "uuid", "uuid"]
    assert record.output == f"{values[1]['value']} {values[0]['value']} False"
    assert [e.data["message"] for e in run_events if e.type == "WorkflowLogged"] == [
        "begin", "after first"]
    check_log(events)


async def test_changing_a_wave_in_flight_is_a_non_determinism_error(make_runtime,
                                                                    tmp_path: Path) -> None:
    directory = crew(tmp_path, '''
async def workflow(ctx):
    await ctx.task("echo", "one")
    await ctx.sleep(0.5)
    return "done"
''')
    runtime = await make_runtime(dirs=[directory])
    pinned_id = await runtime.start_run("flow", "go")
    upgraded_id = await runtime.start_run("flow", "go")
    for _ in range(200):
        waiting = [("TimerStarted" in types(await runtime.events(run_id), "run"))
                   for run_id in (pinned_id, upgraded_id)]
        if all(waiting):
            break
        await asyncio.sleep(0.05)
    await runtime.stop()
    # a deploy changes the code while the runs wait on their timers
    (directory / "workflow.py").write_text('''
async def workflow(ctx):
    await ctx.task("echo", "two")
    await ctx.sleep(0.5)
    return "done"
''')
    changed = await make_runtime(dirs=[directory], workers=False)
    # one run is moved to the new code explicitly; the other stays on its own version
    moved = await changed.upgrade_run(upgraded_id, requested_by="test")
    assert moved["upgraded"] is True
    await changed.stop()
    worker = await make_runtime(dirs=[directory])
    record = await worker.wait_for_run(upgraded_id, timeout_s=30)
    assert (record.status, record.stop_reason) == ("failed", "error")
    assert record.error["code"] == "non_determinism"
    message = record.error["message"]
    assert 'wave 1, task 0: input was "one" when recorded' in message
    assert "two" in message and "(workflow.py:3)" in message
    assert f"upgraded from version {moved['from_version'][:12]} to {moved['version'][:12]}" \
        in message
    pinned = await worker.wait_for_run(pinned_id, timeout_s=30)
    assert (pinned.status, pinned.output) == ("completed", "done")
    assert "AgentVersionUpgraded" not in types(await worker.events(pinned_id), "run")


async def test_the_durable_timer_fires_once(make_runtime, tmp_path: Path) -> None:
    directory = crew(tmp_path, '''
async def workflow(ctx):
    before = ctx.now()
    await ctx.sleep(0.6)
    after = ctx.now()
    return str((after - before).total_seconds() >= 0.6)
''')
    runtime = await make_runtime(dirs=[directory])
    record, events = await finish(runtime, "flow")
    assert record.output == "True"
    run_types = types(events, "run")
    assert run_types.count("TimerStarted") == 1 and run_types.count("TimerFired") == 1


async def test_max_waves_and_run_budget_stop_the_run(make_runtime, tmp_path: Path) -> None:
    directory = crew(tmp_path, '''
async def workflow(ctx):
    for i in range(10):
        await ctx.task("echo", str(i))
    return "unreachable"
''', limits={"maxWaves": 3})
    runtime = await make_runtime(dirs=[directory])
    record, events = await finish(runtime, "flow")
    assert (record.status, record.stop_reason) == ("stopped", "max_waves")
    assert types(events, "run").count("WaveStarted") == 3

    budget = crew(tmp_path, '''
async def workflow(ctx):
    for i in range(10):
        await ctx.task("echo", str(i))
    return "unreachable"
''', name="spender", model="test/priced", limits={"maxBudgetUsd": 0.025})
    from toren.testing import ScriptedModel

    spender = await make_runtime(dirs=[budget], models={"priced": ScriptedModel(cost_usd=0.01)})
    record, events = await finish(spender, "spender")
    assert (record.status, record.stop_reason) == ("stopped", "budget_exhausted")
    # waves 1 and 2 spend 0.02; wave 3's call would pass 0.025, so the ledger refuses it, and
    # no wave starts after a refusal
    assert types(events, "run").count("WaveStarted") == 3
    assert "had no room" in record.error["message"]


async def test_a_wave_of_fifty_runs_each_task_once_across_two_workers(make_runtime,
                                                                      tmp_path: Path) -> None:
    directory = crew(tmp_path, '''
async def workflow(ctx):
    results = await ctx.wave([("echo", str(i)) for i in range(50)])
    return str(sum(1 for r in results if r.ok))
''')
    workers = [await make_runtime(dirs=[directory], concurrency=8) for _ in range(2)]
    record, events = await finish(workers[0], "flow", timeout=60)
    assert record.output == "50"
    check_log(events)
    started = [e.stream for e in events if e.type == "TaskStarted"]
    assert len(started) == len(set(started)) == 50
    assert sum(1 for e in events if e.type == "ModelCallCompleted") == 50
