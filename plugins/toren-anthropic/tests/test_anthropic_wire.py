"""Wire mapping and prices: pure functions, no I/O."""

from __future__ import annotations

import pytest
from anthropic.types import Message as ApiMessage
from fake_anthropic import conversation_problem
from toren_anthropic import wire
from toren_anthropic.prices import PRICES, price_for
from toren_anthropic.provider import AnthropicProvider

from toren.core.compaction import summary_request
from toren.core.pricing import Pricing
from toren.errors import ConfigError
from toren.seams.model import Message, ModelRequest, ToolCall, ToolSpec, Usage

LOOKUP = ToolSpec("lookup", "Look up a city.", {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


def conversation() -> tuple[Message, ...]:
    return (
        Message("user", "Weather in Paris and Oslo?"),
        Message("assistant", "Checking both.", tool_calls=(
            ToolCall("toolu_1", "lookup", {"city": "Paris"}),
            ToolCall("toolu_2", "lookup", {"city": "Oslo"}))),
        Message("tool", "sunny", tool_call_id="toolu_1"),
        Message("tool", "Error: TimeoutError: no answer", tool_call_id="toolu_2",
                is_error=True),
    )


def api_message(content: list[dict], stop_reason: str = "end_turn", **usage: object
                ) -> ApiMessage:
    return ApiMessage.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
        "content": content, "stop_reason": stop_reason, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5} | usage})


def test_a_request_maps_system_tools_and_max_tokens() -> None:
    request = ModelRequest("anthropic/claude-sonnet-4-6", "Be brief.", conversation(),
                           (LOOKUP,), max_tokens=1234)
    params = wire.request_params(request, model="claude-sonnet-4-6")
    assert params["model"] == "claude-sonnet-4-6"
    assert params["max_tokens"] == 1234
    assert params["system"] == "Be brief."
    assert params["tools"] == [{"name": "lookup", "description": "Look up a city.",
                                "input_schema": LOOKUP.parameters}]
    assert conversation_problem(params) is None


def test_tool_calls_and_results_become_tool_use_and_one_user_turn_of_tool_results() -> None:
    messages = wire.wire_messages(conversation())
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "text", "text": "Checking both."},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {"city": "Oslo"}}]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
        {"type": "tool_result", "tool_use_id": "toolu_2",
         "content": "Error: TimeoutError: no answer", "is_error": True}]


def test_consecutive_turns_of_one_role_are_merged_with_tool_results_first() -> None:
    messages = wire.wire_messages((
        *conversation(), Message("user", "Also: be quick."), Message("user", "Thanks.")))
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [b["type"] for b in messages[2]["content"]] == [
        "tool_result", "tool_result", "text", "text"]
    assert messages[2]["content"][2]["text"] == "Also: be quick."


def test_empty_turns_get_placeholder_text_and_blank_text_blocks_are_dropped() -> None:
    messages = wire.wire_messages((
        Message("user", ""), Message("assistant", "   "), Message("user", "go on")))
    assert messages[0]["content"] == [{"type": "text", "text": wire.EMPTY_USER_TEXT}]
    assert messages[1]["content"] == [{"type": "text", "text": wire.EMPTY_ASSISTANT_TEXT}]
    assert messages[2]["content"] == [{"type": "text", "text": "go on"}]


def test_a_request_without_tools_carries_past_tool_calls_as_text() -> None:
    # the kernel's compaction summary offers no tools but summarises tool-calling turns
    request = summary_request("anthropic/claude-sonnet-4-6", conversation(), len(conversation()))
    params = wire.request_params(request, model="claude-sonnet-4-6")
    assert "tools" not in params
    assert conversation_problem(params) is None
    blocks = [b for m in params["messages"] for b in m["content"]]
    assert {b["type"] for b in blocks} == {"text"}
    flat = "\n".join(b["text"] for b in blocks)
    assert 'lookup (call toolu_1) with {"city": "Paris"}' in flat
    assert "[error from lookup call toolu_2]" in flat and "sunny" in flat


