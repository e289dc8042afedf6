"""``output:`` (issue 38 §2): the JSON Schema a final answer must match, as agent.yaml, a
subagent or a schema file declares it (``toren.agents.loader``), and how an answer is judged
against it (``toren.core.output``, ``toren.core.decisions.judge_output``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from toren.agents import load_agent
from toren.core import events as ev
from toren.core.decisions import CheckOutput, Finish, judge_output, next_task_action
from toren.core.fold import TaskState, apply_task_event
from toren.core.limits import Limits
from toren.core.messages import Message
from toren.core.output import OutputSchema
from toren.errors import AgentDefinitionError
from toren.testing import write_agent_dir

PLAN = {"type": "object", "required": ["topics"], "additionalProperties": False,
        "properties": {"topics": {"type": "array", "items": {"type": "string"},
                                  "minItems": 1}}}


def test_inline_output_is_loaded_and_shown(tmp_path: Path) -> None:
    agent = load_agent(write_agent_dir(tmp_path, "planner", output=PLAN))
    assert agent.output is not None
    assert agent.output.schema == PLAN and agent.output.source == "agent.yaml:output"
    assert agent.to_json()["output"] == {"source": "agent.yaml:output", "schema": PLAN}
    assert load_agent(write_agent_dir(tmp_path, "plain")).output is None


def test_a_schema_file_is_read_from_the_agent_directory_and_versioned(tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "filed", output="schemas/plan.json")
    (directory / "schemas").mkdir()
    (directory / "schemas/plan.json").write_text(json.dumps(PLAN))
    agent = load_agent(directory)
    assert agent.output is not None and agent.output.schema == PLAN
    assert agent.output.source == "schemas/plan.json"
    assert agent.version is not None and "schemas/plan.json" in agent.version.files
    (directory / "schemas/plan.json").write_text(json.dumps({**PLAN, "title": "Plan"}))
    changed = load_agent(directory).version
    assert changed is not None and changed.hash != agent.version.hash
    (directory / "schemas/plan.yaml").write_text("type: object\nproperties:\n  n:\n"
                                                  "    type: integer\n")
    (directory / "agent.yaml").write_text("model: toren/scripted\noutput: schemas/plan.yaml\n")
    yaml_agent = load_agent(directory)
    assert yaml_agent.output is not None and yaml_agent.output.schema["properties"] == {
        "n": {"type": "integer"}}


def test_a_subagent_declares_its_own_output(tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "crew", subagents={
        "planner": "---\noutput:\n  type: object\n  properties:\n    topics:\n"
                   "      type: array\n---\nPlan.\n",
        "writer": "---\noutput: schemas/answer.json\n---\nWrite.\n"})
    (directory / "schemas").mkdir()
    (directory / "schemas/answer.json").write_text('{"type": "object"}')
    agent = load_agent(directory)
    planner, writer = agent.subagents["planner"], agent.subagents["writer"]
    assert planner.output is not None and planner.output.source == \
        "subagents/planner.md:output"
    assert writer.output is not None and writer.output.source == "schemas/answer.json"
    assert agent.version is not None and "schemas/answer.json" in agent.version.files
    assert agent.output is None


@pytest.mark.parametrize(("output", "match"), [
    ({"type": "objekt"}, r"agent.yaml:3: output.type: not a valid JSON Schema: 'objekt' is "
                         r"not valid"),
    ({"type": "object", "properties": {"n": {"minimum": "zero"}}},
     r"agent.yaml:6: output.properties.n.minimum: not a valid JSON Schema"),
    ({"type": "array", "items": {"type": "string"}},
     r"agent.yaml:3: output.type: the output schema's root must be an object"),
    ({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}},
     r"output.properties.a.\$ref: 'https://example.com/a.json' points outside the schema"),
    ("../outside.json", r"agent.yaml:2: output: '../outside.json' is not a file inside"),
    ("missing.json", r"agent.yaml:2: output: the schema file missing.json is missing"),
    (3, r"agent.yaml:2: output: 3 is not valid"),
])
def test_a_bad_output_is_a_load_error_naming_file_line_and_field(
        tmp_path: Path, output: object, match: str) -> None:
    with pytest.raises(AgentDefinitionError, match=match):
        load_agent(write_agent_dir(tmp_path, "bad", output=output))


def test_a_bad_schema_file_names_the_file(tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "bad", output="plan.json")
    (directory / "plan.json").write_text('{\n  "type": "object",\n  "properties": [\n')
    with pytest.raises(AgentDefinitionError, match=r"plan.json:4: not JSON"):
        load_agent(directory)
    (directory / "plan.json").write_text('{"type": "object", "required": "topics"}')
    with pytest.raises(AgentDefinitionError,
                       match=r"plan.json: required: not a valid JSON Schema"):
        load_agent(directory)
    (directory / "plan.json").unlink()
    os.mkfifo(directory / "plan.json")  # never read: a FIFO would hang the loader
    with pytest.raises(AgentDefinitionError,
                       match=r"plan.json: is a FIFO \(named pipe\), not a regular file"):
        load_agent(directory)


def state_with(*texts: str) -> TaskState:
    state = TaskState()
    state.messages.append(Message(role="user", text="plan it"))
    for step, text in enumerate(texts, start=1):
        state.steps = step
        state.messages.append(Message(role="assistant", text=text))
    return state


SCHEMA = OutputSchema(PLAN, "agent.yaml:output")


def test_an_answer_that_matches_finishes_with_the_parsed_value() -> None:
    state = state_with('```json\n{"topics": ["postgres"]}\n```')
    action = next_task_action(state, Limits(), 1, SCHEMA)
    assert action == CheckOutput(step=1, text='```json\n{"topics": ["postgres"]}\n```')
    assert isinstance(action, CheckOutput)
    assert judge_output(state, SCHEMA, action, 1) == Finish("end_turn",
                                                            output={"topics": ["postgres"]})
    assert next_task_action(state, Limits(), 1) == Finish(
        "end_turn", output='```json\n{"topics": ["postgres"]}\n```')


def test_an_invalid_answer_gets_two_repair_turns_then_fails_with_invalid_output() -> None:
    state = state_with("Here are the topics: postgres")
    rejected = judge_output(state, SCHEMA, CheckOutput(1, state.messages[-1].text), 1)
    assert isinstance(rejected, ev.OutputRejected)
    assert (rejected.attempt, rejected.where, rejected.schema_path) == (1, "$", "")
    assert "not JSON" in rejected.problem and "repair 1 of 2" in rejected.text
    apply_task_event(state, rejected)
    assert state.messages[-1] == Message(role="user", text=rejected.text)
    assert next_task_action(state, Limits(), 1, SCHEMA).__class__.__name__ == "CallModel"

    state.steps = 2
    state.messages.append(Message(role="assistant", text='{"topics": [3]}'))
    second = judge_output(state, SCHEMA, CheckOutput(2, '{"topics": [3]}'), 1)
    assert isinstance(second, ev.OutputRejected)
    assert (second.attempt, second.where, second.schema_path) == (
        2, "$.topics[0]", "properties/topics/items/type")
    assert "3 is not of type 'string'" in second.text
    apply_task_event(state, second)

    failed = judge_output(state, SCHEMA, CheckOutput(3, '{"topics": []}'), 1)
    assert isinstance(failed, Finish) and failed.stop_reason == "error"
    assert failed.output == '{"topics": []}'
    assert failed.error is not None and failed.error["code"] == "invalid_output"
    assert failed.error["schema"] == "agent.yaml:output"
    assert failed.error["schema_path"] == "properties/topics/minItems"
    assert "does not match the output schema (agent.yaml:output) after 2 repair turn(s): at " \
           "$.topics" in failed.error["message"]


def test_a_session_turn_is_not_checked() -> None:
    state = state_with("hello")
    state.session = True
    assert next_task_action(state, Limits(), 1, None).__class__.__name__ == "EndTurn"


def test_a_schema_file_linked_from_outside_the_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret.json").write_text('{"type": "object"}')
    directory = write_agent_dir(tmp_path, "linked", output="plan.json")
    (directory / "plan.json").symlink_to(tmp_path / "secret.json")
    with pytest.raises(AgentDefinitionError, match=r"plan.json: resolves to .*secret.json, "
                                                   r"outside the agent directory"):
        load_agent(directory)
    (directory / "agent.yaml").write_text("model: toren/scripted\noutput: plan.json\n"
                                          "allowOutsideFiles: true\n")
    agent = load_agent(directory)
    assert agent.output is not None and agent.output.schema == {"type": "object"}
