"""Through Toren: the task loop, real Postgres, the real SDK and the fake API over HTTP."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import fake_anthropic as fake
import pytest
from fake_anthropic import FakeFactory

from toren.core.catalog import validate_event
from toren.core.compaction import SUMMARY_PREFIX, SUMMARY_SYSTEM
from toren.core.events import Event
from toren.core.pricing import Pricing
from toren.errors import ProviderError
from toren.host.runtime import Runtime
from toren.seams.model import Usage
from toren.testing import write_agent_dir

#: The ``anthropic_runtime`` fixture: ``await make([agent_dir], **settings)`` -> a Runtime.
RuntimeFactory = Callable[..., Awaitable[Runtime]]
MODEL = "anthropic/claude-sonnet-4-6"
SONNET = Pricing(3.0, 15.0, 0.30, 3.75)
TOOLS = '''
def lookup(city: str) -> str:
    """Look up the weather in a city."""
    return f"sunny in {city}"


def fetch(page: int) -> str:
    """Fetch a long page."""
    return "x" * 3000
'''


def agent(tmp_path: Path, url: str, **fields: Any) -> Path:
    return write_agent_dir(tmp_path, "weather", model=MODEL, baseUrl=url, tools_py=TOOLS,
                           **fields)


async def run(runtime: Runtime, text: str = "Weather in Paris?") -> tuple[Any, list[Event]]:
    run_id = await runtime.start_run("weather", text)
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    events = await runtime.events(run_id)
    for event in events:
        validate_event(event.stream, event.type, event.data)
    return record, events


def of_type(events: list[Event], kind: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == kind]


async def test_a_tool_calling_conversation_end_to_end_with_usage_and_cost(
        tmp_path: Path, fake_anthropic: FakeFactory, anthropic_runtime: RuntimeFactory) -> None:
    def answer(body: dict[str, Any]) -> fake.Reply:
        results = fake.tool_results(body)
        # the last block of the prefix carries a cache breakpoint (promptCaching is on)
        if results != [{"type": "tool_result", "tool_use_id": "toolu_paris",
                        "content": "sunny in Paris", "cache_control": {"type": "ephemeral"}}]:
            return fake.invalid(f"expected the lookup result, got {results}")
        return fake.text("It is sunny in Paris.", input_tokens=200, output_tokens=12)

    server = await fake_anthropic([
        fake.tool_use("lookup", {"city": "Paris"}, call_id="toolu_paris", say="Checking.",
                      input_tokens=120, output_tokens=30, cache_read=80, cache_write=40),
        answer])
    runtime = await anthropic_runtime([agent(tmp_path, server.url)])
    record, events = await run(runtime)

    assert (record.status, record.output) == ("completed", "It is sunny in Paris.")
    first, second = of_type(events, "ModelCallCompleted")
    assert first["model"] == MODEL and first["stop_reason"] == "tool_use"
    assert first["text"] == "Checking."
    assert first["tool_calls"] == [{"id": "toolu_paris", "name": "lookup",
                                    "arguments": {"city": "Paris"}}]
    assert first["usage"] == {"input_tokens": 120, "output_tokens": 30,
                              "cache_read_tokens": 80, "cache_write_tokens": 40}
    assert first["cost_usd"] == pytest.approx((120 * 3 + 30 * 15 + 80 * 0.3 + 40 * 3.75) / 1e6)
    assert first["cost_usd"] == pytest.approx(SONNET.cost(Usage(120, 30, 80, 40)))
    # null cache fields in the API's usage are zero tokens
    assert second["usage"] == {"input_tokens": 200, "output_tokens": 12,
                               "cache_read_tokens": 0, "cache_write_tokens": 0}
    assert second["cost_usd"] == pytest.approx(SONNET.cost(Usage(200, 12)))
    (tool,) = of_type(events, "ToolCallCompleted")
    assert (tool["output"], tool["is_error"]) == ("sunny in Paris", False)
    # what went over the wire: the agent's prompt, its tools, then the tool result
    assert [r["model"] for r in server.requests] == ["claude-sonnet-4-6"] * 2
    (system,) = server.requests[0]["system"]
    assert system["text"].startswith("You are a test agent.")
    assert system["cache_control"] == {"type": "ephemeral"}
    assert {t["name"] for t in server.requests[0]["tools"]} == {"lookup", "fetch"}
    assert server.requests[1]["messages"][1]["content"][-1]["id"] == "toolu_paris"


async def test_a_429_waits_at_least_retry_after_then_succeeds(
        tmp_path: Path, fake_anthropic: FakeFactory, anthropic_runtime: RuntimeFactory) -> None:
    server = await fake_anthropic([fake.rate_limited(1), fake.text("done")])
    runtime = await anthropic_runtime([agent(tmp_path, server.url)])
    record, events = await run(runtime)
    assert record.status == "completed" and record.output == "done"
    (retry,) = of_type(events, "RetryScheduled")
    assert retry["delay_s"] >= 1.0  # the server's Retry-After beats the 0.2 s backoff cap
    assert "429 rate_limit_error" in retry["error"]["message"]
    assert len(of_type(events, "ModelCallCompleted")) == 1
    assert server.counts["/v1/messages"] == 2


async def test_server_errors_and_overload_are_retried(
        tmp_path: Path, fake_anthropic: FakeFactory, anthropic_runtime: RuntimeFactory) -> None:
    server = await fake_anthropic([fake.server_error(), fake.overloaded(), fake.text("done")])
    runtime = await anthropic_runtime([agent(tmp_path, server.url)])
    record, events = await run(runtime)
    assert (record.status, record.output, record.error) == ("completed", "done", None)
    retries = of_type(events, "RetryScheduled")
    assert [r["attempt"] for r in retries] == [1, 2]
    assert ["500 api_error" in retries[0]["error"]["message"],
            "529 overloaded_error" in retries[1]["error"]["message"]] == [True, True]
    assert server.counts["/v1/messages"] == 3


async def test_a_context_length_error_compacts_and_retries_once(
        tmp_path: Path, fake_anthropic: FakeFactory, anthropic_runtime: RuntimeFactory) -> None:
    limit = 5000  # bytes: two 3000-byte tool results do not fit, one does
    answers = iter([fake.tool_use("fetch", {"page": 1}), fake.tool_use("fetch", {"page": 2}),
                    fake.text("read both pages")])
    rejected: list[int] = []

    def respond(body: dict[str, Any]) -> fake.Reply:
        if len(json.dumps(body)) > limit:
            rejected.append(len(json.dumps(body)))
            return fake.prompt_too_long()
        if body.get("system") == SUMMARY_SYSTEM:
            return fake.text("Page 1 was 3000 x characters.")
        return next(answers)

    server = await fake_anthropic(responder=respond)
    directory = agent(tmp_path, server.url, compaction={"keepRecentMessages": 2})
    runtime = await anthropic_runtime([directory])
    record, events = await run(runtime, "read pages 1 and 2")

    assert (record.status, record.output) == ("completed", "read both pages")
    (compacted,) = of_type(events, "Compacted")
    assert compacted["reason"] == "context_window_exceeded"
    assert compacted["summary"] == "Page 1 was 3000 x characters."
    assert len(rejected) == 1
    summary_calls = [c for c in of_type(events, "ModelCallCompleted")
                     if c.get("purpose") == "compaction"]
    assert len(summary_calls) == 1
    # the summary request offered no tools, and the retried call starts from the summary
    summary_request = next(r for r in server.requests if r.get("system") == SUMMARY_SYSTEM)
    assert "tools" not in summary_request
    last = server.requests[-1]["messages"][0]["content"][0]["text"]
    assert last.startswith(SUMMARY_PREFIX)
    assert server.counts["/v1/messages"] == 5  # 2 steps, 1 rejected, 1 summary, 1 retry


async def test_a_permanent_400_fails_the_task_with_the_providers_message(
        tmp_path: Path, fake_anthropic: FakeFactory, anthropic_runtime: RuntimeFactory) -> None:
    problem = "tools.1.input_schema: JSON schema is invalid"
    server = await fake_anthropic([fake.invalid(problem)])
    runtime = await anthropic_runtime([agent(tmp_path, server.url)])
    record, events = await run(runtime)
    assert record.status == "failed"
    (finished,) = of_type(events, "TaskFinished")
    assert finished["error"]["code"] == "provider_error"
    assert problem in finished["error"]["message"]
    assert "400 invalid_request_error" in finished["error"]["message"]
    assert of_type(events, "RetryScheduled") == []
    assert server.counts["/v1/messages"] == 1


async def test_preflight_refuses_to_start_workers_on_a_rejected_key(
        tmp_path: Path, fake_anthropic: FakeFactory, anthropic_runtime: RuntimeFactory) -> None:
    server = await fake_anthropic(api_key="the-right-key")
    directory = agent(tmp_path, server.url)
    runtime = await anthropic_runtime([directory], start=False)
    with pytest.raises(ProviderError) as raised:
        await runtime.start(workers=True)
    message = raised.value.message
    assert MODEL in message and "weather" in message and "ANTHROPIC_API_KEY" in message
    assert server.url in message and "\n" not in message
    assert server.counts["/v1/models"] == 1

    skipping = await anthropic_runtime([directory], skip_preflight=True)
    assert skipping.workers is not None
    assert server.counts["/v1/models"] == 1


async def test_workers_start_when_the_api_is_unreachable(
        tmp_path: Path, anthropic_runtime: RuntimeFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with caplog.at_level(logging.WARNING, logger="toren_anthropic"):
        runtime = await anthropic_runtime([agent(tmp_path, url)])
    assert runtime.workers is not None
    (warning,) = [r.getMessage() for r in caplog.records if r.name.startswith("toren_anthropic")]
    assert "unreachable, not a bad key" in warning and url in warning