def test_a_response_maps_text_tool_calls_stop_reason_and_usage() -> None:
    message = api_message([
        {"type": "text", "text": "Let me "}, {"type": "text", "text": "check."},
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {"city": "Rome"}},
        {"type": "text", "text": "Then answer."}], "tool_use",
        cache_read_input_tokens=700, cache_creation_input_tokens=None)
    response = wire.model_response(message, model_id="anthropic/claude-sonnet-4-6",
                                   price=price_for("claude-sonnet-4-6"))
    assert response.text == "Let me check.\n\nThen answer."
    assert response.tool_calls == (ToolCall("toolu_9", "lookup", {"city": "Rome"}),)
    assert response.stop_reason == "tool_use"
    assert response.usage == Usage(10, 5, cache_read_tokens=700, cache_write_tokens=0)
    assert response.model == "anthropic/claude-sonnet-4-6"
    assert response.cost_usd is None  # priced by the kernel from Model.pricing


@pytest.mark.parametrize(("api", "calls", "toren"), [
    ("end_turn", False, "end_turn"), ("tool_use", True, "tool_use"),
    ("max_tokens", False, "max_tokens"), ("model_context_window_exceeded", False, "max_tokens"),
    ("stop_sequence", False, "end_turn"), ("refusal", False, "end_turn"),
    ("pause_turn", False, "end_turn"), (None, True, "tool_use")])
def test_stop_reasons(api: str | None, calls: bool, toren: str) -> None:
    assert wire.stop_reason(api, calls) == toren


def test_tool_input_that_is_not_an_object_is_an_arguments_error() -> None:
    call = wire.tool_call("toolu_1", "lookup", ["Paris"])
    assert call.arguments == {} and "expected a JSON object" in (call.arguments_error or "")


def test_an_answer_with_thinking_is_sent_back_verbatim_while_its_conversation_holds() -> None:
    first = ModelRequest("anthropic/claude-opus-5", "sys", conversation()[:1], (LOOKUP,))
    params = wire.request_params(first, model="claude-opus-5")
    answer = api_message([
        {"type": "thinking", "thinking": "two cities", "signature": "sig-1"},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Paris"}},
    ], "tool_use")
    turn = wire.replayable_turn(answer)
    assert turn is not None and turn[0] == {"type": "thinking", "thinking": "two cities",
                                            "signature": "sig-1"}
    replay = {wire.params_key(params): turn}
    response = wire.model_response(answer, model_id="anthropic/claude-opus-5")
    history = (*first.messages, Message("assistant", response.text,
                                        tool_calls=response.tool_calls),
               Message("tool", "sunny", tool_call_id="toolu_1"))
    second = wire.request_params(ModelRequest("anthropic/claude-opus-5", "sys", history,
                                              (LOOKUP,)), model="claude-opus-5", replay=replay)
    assert second["messages"][1]["content"] == turn
    assert conversation_problem(second) is None
    # once earlier turns change (compaction), the thinking would not verify: it is left out
    compacted = (Message("user", "Summary: asked about Paris."), *history[1:])
    third = wire.request_params(ModelRequest("anthropic/claude-opus-5", "sys", compacted,
                                             (LOOKUP,)), model="claude-opus-5", replay=replay)
    assert [b["type"] for b in third["messages"][1]["content"]] == ["tool_use"]
    # answers without thinking are rebuilt from Toren's messages; nothing to keep
    assert wire.replayable_turn(api_message([{"type": "text", "text": "hi"}])) is None


# -- prices --------------------------------------------------------------------------------------


def test_dated_ids_use_their_models_row_and_similar_names_do_not_collide() -> None:
    assert price_for("claude-sonnet-4-5-20250929") is PRICES["claude-sonnet-4-5"]
    assert price_for("claude-haiku-4-5-20251001") is PRICES["claude-haiku-4-5"]
    assert price_for("claude-opus-5") is not price_for("claude-opus-5-5")
    assert price_for("claude-opus-5-5").pricing.input_per_mtok == 4.0  # type: ignore[union-attr]
    assert price_for("claude-unknown-9") is None
    assert price_for("claude-sonnet-4-5-2025") is None


