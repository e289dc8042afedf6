"""Fork and replay through the host API on real Postgres: a fork's log starts as a copy of its
source's prefix, copied steps make no model call and cost nothing, the fork goes on live with
its model or prompt, the source run is never written, and diffs say where two runs diverge."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.durable import check_catalog
from toren.agents import schema_name_for
from toren.errors import ForkRefused, InvalidForkOverride, InvalidForkStep, RunNotFound
from toren.seams.model import ModelRequest, ModelResponse
from toren.testing import ScriptedModel, write_agent_dir

TOOLS = '''
CALLS = []

def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: first
        b: second
    """
    CALLS.append((a, b))
    return a + b
'''
#: Three tool steps, then the answer: four steps in all.
PLAN = json.dumps({"toolCalls": [{"name": "add", "arguments": {"a": 1, "b": 2}},
                                 {"name": "add", "arguments": {"a": 3, "b": 4}},
                                 {"name": "add", "arguments": {"a": 5, "b": 6}}]})
STEP_COST = 0.01


def echo_system(request: ModelRequest) -> ModelResponse:
    """Answers at once with the system prompt it was given."""
    return ModelResponse(text=f"system prompt: {request.system.strip()}")


@pytest.fixture
async def calc(make_runtime, tmp_path: Path):
    """A runtime serving ``calc`` on a paid scripted model (``test/paid``) and an alternative
    model (``test/alt``) that answers with its system prompt; the models count their calls."""
    models = {"paid": ScriptedModel(cost_usd=STEP_COST),
              "alt": ScriptedModel(script=echo_system, cost_usd=0.5)}
    directory = write_agent_dir(tmp_path, "calc", tools_py=TOOLS, model="test/paid")
    runtime = await make_runtime(dirs=[directory], models=models)
    return runtime, models


async def finished(runtime, run_id: str):
    record = await runtime.wait_for_run(run_id, timeout_s=60)
    return record, await runtime.events(run_id)


async def source_run(runtime):
    run_id = await runtime.start_run("calc", PLAN)
    record, events = await finished(runtime, run_id)
    assert record.status == "completed", record.error
    return record, events


def stored_log(database_url: str, agent: str, run_id: str) -> list[tuple[Any, ...]]:
    """The run's row and every event exactly as stored (data as its stored text)."""
    schema = schema_name_for(agent)
    with psycopg.connect(database_url) as conn:
        row = conn.execute(f'SELECT to_jsonb(r)::text FROM "{schema}".runs r WHERE id = %s',
                           (run_id,)).fetchall()
        events = conn.execute(
            f'SELECT stream, seq, type, data::text, created_at FROM "{schema}".events '
            "WHERE run_id = %s ORDER BY stream, seq", (run_id,)).fetchall()
    return row + events


def calls_of(receipt: dict[str, Any]) -> list[dict[str, Any]]:
    return [call for task in receipt["tasks"] for call in task["model_calls"]]


async def test_a_fork_at_a_middle_step_copies_the_prefix_free_and_goes_on_live(
        calc, database_url: str) -> None:
    runtime, models = calc
    source, source_events = await source_run(runtime)
    before = stored_log(database_url, "calc", source.id)
    calls_before = models["paid"].calls
    assert calls_before == 4

    fork = await runtime.fork_run(source.id, 2)
    assert fork.status == "queued" and fork.id != source.id and fork.input == source.input
    record, events = await finished(runtime, fork.id)

    assert record.status == "completed" and record.output == source.output
    assert models["paid"].calls - calls_before == 2, "steps 1 and 2 were copied, not called"
    check_catalog(events)
    main = [e for e in events if e.stream == "task:main"]
    marker = next(e for e in main if e.type == "TaskForked")
    assert marker.data == {"source_run_id": source.id, "source_task_id": "main", "at_step": 2,
                           "copied_events": marker.seq - 1}
    source_main = [e for e in source_events if e.stream == "task:main"
                   and e.type not in ("BudgetReserved", "BudgetSettled", "TaskCheckpoint")]
    copied = main[:marker.seq - 1]
    assert [(e.type, e.data) for e in copied] == [(e.type, e.data)
                                                  for e in source_main[:len(copied)]]
    run_types = [e.type for e in events if e.stream == "run"]
    assert run_types[:3] == ["RunCreated", "RunForked", "TaskScheduled"]

    receipt = await runtime.receipt(fork.id)
    assert receipt["fork"]["source_run_id"] == source.id
    assert receipt["fork"]["at_step"] == 2 and receipt["fork"]["unit"] == "step"
    calls = calls_of(receipt)
    assert [(c["step"], c["copied"], c["cost_usd"]) for c in calls] == [
        (1, True, 0.0), (2, True, 0.0), (3, False, STEP_COST), (4, False, STEP_COST)]
    assert [c["source_cost_usd"] for c in calls[:2]] == [STEP_COST, STEP_COST]
    assert receipt["totals"]["cost_usd"] == pytest.approx(2 * STEP_COST)
    assert receipt["totals"]["copied_calls"] == 2
    tools = receipt["tasks"][0]["tool_calls"]
    assert [t["copied"] for t in tools] == [True, True, False]

    # the source run was only read: its row and log are byte for byte what they were
    assert stored_log(database_url, "calc", source.id) == before
    # the same model and prompt from step 2 on: the fork replays the run exactly
    diff = await runtime.diff_runs(source.id, fork.id)
    assert diff["identical"] and diff["first_difference"] is None


async def test_a_fork_at_step_zero_calls_every_step_and_at_the_last_step_none(calc) -> None:
    runtime, models = calc
    source, _ = await source_run(runtime)
    calls = models["paid"].calls
    fresh, _ = await finished(runtime, (await runtime.fork_run(source.id, 0)).id)
    assert fresh.output == source.output and models["paid"].calls - calls == 4
    receipt = await runtime.receipt(fresh.id)
    assert receipt["totals"]["copied_calls"] == 0
    assert receipt["totals"]["cost_usd"] == pytest.approx(4 * STEP_COST)

    calls = models["paid"].calls
    whole, _ = await finished(runtime, (await runtime.fork_run(source.id, 4)).id)
    assert whole.status == "completed" and whole.output == source.output
    assert models["paid"].calls == calls, "a fork at the last step makes no model call"
    receipt = await runtime.receipt(whole.id)
    assert receipt["totals"]["copied_calls"] == 4 and receipt["totals"]["cost_usd"] == 0.0


async def test_a_fork_with_another_model_and_prompt_diverges_where_the_diff_says(calc) -> None:
    runtime, models = calc
    source, _ = await source_run(runtime)
    paid_calls = models["paid"].calls
    fork = await runtime.fork_run(source.id, 1, model="test/alt", prompt="Be brief.\n")
    record, events = await finished(runtime, fork.id)

    assert record.status == "completed"
    assert record.output == "system prompt: Be brief."
    assert models["paid"].calls == paid_calls and models["alt"].calls == 1
    marker = next(e for e in events if e.type == "TaskForked")
    assert marker.data["model"] == "test/alt" and marker.data["prompt_sha256"]
    receipt = await runtime.receipt(fork.id)
    assert receipt["prompts"][marker.data["prompt_sha256"]] == "Be brief.\n"
    assert [(c["model"], c["copied"]) for c in calls_of(receipt)] == [
        ("test/paid", True), ("test/alt", False)]
    assert receipt["tasks"][0]["model"] == "test/alt"
    assert receipt["totals"]["cost_usd"] == pytest.approx(0.5)

    diff = await runtime.diff_runs(source.id, fork.id)
    assert not diff["identical"]
    assert diff["first_difference"] == {"task_id": "main", "step": 2,
                                        "differs": "model_output"}
    steps = diff["tasks"][0]["steps"]
    assert [s["same"] for s in steps] == [True, False, False, False]
    assert steps[1]["b"]["text"] == "system prompt: Be brief."
    assert steps[1]["a"]["tool_calls"] == [{"name": "add", "arguments": {"a": 3, "b": 4}}]
    assert steps[2]["differs"] == "only_in_a"
    assert steps[0]["b"]["copied"] and not steps[0]["a"]["copied"]


async def test_a_fork_of_a_fork_copies_from_its_source_and_keeps_its_model(calc) -> None:
    runtime, models = calc
    source, _ = await source_run(runtime)
    first, _ = await finished(runtime, (await runtime.fork_run(source.id, 3,
                                                               model="test/alt")).id)
    assert first.output.startswith("system prompt: You are a test agent.")
    alt_calls = models["alt"].calls
    second, events = await finished(runtime, (await runtime.fork_run(first.id, 2)).id)

    assert second.output == first.output and models["alt"].calls == alt_calls + 1
    check_catalog(events)
    forked = next(e for e in events if e.type == "RunForked")
    assert forked.data["source_run_id"] == first.id and forked.data["model"] == "test/alt"
    markers = [e for e in events if e.type == "TaskForked"]
    assert len(markers) == 1, "the copy stops before the first fork's own marker"
    receipt = await runtime.receipt(second.id)
    assert [(c["step"], c["copied"], c["model"]) for c in calls_of(receipt)] == [
        (1, True, "test/paid"), (2, True, "test/paid"), (3, False, "test/alt")]
    # the first fork called the source's model at step 3; the second, forked at 2, calls its
    diff = await runtime.diff_runs(first.id, second.id)
    assert diff["first_difference"] == {"task_id": "main", "step": 3, "differs": "model_output"}
    assert [s["same"] for s in diff["tasks"][0]["steps"]] == [True, True, False, False]


async def test_bad_forks_get_clear_errors_and_write_nothing(make_runtime, calc, tmp_path,
                                                            database_url: str) -> None:
    runtime, _ = calc
    source, _ = await source_run(runtime)
    before = stored_log(database_url, "calc", source.id)
    with pytest.raises(InvalidForkStep, match="has 4 step"):
        await runtime.fork_run(source.id, 5)
    with pytest.raises(InvalidForkStep, match="whole number"):
        await runtime.fork_run(source.id, -1)
    with pytest.raises(RunNotFound):
        await runtime.fork_run("0b5c3c9e-0000-4000-8000-000000000000", 1)
    with pytest.raises(InvalidForkOverride, match="no-such"):
        await runtime.fork_run(source.id, 1, model="no-such/model")
    with pytest.raises(InvalidForkOverride, match="empty"):
        await runtime.fork_run(source.id, 1, prompt="  \n")
    with pytest.raises(RunNotFound):
        await runtime.diff_runs(source.id, "0b5c3c9e-0000-4000-8000-000000000000")
    session = await runtime.start_session("calc")
    with pytest.raises(ForkRefused, match="session"):
        await runtime.fork_run(session, 0)
    # a run no worker has taken up yet has no complete step to fork at
    idle = await make_runtime(dirs=[write_agent_dir(tmp_path, "idle", model="test/paid")],
                              workers=False, models={"paid": ScriptedModel()})
    queued = await idle.start_run("idle", PLAN)
    with pytest.raises(ForkRefused, match="not complete"):
        await idle.fork_run(queued, 0)
    assert stored_log(database_url, "calc", source.id) == before
    assert len(await runtime.list_runs(agent="calc", kind="run")) == 1


WORKFLOW = '''
async def workflow(ctx):
    first = await ctx.task("echo", "one")
    ctx.log("after wave 1")
    second = await ctx.wave([("echo", first.output), ("echo", "two")])
    third = await ctx.task("echo", " + ".join(r.output for r in second))
    return third.output
