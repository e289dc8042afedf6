"""Runs through Toren (real Postgres, real task loop) against the fake server via the real SDK."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_openai import Fail, completion, rate_limited, tool_call, usage

from toren.config import Settings
from toren.core.catalog import validate_event
from toren.core.compaction import SUMMARY_SYSTEM
from toren.core.events import Event
from toren.core.runs import RunRecord
from toren.errors import MissingEnvError, ProviderError
from toren.host.runtime import Runtime
from toren.seams.plugins import PluginHost
from toren.testing import write_agent_dir

ADD_TOOL = '''
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b
'''

FETCH_TOOLS = "".join(
    f'def fetch_{i}(text: str) -> str:\n    """Fetch page {i}."""\n    return "{i}" * 1800\n\n'
    for i in range(3))


def calc_agent(parent: Path, url: str, name: str = "calc", **fields: Any) -> Path:
    fields.setdefault("model", "openai/gpt-4o-mini")
    return write_agent_dir(parent, name, baseUrl=url, tools_py=fields.pop("tools_py", ADD_TOOL),
                           **fields)


async def run(runtime: Runtime, agent: str = "calc", text: str = "what is 2+3?"
              ) -> tuple[RunRecord, list[Event]]:
    run_id = await runtime.start_run(agent, text)
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    events = await runtime.events(run_id)
    for event in events:
        validate_event(event.stream, event.type, event.data)
    return record, events


def of_type(events: list[Event], event_type: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == event_type]


def test_the_plugin_registers_the_openai_provider() -> None:
    host = PluginHost(("toren-openai",))
    assert host.providers["openai"].supports_base_url
    assert host.info["openai"].distribution == "toren-openai"
    assert host.info["openai"].hooks == ["register_models"]


def test_openai_models_without_a_key_or_base_url_stop_startup(tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "calc", model="openai/gpt-4o-mini")
    settings = Settings(database_url="postgresql://unused", load_plugins=("toren-openai",))
    with pytest.raises(MissingEnvError, match="OPENAI_API_KEY"):
        Runtime([directory], settings=settings)


async def test_a_tool_calling_conversation_end_to_end(make_fake: Any, start_runtime: Any,
                                                      tmp_path: Path) -> None:
    fake = await make_fake([
        completion(None, [tool_call("add", {"a": 2, "b": 3}, call_id="call_add")],
                   usage_data=usage(prompt=1000, completion=50, cached=400)),
        completion("2+3 = 5", usage_data=usage(prompt=1100, completion=10, cached=1000)),
    ])
    runtime = await start_runtime(calc_agent(tmp_path, fake.url))
    record, events = await run(runtime)
    assert (record.status, record.output) == ("completed", "2+3 = 5")
    first, second = fake.requests
    assert first["messages"] == [{"role": "system", "content": "You are a test agent.\n"},
                                 {"role": "user", "content": "what is 2+3?"}]
    assert first["tools"][0]["function"]["name"] == "add"
    assert first["tools"][0]["function"]["parameters"]["required"] == ["a", "b"]
    assert second["messages"][2:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_add", "type": "function",
             "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "call_add", "content": "5"},
    ]
    calls = of_type(events, "ModelCallCompleted")
    assert [c["model"] for c in calls] == ["openai/gpt-4o-mini"] * 2
    assert calls[0]["usage"] == {"input_tokens": 600, "output_tokens": 50,
                                 "cache_read_tokens": 400, "cache_write_tokens": 0}
    assert calls[0]["stop_reason"] == "tool_use" and calls[1]["stop_reason"] == "end_turn"
    # gpt-4o-mini: input 0.15, cached 0.075, output 0.60 per million tokens
    assert calls[0]["cost_usd"] == pytest.approx((600 * 0.15 + 400 * 0.075 + 50 * 0.6) / 1e6)
    assert calls[1]["cost_usd"] == pytest.approx((100 * 0.15 + 1000 * 0.075 + 10 * 0.6) / 1e6)
    (finished,) = of_type(events, "TaskFinished")
    assert finished["cost_usd"] == pytest.approx(calls[0]["cost_usd"] + calls[1]["cost_usd"])
    (result,) = of_type(events, "ToolCallCompleted")
    assert (result["call_id"], result["output"], result["is_error"]) == ("call_add", "5", False)


async def test_invalid_json_arguments_go_back_to_the_model_and_the_run_continues(
        make_fake: Any, start_runtime: Any, tmp_path: Path) -> None:
    fake = await make_fake([
        completion(None, [tool_call("add", '{"a": 2, "b":', call_id="call_bad")]),
        completion(None, [tool_call("add", '{"a": 2, "b": 3}', call_id="call_good")]),
        completion("5"),
    ])
    runtime = await start_runtime(calc_agent(tmp_path, fake.url))
    record, events = await run(runtime)
    assert (record.status, record.output) == ("completed", "5")
    bad, good = of_type(events, "ToolCallCompleted")
    assert (bad["call_id"], bad["is_error"], bad["error_kind"]) == (
        "call_bad", True, "invalid_arguments")
    assert "invalid JSON" in bad["output"]
    assert (good["output"], good["is_error"]) == ("5", False)
    recorded = of_type(events, "ModelCallCompleted")[0]["tool_calls"][0]
    assert recorded["arguments"] == {} and "invalid JSON" in recorded["arguments_error"]
    # the model saw the problem as the result of its call
    tool_message = fake.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_bad"
    assert tool_message["content"].startswith("Error: ")


async def test_a_429_waits_at_least_retry_after_then_succeeds(make_fake: Any,
                                                              start_runtime: Any,
                                                              tmp_path: Path) -> None:
    fake = await make_fake([rate_limited("1"), completion("done")])
    runtime = await start_runtime(calc_agent(tmp_path, fake.url))
    record, events = await run(runtime)
    assert (record.status, record.output, record.error) == ("completed", "done", None)
    (retry,) = of_type(events, "RetryScheduled")
    assert retry["delay_s"] >= 1.0 and retry["attempt"] == 1
    assert retry["error"]["code"] == "provider_error"
    assert "rate limited" in retry["error"]["message"]
    assert fake.statuses == [429, 200]


async def test_a_500_is_retried(make_fake: Any, start_runtime: Any, tmp_path: Path) -> None:
    fake = await make_fake([Fail(500, "The server had an error while processing your request",
                                 type="server_error"), completion("done")])
    runtime = await start_runtime(calc_agent(tmp_path, fake.url))
    record, events = await run(runtime)
    assert (record.status, record.output) == ("completed", "done")
    (retry,) = of_type(events, "RetryScheduled")
    assert "answered 500" in retry["error"]["message"]
    assert fake.statuses == [500, 200]
    assert len(of_type(events, "ModelCallCompleted")) == 1


async def test_a_context_length_error_compacts_and_retries_once(make_fake: Any,
                                                                start_runtime: Any,
                                                                tmp_path: Path) -> None:
    def summarise(body: dict[str, Any]) -> dict[str, Any]:
        assert body["messages"][0] == {"role": "system", "content": SUMMARY_SYSTEM}
        return completion("read page 0: all zeros")

    # the third request carries two pages (3,600+ characters) and is over the limit; the
    # summary request (one page) and the compacted context fit
    fake = await make_fake([
        completion(None, [tool_call("fetch_0", {"text": "p"}, call_id="c0")]),
        completion(None, [tool_call("fetch_1", {"text": "p"}, call_id="c1")]),
        summarise,
        completion("pages read"),
    ], max_prompt_chars=3000)
    directory = calc_agent(tmp_path, fake.url, tools_py=FETCH_TOOLS,
                           compaction={"keepRecentMessages": 2})
    runtime = await start_runtime(directory)
    record, events = await run(runtime, text="read")
    assert (record.status, record.output) == ("completed", "pages read"), record.error
    (compacted,) = of_type(events, "Compacted")
    assert compacted["reason"] == "context_window_exceeded"
    assert compacted["summary"] == "read page 0: all zeros"
    assert fake.statuses == [200, 200, 400, 200, 200]
    purposes = [c.get("purpose") for c in of_type(events, "ModelCallCompleted")]
    assert purposes == [None, None, "compaction", None]
    last = fake.requests[-1]["messages"]
    assert last[1]["content"].endswith("read page 0: all zeros")


async def test_a_permanent_400_fails_the_task_with_the_providers_message(
        make_fake: Any, start_runtime: Any, tmp_path: Path) -> None:
    fake = await make_fake([Fail(400, "Invalid value for 'tools[0].function.name': string does "
                                      "not match pattern.", param="tools[0].function.name")])
    runtime = await start_runtime(calc_agent(tmp_path, fake.url))
    record, events = await run(runtime)
    assert (record.status, record.stop_reason) == ("failed", "error")
    assert record.error is not None and record.error["code"] == "provider_error"
    assert "Invalid value for 'tools[0].function.name'" in record.error["message"]
    assert "answered 400" in record.error["message"]
    assert fake.statuses == [400]  # not retried
    assert not of_type(events, "RetryScheduled")


async def test_a_local_model_costs_what_pricing_says_or_is_unknown(make_fake: Any,
                                                                   start_runtime: Any,
                                                                   tmp_path: Path) -> None:
    fake = await make_fake([completion("hi from llama", usage_data=usage(500, 20))] * 2)
    crews = tmp_path / "crews"
    calc_agent(crews, fake.url, name="priced", model="openai/llama3.1",
               pricing={"openai/llama3.1": {"inputPerMTok": 0, "outputPerMTok": 0}})
    calc_agent(crews, fake.url, name="unpriced", model="openai/llama3.1")
    runtime = await start_runtime(crews)
    _, priced = await run(runtime, "priced", "hello")
    _, unpriced = await run(runtime, "unpriced", "hello")
    assert [c["cost_usd"] for c in of_type(priced, "ModelCallCompleted")] == [0.0]
    assert [c["cost_usd"] for c in of_type(unpriced, "ModelCallCompleted")] == [None]
    assert of_type(unpriced, "ModelCallCompleted")[0]["usage"]["input_tokens"] == 500
    assert {r["model"] for r in fake.requests} == {"llama3.1"}


async def test_preflight_refuses_to_start_workers_on_a_rejected_key(make_fake: Any,
                                                                    start_runtime: Any,
                                                                    tmp_path: Path) -> None:
    fake = await make_fake(models_status=401)
    directory = calc_agent(tmp_path, fake.url)
    with pytest.raises(ProviderError) as refused:
        await start_runtime(directory)
    message = refused.value.message
    assert "openai/gpt-4o-mini" in message and "calc" in message
    assert "OPENAI_API_KEY" in message and fake.url in message
    runtime = await start_runtime(directory, skip_preflight=True)
    assert runtime.started
