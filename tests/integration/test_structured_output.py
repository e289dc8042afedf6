"""Structured output through the real task loop and Postgres (issue 38 §2): a final answer that
matches ``output:`` is the run's JSON output; an invalid one gets repair turns, recorded in
the log, then fails with ``invalid_output``; a workflow's ``ctx.task`` returns the object."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tests.durable import check_log, types
from toren.seams.model import ModelRequest, ModelResponse, ToolCall
from toren.testing import ScriptedModel, write_agent_dir

EXAMPLES = Path(__file__).resolve().parents[2] / "contrib" / "examples"
PLAN = {"type": "object", "required": ["topics"], "additionalProperties": False,
        "properties": {"topics": {"type": "array", "items": {"type": "string"},
                                  "minItems": 1}}}
TOOLS = '''
from toren import tool

@tool(idempotent=True)
def suggest(question: str) -> dict:
    """Suggest topics for a question."""
    return {"topics": ["postgres", question]}
'''


class Recording(ScriptedModel):
    """A scripted model that keeps every request it was asked."""

    def __init__(self, *answers: str | ModelResponse) -> None:
        super().__init__(script=[a if isinstance(a, ModelResponse) else ModelResponse(text=a)
                                 for a in answers])
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return await super().complete(request)


async def finish(runtime: Any, agent: str, text: str = "plan durable execution"):
    run_id = await runtime.start_run(agent, text)
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    return record, await runtime.events(run_id)


async def test_the_answer_is_the_runs_json_output_after_tool_calls(make_runtime,
                                                                   tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "planner", tools_py=TOOLS, output=PLAN)
    runtime = await make_runtime(dirs=[directory])
    record, events = await finish(runtime, "planner", "sql")
    assert record.status == "completed", record.error
    assert record.output == {"topics": ["postgres", "sql"]}  # an object, not its text
    check_log(events)
    finished = next(e.data for e in events if e.type == "TaskFinished")
    assert finished["output"] == {"topics": ["postgres", "sql"]}
    run_finished = next(e.data for e in events if e.type == "RunFinished")
    assert run_finished["output"] == {"topics": ["postgres", "sql"]}
    assert "OutputRejected" not in types(events)
    assert (await runtime.receipt(record.id))["run"]["output"] == {"topics": ["postgres", "sql"]}


async def test_invalid_answers_get_repair_turns_the_model_reads(make_runtime,
                                                                tmp_path: Path) -> None:
    model = Recording("Sure! The topics are postgres and sql.", '{"topics": [7]}',
                      '```json\n{"topics": ["postgres"]}\n```')
    directory = write_agent_dir(tmp_path, "planner", model="test/plan", output=PLAN)
    runtime = await make_runtime(dirs=[directory], models={"plan": model})
    record, events = await finish(runtime, "planner")
    assert record.status == "completed", record.error
    assert record.output == {"topics": ["postgres"]}
    check_log(events)
    task = types(events)
    assert task.count("ModelCallCompleted") == 3 and task.count("OutputRejected") == 2
    rejected = [e.data for e in events if e.type == "OutputRejected"]
    assert [(r["step"], r["attempt"], r["where"], r["schema_path"]) for r in rejected] == [
        (1, 1, "$", ""), (2, 2, "$.topics[0]", "properties/topics/items/type")]
    assert all(r["schema_source"] == "agent.yaml:output" for r in rejected)
    # each call asked for the schema; each repair call saw what failed, as a user turn
    assert [r.output_schema for r in model.requests] == [PLAN] * 3
    assert model.requests[1].messages[-1].role == "user"
    assert model.requests[1].messages[-1].text == rejected[0]["text"]
    assert "not JSON" in rejected[0]["text"] and "repair 1 of 2" in rejected[0]["text"]
    assert "7 is not of type 'string'" in model.requests[2].messages[-1].text


async def test_repairs_are_bounded_then_the_run_fails_with_invalid_output(
        make_runtime, tmp_path: Path) -> None:
    model = Recording('{"topics": []}')
    directory = write_agent_dir(tmp_path, "planner", model="test/plan", output=PLAN)
    runtime = await make_runtime(dirs=[directory], models={"plan": model})
    record, events = await finish(runtime, "planner")
    assert (record.status, record.stop_reason) == ("failed", "error")
    assert model.calls == 3  # the answer and two repair turns
    assert record.error is not None and record.error["code"] == "invalid_output"
    assert record.error["schema"] == "agent.yaml:output"
    assert record.error["schema_path"] == "properties/topics/minItems"
    assert "does not match the output schema (agent.yaml:output) after 2 repair turn(s)" in \
        record.error["message"]
    assert record.output == '{"topics": []}'  # the last answer, as text, for a look
    check_log(events)


async def test_a_tool_call_still_comes_before_the_answer(make_runtime, tmp_path: Path) -> None:
    model = Recording(ModelResponse(text="", tool_calls=(
        ToolCall("c1", "suggest", {"question": "sql"}),), stop_reason="tool_use"),
        '{"topics": ["sql"]}')
    directory = write_agent_dir(tmp_path, "planner", model="test/plan", tools_py=TOOLS,
                                output=PLAN)
    runtime = await make_runtime(dirs=[directory], models={"plan": model})
    record, _events = await finish(runtime, "planner")
    assert record.output == {"topics": ["sql"]}
    assert model.requests[0].tools and model.requests[0].output_schema == PLAN


WORKFLOW = '''
async def workflow(ctx):
    plan = await ctx.task("planner", ctx.input)
    assert isinstance(plan.output, dict), plan.output
    notes = await ctx.wave([("echo", topic) for topic in plan.output["topics"]])
    return {"topics": plan.output["topics"], "notes": [n.output for n in notes]}
'''


async def test_a_workflow_task_returns_the_parsed_object(make_runtime, tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "flow", tools_py=TOOLS, subagents={
        "planner": "---\ntools: [suggest]\noutput:\n  type: object\n  required: [topics]\n"
                   "  properties:\n    topics:\n      type: array\n      items:\n"
                   "        type: string\n---\nPlan.\n",
        "echo": "---\ntools: []\n---\nRepeat the input.\n"})
    (directory / "workflow.py").write_text(WORKFLOW)
    runtime = await make_runtime(dirs=[directory])
    record, events = await finish(runtime, "flow", "sql")
    assert record.status == "completed", record.error
    assert record.output == {"topics": ["postgres", "sql"],
                             "notes": ["You said: postgres", "You said: sql"]}
    absorbed = [e.data for e in events if e.type == "TaskAbsorbed"]
    assert absorbed[0]["output"] == {"topics": ["postgres", "sql"]}
    check_log(events)


async def test_the_planner_crew_plans_with_structured_output(make_runtime,
                                                             tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "planner-crew", tmp_path / "planner-crew")
    runtime = await make_runtime(dirs=[tmp_path / "planner-crew"])
    record, events = await finish(runtime, "planner-crew",
                                  "How does durable execution use event sourcing?")
    assert record.status == "completed", record.error
    plan = next(e.data for e in events
                if e.type == "TaskAbsorbed" and e.data["task_id"] == "w1-0")
    assert plan["output"] == {"topics": ["event sourcing", "durable execution"]}
    wave = next(e.data for e in events if e.type == "WaveStarted" and e.data["wave"] == 2)
    assert [t["input"] for t in wave["tasks"]] == ["event sourcing", "durable execution"]
    assert runtime.agents["planner-crew"].subagents["planner"].output is not None


SAID = {"type": "object", "required": ["said"], "properties": {"said": {"type": "string"}}}
PER_TASK = '''
SAID = {"type": "object", "required": ["said"], "properties": {"said": {"type": "string"}}}

async def workflow(ctx):
    one = await ctx.task("echo", "alpha", output=SAID)
    wave = await ctx.wave([{"subagent": "echo", "input": "beta", "output": SAID},
                           ("echo", "gamma")])
    return {"one": one.output, "wave": [r.output for r in wave]}
'''


async def test_a_workflow_gives_one_task_its_own_output_schema(make_runtime,
                                                               tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "flow", subagents={
        "echo": "---\ntools: []\n---\nRepeat the input.\n"})
    (directory / "workflow.py").write_text(PER_TASK)
    runtime = await make_runtime(dirs=[directory])
    record, events = await finish(runtime, "flow")
    assert record.status == "completed", record.error
    assert record.output == {"one": {"said": "alpha"},
                             "wave": [{"said": "beta"}, "You said: gamma"]}
    started = {e.stream: e.data for e in events if e.type == "TaskStarted"}
    assert started["task:w1-0"]["output"] == SAID and "output" not in started["task:w2-1"]
    scheduled = [e.data for e in events if e.type == "TaskScheduled"]
    assert [s.get("output") for s in scheduled] == [SAID, SAID, None]
    check_log(events)


async def test_a_bad_per_task_schema_fails_the_workflow_naming_it(make_runtime,
                                                                 tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "flow", subagents={
        "echo": "---\ntools: []\n---\nRepeat the input.\n"})
    (directory / "workflow.py").write_text(
        'async def workflow(ctx):\n'
        '    return (await ctx.task("echo", "x", output={"type": "list"})).output\n')
    runtime = await make_runtime(dirs=[directory])
    record, _events = await finish(runtime, "flow")
    assert (record.status, record.error["code"]) == ("failed", "workflow_error")
    assert "wave 1, task 0 (echo): its output schema is not usable: type: not a valid JSON " \
           "Schema" in record.error["message"]
    assert "(workflow.py:2)" in record.error["message"]