def test_every_row_prices_cache_reads_below_input_and_writes_above() -> None:
    for name, row in PRICES.items():
        for tier in (row.pricing, row.long_prompt):
            if tier is None:
                continue
            assert tier.cache_read_per_mtok is not None and tier.cache_write_per_mtok is not None
            assert tier.cache_read_per_mtok < tier.input_per_mtok < tier.cache_write_per_mtok, name
            assert tier.output_per_mtok > tier.input_per_mtok, name


def test_models_get_pricing_and_context_window_from_the_table() -> None:
    provider = AnthropicProvider()
    sonnet = provider.get_model("anthropic/claude-sonnet-4-5-20250929")
    assert sonnet.pricing == Pricing(3.0, 15.0, 0.30, 3.75)
    assert sonnet.context_window == 200_000
    assert sonnet.pricing.cost(Usage(1_000_000, 100_000, 2_000_000, 400_000)) == pytest.approx(
        3.0 + 1.5 + 0.6 + 1.5)
    unknown = provider.get_model("anthropic/claude-next-1")
    assert (unknown.pricing, unknown.context_window) == (None, None)


def test_a_model_priced_by_prompt_length_is_costed_per_call() -> None:
    haiku = AnthropicProvider().get_model("anthropic/claude-haiku-5-5")
    assert haiku.pricing is None and haiku.context_window == 1_000_000
    short = wire.model_response(api_message([{"type": "text", "text": "ok"}],
                                            input_tokens=50_000, output_tokens=1_000),
                                model_id=haiku.model_id, price=haiku.price)  # type: ignore[attr-defined]
    long = wire.model_response(api_message([{"type": "text", "text": "ok"}],
                                           input_tokens=90_000, output_tokens=1_000,
                                           cache_read_input_tokens=20_000),
                               model_id=haiku.model_id, price=haiku.price)  # type: ignore[attr-defined]
    assert short.cost_usd == pytest.approx((50_000 * 0.10 + 1_000 * 0.50) / 1e6)
    assert long.cost_usd == pytest.approx((90_000 * 0.50 + 1_000 * 2.50 + 20_000 * 0.05) / 1e6)


def test_a_model_id_without_a_name_and_a_bad_timeout_are_config_errors(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="names no Claude model"):
        AnthropicProvider().get_model("anthropic/")
    monkeypatch.setenv("TOREN_ANTHROPIC_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="TOREN_ANTHROPIC_TIMEOUT='soon'"):
        AnthropicProvider().get_model("anthropic/claude-sonnet-4-6")


def test_thinking_travels_in_provider_data_so_it_survives_a_restart() -> None:
    first = ModelRequest("anthropic/claude-opus-5", "sys", conversation()[:1], (LOOKUP,))
    params = wire.request_params(first, model="claude-opus-5")
    answer = api_message([
        {"type": "thinking", "thinking": "two cities", "signature": "sig-1"},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Paris"}},
    ], "tool_use")
    response = wire.model_response(answer, model_id="anthropic/claude-opus-5", asked=params)
    assert response.provider_data is not None
    # what a resumed worker rebuilds from the event log: the message with its provider_data
    restored = Message.from_json(Message("assistant", response.text,
                                         tool_calls=response.tool_calls,
                                         provider_data=response.provider_data).to_json())
    history = (*first.messages, restored, Message("tool", "sunny", tool_call_id="toolu_1"))
    second = wire.request_params(ModelRequest("anthropic/claude-opus-5", "sys", history,
                                              (LOOKUP,)), model="claude-opus-5")
    assert second["messages"][1]["content"][0]["type"] == "thinking"
    assert conversation_problem(second) is None