'''
ECHO = {"echo": "---\ndescription: Repeats its input.\ntools: []\n---\nRepeat the input.\n"}


async def test_a_workflow_forks_at_a_wave_boundary(make_runtime, tmp_path: Path) -> None:
    model = ScriptedModel(cost_usd=STEP_COST)
    directory = write_agent_dir(tmp_path, "flow", subagents=ECHO, model="test/paid")
    (directory / "workflow.py").write_text(WORKFLOW)
    runtime = await make_runtime(dirs=[directory], models={"paid": model})
    source, _ = await finished(runtime, await runtime.start_run("flow", "go"))
    assert source.status == "completed", source.error
    assert model.calls == 4

    fork, events = await finished(runtime, (await runtime.fork_run(source.id, 1)).id)
    assert fork.status == "completed" and fork.output == source.output
    assert model.calls == 4 + 3, "wave 1 was copied; waves 2 and 3 ran live"
    check_catalog(events)
    run_types = [e.type for e in events if e.stream == "run"]
    assert run_types[:2] == ["RunCreated", "RunForked"]
    assert run_types.count("WorkflowLogged") == 1, "the log line was copied, not logged again"
    receipt = await runtime.receipt(fork.id)
    assert receipt["fork"]["unit"] == "wave"
    copied = {t["task_id"]: t["totals"]["copied_calls"] for t in receipt["tasks"]}
    assert copied == {"w1-0": 1, "w2-0": 0, "w2-1": 0, "w3-0": 0}
    assert receipt["totals"]["cost_usd"] == pytest.approx(3 * STEP_COST)
    assert (await runtime.diff_runs(source.id, fork.id))["identical"]

    whole, _ = await finished(runtime, (await runtime.fork_run(source.id, 3)).id)
    assert whole.output == source.output and model.calls == 7
    with pytest.raises(InvalidForkStep, match="has 3 wave"):
        await runtime.fork_run(source.id, 4)


async def test_a_workflow_fork_runs_its_new_tasks_on_the_forks_model(make_runtime,
                                                                    tmp_path: Path) -> None:
    models = {"paid": ScriptedModel(), "alt": ScriptedModel(script=echo_system)}
    directory = write_agent_dir(tmp_path, "flow", subagents=ECHO, model="test/paid")
    (directory / "workflow.py").write_text(WORKFLOW)
    runtime = await make_runtime(dirs=[directory], models=models)
    source, _ = await finished(runtime, await runtime.start_run("flow", "go"))
    fork, events = await finished(runtime, (await runtime.fork_run(
        source.id, 2, model="test/alt", prompt="Shout.")).id)
    assert fork.status == "completed", fork.error
    assert fork.output == "system prompt: Shout."
    assert models["alt"].calls == 1
    new_task = [e for e in events if e.stream == "task:w3-0"]
    assert [e.type for e in new_task[:2]] == ["TaskForked", "TaskStarted"]
    assert new_task[1].data["model"] == "test/alt"
    diff = await runtime.diff_runs(source.id, fork.id)
    assert diff["first_difference"] == {"task_id": "w3-0", "step": 1,
                                        "differs": "model_output"}


async def test_a_fork_is_running_from_its_first_live_call(make_runtime, tmp_path: Path,
                                                          database_url: str) -> None:
    seen: list[str] = []

    def probe(request: ModelRequest) -> ModelResponse:
        # the run's row as the call is made (committed with its ModelCallStarted)
        with psycopg.connect(database_url) as conn:
            row = conn.execute('SELECT status FROM "agent_calc".runs '
                               "ORDER BY created_at DESC LIMIT 1").fetchone()
        seen.append(row[0] if row else "")
        return ModelResponse(text="probed")

    models = {"paid": ScriptedModel(), "probe": ScriptedModel(script=probe)}
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "calc", tools_py=TOOLS,
                                                       model="test/paid")], models=models)
    source, _ = await source_run(runtime)
    fork, _ = await finished(runtime, (await runtime.fork_run(source.id, 2,
                                                              model="test/probe")).id)
    assert fork.output == "probed" and seen == ["running"]


async def test_a_running_run_forks_at_a_completed_step_only(make_runtime,
                                                            tmp_path: Path) -> None:
    """A run waiting for a person to approve step 1's tool call has not completed step 1:
    forking there is refused, at step 0 it is not; once step 2 has begun, step 1 can be."""
    directory = write_agent_dir(tmp_path, "gated", tools_py=TOOLS, model="test/paid",
                                approvals={"add": {}})
    runtime = await make_runtime(dirs=[directory], models={"paid": ScriptedModel()})
    run_id = await runtime.start_run("gated", PLAN)

    async def parked(decided: str | None = None) -> list[Any]:
        """The pending approval once the run waits for one (other than ``decided``)."""
        while True:
            if (await runtime.get_run(run_id)).status == "awaiting_approval":
                pending = await runtime.list_approvals(run_id=run_id, status="pending")
                if pending and pending[0].id != decided:
                    return pending
            await asyncio.sleep(0.05)

    (approval,) = await asyncio.wait_for(parked(), 30)
    with pytest.raises(ForkRefused, match=r"step 1 .* is not complete yet"):
        await runtime.fork_run(run_id, 1)
    early = await runtime.fork_run(run_id, 0)
    assert early.status == "queued"

    await runtime.decide_approval(approval.id, "approved", decided_by="tester")
    (approval,) = await asyncio.wait_for(parked(approval.id), 30)  # step 2's call waits
    forked = await runtime.fork_run(run_id, 1)
    events = await runtime.events(forked.id)
    assert [e.data["outcome"] for e in events if e.type == "ApprovalDecided"] == ["approved"]
    assert (await runtime.get_run(run_id)).status == "awaiting_approval"
