"""Prompt caching: the breakpoints the real SDK sends, what the fake API bills for them, and
what Toren records and prices (cache writes at 1.25x input, reads at 0.1x for Sonnet)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import fake_anthropic as fake
import pytest
from fake_anthropic import FakeFactory, PromptCache, conversation_problem
from toren_anthropic import wire
from toren_anthropic.model import AnthropicModel

from toren.cli.render import cache_rows
from toren.core.catalog import validate_event
from toren.core.pricing import Pricing
from toren.host.runtime import Runtime
from toren.seams.model import Message, ModelRequest, ToolCall, ToolSpec, Usage
from toren.server.app import create_app
from toren.testing import serve_on_free_port, write_agent_dir

RuntimeFactory = Callable[..., Awaitable[Runtime]]
MODEL = "anthropic/claude-sonnet-4-6"
SONNET = Pricing(3.0, 15.0, 0.30, 3.75)
MARK = {"type": "ephemeral"}
#: A system prompt long enough to be cached (the fake, like Sonnet, caches from 1,024 tokens).
LONG_PROMPT = "You are a careful agent. " * 240
STEP = ToolSpec("step", "Do step number n.", {
    "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
TOOLS = '''
from toren import tool


@tool(idempotent=True)
def step(n: int) -> str:
    """Do step number n."""
    return f"step {n} done"
'''


def tool_loop_history(steps: int) -> tuple[Message, ...]:
    """The conversation of a task after ``steps`` steps of calling ``step``."""
    history: list[Message] = [Message("user", "go")]
    for n in range(1, steps + 1):
        history.append(Message("assistant", tool_calls=(ToolCall(f"toolu_{n}", "step",
                                                                 {"n": n}),)))
        history.append(Message("tool", f"step {n} done", tool_call_id=f"toolu_{n}"))
    return tuple(history)


def params_after(steps: int, *, caching: bool = True, system: str = "sys",
                 tools: tuple[ToolSpec, ...] = (STEP,)) -> dict[str, Any]:
    request = ModelRequest(MODEL, system, tool_loop_history(steps), tools,
                           prompt_caching=caching)
    return wire.request_params(request, model="claude-sonnet-4-6")


# -- where the breakpoints go (pure) -------------------------------------------------------------


def test_breakpoints_mark_the_tools_the_system_prompt_and_the_last_two_user_turns() -> None:
    first = params_after(0)
    assert wire.cache_breakpoints(first) == ["tools.0", "system.0", "messages.0.content.0"]
    assert first["system"] == [{"type": "text", "text": "sys", "cache_control": MARK}]
    later = params_after(3)
    # user turns are 0, 2, 4, 6: the previous step's request ended at 4, this one at 6
    assert wire.cache_breakpoints(later) == ["tools.0", "system.0", "messages.4.content.0",
                                             "messages.6.content.0"]
    assert conversation_problem(later) is None


@pytest.mark.parametrize("steps", range(6))
def test_never_more_than_four_breakpoints_and_none_on_assistant_turns(steps: int) -> None:
    for tools in ((), (STEP,)):
        for system in ("", "sys"):
            params = params_after(steps, system=system, tools=tools)
            marks = wire.cache_breakpoints(params)
            assert len(marks) <= wire.MAX_BREAKPOINTS
            assert PromptCache().problem(params) is None
            for mark in marks:
                if mark.startswith("messages."):
                    assert params["messages"][int(mark.split(".")[1])]["role"] == "user"


def test_with_caching_off_the_request_has_no_breakpoint_and_a_plain_system_prompt() -> None:
    params = params_after(3, caching=False)
    assert wire.cache_breakpoints(params) == []
    assert "cache_control" not in json.dumps(params)
    assert params["system"] == "sys"
    # the same conversation, whatever the switch says
    assert wire.params_key(params) == wire.params_key(params_after(3))


def test_each_step_marks_where_the_previous_step_wrote_its_cache() -> None:
    for steps in range(1, 5):
        before, after = params_after(steps - 1), params_after(steps)
        # the previous request is this one's prefix, block for block (breakpoints aside)
        prefix = wire._unmarked(after["messages"][:len(before["messages"])])
        assert prefix == wire._unmarked(before["messages"])
        # and the block where the previous request ended carries a breakpoint in both
        end = len(before["messages"]) - 1
        assert before["messages"][end]["content"][-1]["cache_control"] == MARK
        assert after["messages"][end]["content"][-1]["cache_control"] == MARK


def test_thinking_is_sent_back_verbatim_with_caching_on() -> None:
    first = ModelRequest("anthropic/claude-opus-5", "sys", tool_loop_history(0), (STEP,),
                         prompt_caching=True)
    params = wire.request_params(first, model="claude-opus-5")
    answer = wire.model_response(
        fake_message([{"type": "thinking", "thinking": "one step", "signature": "sig-1"},
                      {"type": "tool_use", "id": "toolu_1", "name": "step",
                       "input": {"n": 1}}]),
        model_id="anthropic/claude-opus-5", asked=params)
    history = (*first.messages, Message("assistant", answer.text, tool_calls=answer.tool_calls,
                                        provider_data=answer.provider_data),
               Message("tool", "step 1 done", tool_call_id="toolu_1"))
    second = wire.request_params(ModelRequest("anthropic/claude-opus-5", "sys", history,
                                              (STEP,), prompt_caching=True),
                                 model="claude-opus-5")
    assert second["messages"][1]["content"][0]["type"] == "thinking"
    assert "cache_control" not in second["messages"][1]["content"][0]
    assert PromptCache().problem(second) is None


def fake_message(content: list[dict[str, Any]]) -> Any:
    from anthropic.types import Message as ApiMessage

    return ApiMessage.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-opus-5",
        "content": content, "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5}})


def test_the_fake_refuses_a_fifth_breakpoint_as_the_api_does() -> None:
    params = params_after(2)
    params["messages"][1]["content"][-1]["cache_control"] = MARK
    assert PromptCache().problem(params) == (
        "A maximum of 4 blocks with cache_control may be provided. Found 5.")


# -- the real SDK against the fake ---------------------------------------------------------------


async def test_the_sdk_sends_the_breakpoints_and_each_call_reads_the_previous_calls_prefix(
        fake_anthropic: FakeFactory) -> None:
    server = await fake_anthropic(responder=fake.tool_loop(3), cache=PromptCache())
    model = AnthropicModel(MODEL, base_url=server.url)
    usages: list[Usage] = []
    history: list[Message] = [Message("user", "go")]
    try:
        for call in range(4):
            request = ModelRequest(MODEL, LONG_PROMPT, tuple(history), (STEP,),
                                   prompt_caching=True)
            # the task loop streams; a plain create must send the same request
            response = await (model.stream(request, lambda _text: None) if call % 2
                              else model.complete(request))
            usages.append(response.usage)
            history.append(Message("assistant", response.text,
                                   tool_calls=response.tool_calls))
            history += [Message("tool", f"step {c.arguments['n']} done", tool_call_id=c.id)
                        for c in response.tool_calls]
    finally:
        await model.aclose()

    sent = server.requests
    assert [wire.cache_breakpoints(body) for body in sent] == [
        ["tools.0", "system.0", "messages.0.content.0"],
        ["tools.0", "system.0", "messages.0.content.0", "messages.2.content.0"],
        ["tools.0", "system.0", "messages.2.content.0", "messages.4.content.0"],
        ["tools.0", "system.0", "messages.4.content.0", "messages.6.content.0"]]
    assert all(block.get("cache_control") in (None, MARK)
               for body in sent for turn in body["messages"] for block in turn["content"])
    prompts = [u.input_tokens + u.cache_read_tokens + u.cache_write_tokens for u in usages]
    # the first call writes its whole prompt (the tools alone are too short to be cached);
    # every later call reads all the previous call sent and writes only what it adds
    assert usages[0] == Usage(0, usages[0].output_tokens, 0, prompts[0])
    for before, now, usage in zip(prompts, prompts[1:], usages[1:], strict=False):
        assert (usage.cache_read_tokens, usage.cache_write_tokens, usage.input_tokens) == (
            before, now - before, 0)


async def test_a_prompt_too_short_to_cache_is_billed_as_plain_input(
        fake_anthropic: FakeFactory) -> None:
    server = await fake_anthropic(responder=fake.tool_loop(1), cache=PromptCache())
    model = AnthropicModel(MODEL, base_url=server.url)
    try:
        response = await model.complete(ModelRequest(
            MODEL, "Be brief.", (Message("user", "go"),), (STEP,), prompt_caching=True))
    finally:
        await model.aclose()
    assert wire.cache_breakpoints(server.requests[0]) != []
    assert (response.usage.cache_read_tokens, response.usage.cache_write_tokens) == (0, 0)


# -- through Toren: events, prices and the receipt ----------------------------------------------


async def run_loop(runtime_factory: RuntimeFactory, tmp_path: Path, url: str, name: str,
                   **fields: Any) -> tuple[Runtime, str, list[dict[str, Any]]]:
    directory = write_agent_dir(tmp_path, name, model=MODEL, baseUrl=url, tools_py=TOOLS,
                                prompt=LONG_PROMPT, **fields)
    runtime = await runtime_factory([directory])
    run_id = await runtime.start_run(name, "go")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed", record.error
    events = await runtime.events(run_id)
    for event in events:
        validate_event(event.stream, event.type, event.data)
    return runtime, run_id, [e.data for e in events if e.type == "ModelCallCompleted"]


async def test_a_run_records_cache_reads_and_writes_priced_and_the_receipt_shows_the_saving(
        tmp_path: Path, fake_anthropic: FakeFactory,
        anthropic_runtime: RuntimeFactory) -> None:
    steps = 5
    cached = await fake_anthropic(responder=fake.tool_loop(steps), cache=PromptCache())
    runtime, run_id, calls = await run_loop(anthropic_runtime, tmp_path, cached.url, "cached")
    assert len(calls) == steps + 1
    assert [wire.cache_breakpoints(body)[-1] for body in cached.requests] == [
        f"messages.{2 * n}.content.0" for n in range(steps + 1)]
    for call, billed in zip(calls, cached.usages, strict=True):
        assert billed is not None
        assert call["usage"] == {
            "input_tokens": billed["input_tokens"], "output_tokens": billed["output_tokens"],
            "cache_read_tokens": billed["cache_read_input_tokens"],
            "cache_write_tokens": billed["cache_creation_input_tokens"]}
        assert call["pricing"] == {"input_per_mtok": 3.0, "output_per_mtok": 15.0,
                                   "cache_read_per_mtok": 0.30, "cache_write_per_mtok": 3.75}
        assert call["cost_usd"] == pytest.approx(SONNET.cost(Usage(**call["usage"])))
    assert all(call["usage"]["cache_read_tokens"] > 0 for call in calls[1:])

    receipt = await runtime.receipt(run_id)
    totals = receipt["totals"]
    usages = [Usage(**call["usage"]) for call in calls]
    read = sum(u.cache_read_tokens for u in usages)
    written = sum(u.cache_write_tokens for u in usages)
    assert (totals["cache_read_tokens"], totals["cache_write_tokens"]) == (read, written)
    assert totals["cache_read_cost_usd"] == pytest.approx(read * 0.30 / 1e6)
    assert totals["cache_write_cost_usd"] == pytest.approx(written * 3.75 / 1e6)
    uncached = sum(SONNET.uncached_cost(u) for u in usages)
    assert totals["uncached_cost_usd"] == pytest.approx(uncached)
    assert totals["cache_saved_usd"] == pytest.approx(uncached - totals["cost_usd"])
    assert totals["cache_saved_usd"] > 0
    (task,) = receipt["tasks"]
    first = task["model_calls"][0]
    # the first call only wrote: caching cost it the write premium (0.25x input)
    assert first["cache_saved_usd"] == pytest.approx(-written_premium(usages[0]))
    rows = dict(cache_rows(receipt))
    assert rows["cache reads"] == f"{read} tokens at $0.3/MTok: ${read * 0.30 / 1e6:.4f}"
    assert rows["cache writes"] == f"{written} tokens at $3.75/MTok: ${written * 3.75 / 1e6:.4f}"
    assert rows["caching saved"].startswith(f"${totals['cache_saved_usd']:.4f} (")
    # GET /runs/{id} (the console's run page) shows the same cache figures
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=False))
    try:
        async with aiohttp.ClientSession() as http, http.get(f"{url}/runs/{run_id}") as got:
            shown = (await got.json())["totals"]
    finally:
        await runner.cleanup()
    assert {key: shown[key] for key in ("cache_read_tokens", "cache_write_tokens",
                                        "cache_saved_usd")} == {
        key: totals[key] for key in ("cache_read_tokens", "cache_write_tokens",
                                     "cache_saved_usd")}

    # the same run with promptCaching: false sends no breakpoint and costs more
    plain = await fake_anthropic(responder=fake.tool_loop(steps), cache=PromptCache())
    runtime, run_id, uncached_calls = await run_loop(
        anthropic_runtime, tmp_path, plain.url, "uncached", promptCaching=False)
    assert all("cache_control" not in json.dumps(body) for body in plain.requests)
    assert all(c["usage"]["cache_read_tokens"] == c["usage"]["cache_write_tokens"] == 0
               for c in uncached_calls)
    plain_receipt = await runtime.receipt(run_id)
    assert plain_receipt["totals"]["cost_usd"] == pytest.approx(uncached)
    assert plain_receipt["totals"]["cache_saved_usd"] == 0
    assert cache_rows(plain_receipt) == []
    assert totals["cost_usd"] < plain_receipt["totals"]["cost_usd"]


def written_premium(usage: Usage) -> float:
    return usage.cache_write_tokens * (3.75 - 3.0) / 1e6


def test_a_model_priced_by_prompt_length_reports_the_tier_it_charged() -> None:
    haiku = AnthropicModel("anthropic/claude-haiku-5-5")
    assert haiku.price is not None and haiku.pricing is None
    long = wire.model_response(
        fake_message([{"type": "text", "text": "ok"}]).model_copy(update={
            "usage": fake_message([]).usage.model_copy(update={
                "input_tokens": 2_000, "cache_read_input_tokens": 120_000})}),
        model_id=haiku.model_id, price=haiku.price)
    # the prompt (input + cache reads) is over 100K tokens: every token at the long rates
    assert long.pricing == haiku.price.long_prompt
    assert long.cost_usd == pytest.approx(long.pricing.cost(long.usage))  # type: ignore[union-attr]


async def test_a_run_on_a_tiered_model_records_the_tier_it_was_charged(
        tmp_path: Path, fake_anthropic: FakeFactory,
        anthropic_runtime: RuntimeFactory) -> None:
    server = await fake_anthropic([fake.text("ok", input_tokens=2_000, output_tokens=10,
                                             cache_read=120_000)])
    directory = write_agent_dir(tmp_path, "tiered", model="anthropic/claude-haiku-5-5",
                                baseUrl=server.url)
    runtime = await anthropic_runtime([directory])
    run_id = await runtime.start_run("tiered", "go")
    assert (await runtime.wait_for_run(run_id, timeout_s=30)).status == "completed"
    (call,) = [e.data for e in await runtime.events(run_id) if e.type == "ModelCallCompleted"]
    assert call["pricing"] == {"input_per_mtok": 0.50, "output_per_mtok": 2.50,
                               "cache_read_per_mtok": 0.05, "cache_write_per_mtok": 0.625}
    (task,) = (await runtime.receipt(run_id))["tasks"]
    assert task["model_calls"][0]["cache_saved_usd"] == pytest.approx(120_000 * 0.45 / 1e6)
