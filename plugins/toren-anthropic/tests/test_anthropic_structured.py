"""Structured output (``output:``) through the real SDK against the fake Messages API: the
schema as ``output_config.format`` (closed by the SDK's ``transform_schema``), tools before the
answer, a repair turn, the JSON output, and a model that refuses structured outputs."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import fake_anthropic as fake
from fake_anthropic import FakeFactory
from toren_anthropic import wire

from toren.core.catalog import validate_event
from toren.host.runtime import Runtime
from toren.plugin import Message, ModelRequest
from toren.testing import write_agent_dir

RuntimeFactory = Callable[..., Awaitable[Runtime]]
MODEL = "anthropic/claude-sonnet-4-6"
#: Open objects and a keyword the API does not take (minItems 2): the SDK transforms them.
FORECAST = {"type": "object", "required": ["city", "days"],
            "properties": {"city": {"type": "string"},
                           "days": {"type": "array", "minItems": 2,
                                    "items": {"type": "object",
                                              "properties": {"sky": {"type": "string"}}}}}}
ANSWER = {"city": "Paris", "days": [{"sky": "sunny"}, {"sky": "rain"}]}
TOOLS = '''
def lookup(city: str) -> str:
    """Look up the weather in a city."""
    return f"sunny then rain in {city}"
'''


def test_the_schema_goes_as_output_config_closed_for_the_api() -> None:
    request = ModelRequest(model=MODEL, system="", output_schema=FORECAST,
                           messages=(Message(role="user", text="Paris"),))
    sent = wire.request_params(request, model="claude-sonnet-4-6")["output_config"]["format"]
    assert sent["type"] == "json_schema"
    schema = sent["schema"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["days"]["items"]["additionalProperties"] is False
    assert "minItems: 2" in schema["properties"]["days"]["description"]  # moved, not lost
    assert fake.output_config_problem({"output_config": {"format": sent}}) is None
    assert fake.output_config_problem({"output_config": {"format": {
        "type": "json_schema", "schema": FORECAST}}}) is not None  # as written: refused
    plain = ModelRequest(model=MODEL, system="", messages=(Message(role="user", text="x"),))
    assert "output_config" not in wire.request_params(plain, model="claude-sonnet-4-6")


async def run(runtime: Runtime) -> tuple[Any, list[Any]]:
    run_id = await runtime.start_run("weather", "Weather in Paris?")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    events = await runtime.events(run_id)
    for event in events:
        validate_event(event.stream, event.type, event.data)
    return record, events


async def test_a_tool_call_then_a_repaired_answer_is_the_runs_json_output(
        tmp_path: Path, fake_anthropic: FakeFactory, anthropic_runtime: RuntimeFactory) -> None:
    api = await fake_anthropic([
        fake.tool_use("lookup", {"city": "Paris"}, call_id="toolu_1"),
        fake.text(json.dumps({"city": "Paris", "days": [{"sky": "sunny"}]})),  # minItems: 2
        fake.text(json.dumps(ANSWER)),
    ])
    directory = write_agent_dir(tmp_path, "weather", model=MODEL, baseUrl=api.url,
                                tools_py=TOOLS, output=FORECAST)
    runtime = await anthropic_runtime([directory])
    record, events = await run(runtime)
    assert record.status == "completed", record.error
    assert record.output == ANSWER
    rejected = [e.data for e in events if e.type == "OutputRejected"]
    assert [(r["where"], r["schema_path"]) for r in rejected] == [
        ("$.days", "properties/days/minItems")]
    assert len(api.requests) == 3
    assert all(body["output_config"]["format"]["type"] == "json_schema" and body["tools"]
               for body in api.requests)
    repair = api.requests[2]["messages"][-1]
    assert repair["role"] == "user"
    assert "is too short" in repair["content"][-1]["text"]


async def test_a_model_that_refuses_structured_outputs_is_asked_without_them(
        tmp_path: Path, fake_anthropic: FakeFactory, anthropic_runtime: RuntimeFactory) -> None:
    api = await fake_anthropic([
        fake.invalid("output_config.format: structured outputs are not supported for this "
                     "model"),
        fake.text(json.dumps(ANSWER)),
    ])
    directory = write_agent_dir(tmp_path, "weather", model=MODEL, baseUrl=api.url,
                                output=FORECAST)
    runtime = await anthropic_runtime([directory])
    record, events = await run(runtime)
    assert (record.status, record.output) == ("completed", ANSWER)
    first, second = api.requests
    assert "output_config" in first and "output_config" not in second
    assert [e.type for e in events].count("RetryScheduled") == 0  # asked again at once
