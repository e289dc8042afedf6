"""The offline model ``toren/scripted``: deterministic tool calls, then an answer."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Literal

import pytest

from toren.errors import ConfigError
from toren.seams.model import Message, ModelRequest, ModelResponse, ToolCall, ToolSpec, Usage
from toren.seams.plugins import PluginHost
from toren.seams.tools import tool_from_function
from toren.testing import ScriptedModel, ScriptedProvider, respond_with_tools


def lookup_topic(topic: str, depth: int = 2) -> str:
    """Look a topic up."""
    return topic


def rate(score: float, strict: bool, unit: Literal["pct", "abs"], tags: list[str],
         extra: dict, note: str | None) -> str:
    """Rate something."""
    return ""


TOOLS = (tool_from_function(lookup_topic).spec, tool_from_function(rate).spec)


def request(*messages: Message, tools: tuple[ToolSpec, ...] = TOOLS) -> ModelRequest:
    return ModelRequest(model="toren/scripted", system="You are a test.", messages=messages,
                        tools=tools)


async def run_turn(model: ScriptedModel, text: str, history: tuple[Message, ...] = (),
                   tools: tuple[ToolSpec, ...] = TOOLS) -> tuple[list[ModelResponse],
                                                               tuple[Message, ...]]:
    """Drive the model like a task loop: execute each tool call, feed results back."""
    messages = (*history, Message("user", text))
    responses = []
    for _ in range(10):
        response = await model.complete(request(*messages, tools=tools))
        responses.append(response)
        messages += (Message("assistant", response.text, response.tool_calls),)
        if not response.tool_calls:
            return responses, messages
        for call in response.tool_calls:
            messages += (Message("tool", f"result of {call.name}", tool_call_id=call.id),)
    pytest.fail("the scripted model never answered")


async def test_calls_each_tool_once_in_order_then_answers() -> None:
    model = ScriptedModel()

    responses, _ = await run_turn(model, "event sourcing")
    calls = [call for response in responses for call in response.tool_calls]
    assert [call.name for call in calls] == ["lookup_topic", "rate"]
    assert [response.stop_reason for response in responses] == ["tool_use", "tool_use",
                                                                 "end_turn"]
    assert model.calls == 3

    # Arguments satisfy each schema, with the user's text in required string fields.
    assert calls[0].arguments == {"topic": "event sourcing"}
    assert calls[1].arguments == {"score": 1.0, "strict": True, "unit": "pct", "tags": [],
                                  "extra": {}, "note": "event sourcing"}
    assert len({call.id for call in calls}) == 2

    answer = responses[-1].text
    assert "event sourcing" in answer
    assert "- lookup_topic: result of lookup_topic" in answer
    assert "- rate: result of rate" in answer


async def test_each_user_turn_calls_the_tools_again() -> None:
    model = ScriptedModel()
    _, history = await run_turn(model, "first")

    responses, _ = await run_turn(model, "second", history)
    assert [c.name for r in responses for c in r.tool_calls] == ["lookup_topic", "rate"]
    assert responses[0].tool_calls[0].arguments == {"topic": "second"}
    assert "'second'" in responses[-1].text


async def test_without_tools_it_echoes() -> None:
    model = ScriptedModel()

    responses, _ = await run_turn(model, "hello there", tools=())
    assert len(responses) == 1
    assert responses[0].text == "You said: hello there"
    assert responses[0].stop_reason == "end_turn"


async def test_tool_errors_are_marked_in_the_answer() -> None:
    call = ToolCall("call_1_0", "lookup_topic", {"topic": "x"})
    messages = (Message("user", "x"), Message("assistant", "", (call,)),
                Message("tool", "boom", tool_call_id="call_1_0", is_error=True))

    response = respond_with_tools(request(*messages, tools=TOOLS[:1]))
    assert "- lookup_topic (error): boom" in response.text


async def test_responses_carry_model_id_cost_and_estimated_usage() -> None:
    model = ScriptedModel("toren/scripted-cheap", cost_usd=0.25)

    response = await model.complete(request(Message("user", "x" * 400)))
    assert response.model == "toren/scripted-cheap"
    assert response.cost_usd == 0.25
    assert response.usage.input_tokens >= 100
    assert response.usage.output_tokens >= 1


async def test_script_list_is_returned_in_turn_and_the_last_repeats() -> None:
    script = [
        ModelResponse("one", (ToolCall("a", "lookup_topic", {"topic": "t"}),), "tool_use"),
        ModelResponse("two", usage=Usage(input_tokens=7, output_tokens=3)),
    ]
    model = ScriptedModel(script=script)

    texts = [(await model.complete(request(Message("user", "q")))).text for _ in range(4)]
    assert texts == ["one", "two", "two", "two"]
    assert model.calls == 4
    last = await model.complete(request(Message("user", "q")))
    assert last.usage == Usage(input_tokens=7, output_tokens=3)  # a scripted usage is kept


async def test_script_function_sees_the_request() -> None:
    model = ScriptedModel(script=lambda req: ModelResponse(f"{len(req.messages)} messages"))

    response = await model.complete(request(Message("user", "a"), Message("assistant", "b"),
                                            Message("user", "c")))
    assert response.text == "3 messages"


async def test_delay_is_slept_in_each_call() -> None:
    model = ScriptedModel(delay=0.05)

    started = time.monotonic()
    await asyncio.gather(*(model.complete(request(Message("user", "x"))) for _ in range(3)))
    elapsed = time.monotonic() - started
    assert elapsed >= 0.045  # asyncio may wake a hair early; the point is that it slept
    assert model.calls == 3


async def test_call_log_gets_one_json_line_per_call(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    model = ScriptedModel("toren/scripted", call_log=log)

    await model.complete(request(Message("user", "a")))
    await model.complete(request(Message("user", "a"), Message("assistant", "b"),
                                 Message("user", "c")))
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["call"], e["messages"], e["pid"], e["model"]) for e in entries] == [
        (0, 1, os.getpid(), "toren/scripted"), (1, 3, os.getpid(), "toren/scripted")]
    assert entries[0]["at"] <= entries[1]["at"]


def test_provider_reads_its_knobs_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setenv("TOREN_SCRIPTED_DELAY", "0.5")
    monkeypatch.setenv("TOREN_SCRIPTED_COST_USD", "0.01")
    monkeypatch.setenv("TOREN_SCRIPTED_CALL_LOG", str(tmp_path / "log"))

    model = ScriptedProvider().get_model("toren/scripted")
    assert isinstance(model, ScriptedModel)
    assert (model.delay, model.cost_usd, model.call_log) == (0.5, 0.01, tmp_path / "log")
    assert model.model_id == "toren/scripted"


def test_provider_defaults_without_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TOREN_SCRIPTED_DELAY", "TOREN_SCRIPTED_COST_USD", "TOREN_SCRIPTED_CALL_LOG"):
        monkeypatch.delenv(name, raising=False)

    model = ScriptedProvider().get_model("toren/scripted-other")
    assert isinstance(model, ScriptedModel)
    assert (model.delay, model.cost_usd, model.call_log) == (0.0, 0.0, None)


def test_provider_rejects_a_bad_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_SCRIPTED_DELAY", "soon")

    with pytest.raises(ConfigError, match="TOREN_SCRIPTED_DELAY='soon' is not a number"):
        ScriptedProvider().get_model("toren/scripted")


def test_provider_rejects_unknown_builtin_models() -> None:
    with pytest.raises(ConfigError, match="toren/scripted"):
        ScriptedProvider().get_model("toren/gpt-5")


def test_scripted_is_a_builtin_plugin_registered_through_the_hooks() -> None:
    host = PluginHost(entry_points=False)

    assert list(host.info) == ["scripted"]
    info = host.info["scripted"]
    assert (info.distribution, info.default, info.models) == ("toren", True, ["toren/*"])
    assert isinstance(host.provider_for("toren/scripted"), ScriptedProvider)
    with pytest.raises(ConfigError, match="no provider prefix"):
        host.provider_for("scripted")
    with pytest.raises(ConfigError, match="install toren-openai"):
        host.provider_for("openai/gpt-4o")


async def test_an_input_with_tool_calls_makes_exactly_those_calls_in_order() -> None:
    plan = json.dumps({"toolCalls": [
        {"name": "rate", "arguments": {"score": 1}},
        {"name": "lookup_topic", "arguments": {"topic": "x", "depth": 3}}]})
    responses, _ = await run_turn(ScriptedModel(), plan)
    calls = [(c.name, c.arguments) for r in responses for c in r.tool_calls]
    assert calls == [("rate", {"score": 1}), ("lookup_topic", {"topic": "x", "depth": 3})]
    assert not responses[-1].tool_calls
