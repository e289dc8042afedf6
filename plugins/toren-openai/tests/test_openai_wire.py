"""Unit tests (no I/O): wire mapping, price lookup, error translation, provider settings."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest
from fake_openai import completion, tool_call, usage
from toren_openai import errors, prices, wire
from toren_openai.provider import OpenAIProvider, is_openai_endpoint

from toren.errors import ConfigError, ContextWindowExceeded, ProviderError
from toren.seams.model import Message, ModelRequest, ToolCall, ToolSpec, Usage

ADD = ToolSpec("add", "Add two integers.", {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"]})


# -- requests ----------------------------------------------------------------------------------


def test_a_request_maps_every_role_to_chat_messages() -> None:
    request = ModelRequest(
        model="openai/gpt-4o-mini", system="Be brief.", max_tokens=321, tools=(ADD,),
        messages=(
            Message("user", "what is 2+3?"),
            Message("assistant", "Adding.", tool_calls=(ToolCall("call_1", "add",
                                                                 {"a": 2, "b": 3}),)),
            Message("tool", "5", tool_call_id="call_1"),
            Message("assistant", "", tool_calls=(ToolCall("call_2", "add", {},
                                                          arguments_error="invalid JSON"),)),
            Message("tool", "the arguments were invalid", tool_call_id="call_2", is_error=True),
            Message("tool", "Error: already says so", tool_call_id="call_3", is_error=True),
        ))
    params = wire.chat_request(request, "gpt-4o-mini")
    assert params["model"] == "gpt-4o-mini"
    assert params["max_completion_tokens"] == 321 and "max_tokens" not in params
    assert params["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "what is 2+3?"},
        {"role": "assistant", "content": "Adding.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_2",
         "content": "Error: the arguments were invalid"},
        {"role": "tool", "tool_call_id": "call_3", "content": "Error: already says so"},
    ]
    assert params["tools"] == [{"type": "function", "function": {
        "name": "add", "description": "Add two integers.", "parameters": ADD.parameters}}]
    json.dumps(params)  # the SDK sends it as JSON


def test_compatible_servers_get_max_tokens_and_no_empty_tools_or_system() -> None:
    request = ModelRequest(model="openai/llama3.1", system="", messages=(Message("user", "hi"),))
    params = wire.chat_request(request, "llama3.1", token_field=wire.MAX_TOKENS)
    assert params == {"model": "llama3.1", "max_tokens": 4096,
                      "messages": [{"role": "user", "content": "hi"}]}


# -- responses ---------------------------------------------------------------------------------


def test_a_tool_calling_response_maps_to_a_model_response() -> None:
    data = completion(None, [tool_call("add", {"a": 2, "b": 3}, call_id="call_9")],
                      usage_data=usage(prompt=1000, completion=50, cached=400))
    response = wire.model_response(data, "openai/gpt-4o-mini")
    assert response.tool_calls == (ToolCall("call_9", "add", {"a": 2, "b": 3}),)
    assert response.stop_reason == "tool_use" and response.text == ""
    assert response.usage == Usage(input_tokens=600, output_tokens=50, cache_read_tokens=400)
    assert response.model == "openai/gpt-4o-mini" and response.cost_usd is None


@pytest.mark.parametrize(("finish", "expected"), [
    ("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "end_turn"),
    (None, "end_turn")])
def test_finish_reasons_map_to_stop_reasons(finish: str | None, expected: str) -> None:
    data = completion("hello", finish_reason=finish)
    if finish is None:
        data["choices"][0]["finish_reason"] = None
    assert wire.model_response(data, "openai/x").stop_reason == expected


def test_tool_calls_reported_with_finish_reason_stop_are_still_tool_use() -> None:
    data = completion(None, [tool_call("add", "{}")], finish_reason="stop")
    assert wire.model_response(data, "openai/x").stop_reason == "tool_use"


@pytest.mark.parametrize(("raw", "why"), [
    ('{"a": 2, "b":', "invalid JSON (Expecting value at character 13)"),
    ("[1, 2]", "expected a JSON object, got an array"),
    ('"text"', "expected a JSON object, got a string"),
    ("null", "expected a JSON object, got null"),
])
def test_arguments_that_are_not_a_json_object_become_an_arguments_error(raw: str,
                                                                        why: str) -> None:
    data = completion(None, [tool_call("add", raw, call_id="call_1")])
    (call,) = wire.model_response(data, "openai/x").tool_calls
    assert (call.id, call.name, call.arguments) == ("call_1", "add", {})
    assert call.arguments_error is not None and call.arguments_error.startswith(why)


def test_lenient_arguments_from_compatible_servers() -> None:
    assert wire.parse_arguments("") == ({}, None)  # a call without arguments
    assert wire.parse_arguments(None) == ({}, None)
    assert wire.parse_arguments({"a": 1}) == ({"a": 1}, None)  # an object, not a string


def test_missing_usage_fields_count_as_zero_and_missing_ids_are_made() -> None:
    data: dict[str, Any] = {"choices": [{"message": {
        "content": "hi", "tool_calls": [{"function": {"name": "add", "arguments": "{}"}}]}}]}
    response = wire.model_response(data, "openai/llama3.1")
    assert response.usage == Usage()
    assert response.tool_calls[0].id.startswith("call_")
    assert wire.usage({"prompt_tokens": 7}) == Usage(input_tokens=7)
    assert wire.usage({"prompt_tokens": 7, "completion_tokens": 2,
                       "prompt_tokens_details": None}) == Usage(7, 2)


def test_a_refusal_is_the_text_and_a_body_without_choices_is_an_error() -> None:
    data = completion(None)
    data["choices"][0]["message"]["refusal"] = "I can't help with that."
    assert wire.model_response(data, "openai/x").text == "I can't help with that."
    with pytest.raises(ProviderError, match=r"without a completion.*overloaded"):
        wire.model_response({"error": {"message": "overloaded"}}, "openai/x")


# -- prices ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "expected"), [
    ("gpt-4o", "gpt-4o"), ("gpt-4o-2024-08-06", "gpt-4o"), ("gpt-4o-mini", "gpt-4o-mini"),
    ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"), ("gpt-4.1-nano-2025-04-14", "gpt-4.1-nano"),
    ("gpt-5-mini", "gpt-5-mini"), ("o3-pro", "o3-pro"), ("o3-2025-04-16", "o3"),
    ("GPT-4o", "gpt-4o"),
])
def test_prices_match_the_longest_model_name_and_dated_snapshots(name: str,
                                                                 expected: str) -> None:
    assert prices.lookup(name) is prices.MODELS[expected]


@pytest.mark.parametrize("name", ["llama3.1", "gpt-5.6", "o3-deep-research", "gpt-4o-realtime",
                                  "qwen2.5:7b", "gpt-4"])
def test_models_not_in_the_table_have_no_price(name: str) -> None:
    assert prices.lookup(name) is None


def test_table_entries_cost_what_the_price_list_says() -> None:
    info = prices.lookup("gpt-4o-mini-2024-07-18")
    assert info is not None and info.context_window == 128_000
    usage_ = Usage(input_tokens=600, output_tokens=50, cache_read_tokens=400)
    # 600 x 0.15 + 400 x 0.075 + 50 x 0.60 per million
    assert info.pricing.cost(usage_) == pytest.approx(0.00015)
    pro = prices.MODELS["o3-pro"].pricing
    assert pro.cost(Usage(cache_read_tokens=1_000_000)) == 20.0  # no cache discount


# -- errors ------------------------------------------------------------------------------------

URL = "http://localhost:11434/v1"
STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError, 401: openai.AuthenticationError,
    403: openai.PermissionDeniedError, 404: openai.NotFoundError, 409: openai.ConflictError,
    429: openai.RateLimitError}


def status_error(status: int, message: str = "bad", *, code: str | None = None,
                 param: str | None = None, headers: dict[str, str] | None = None,
                 body: Any = ...) -> openai.APIStatusError:
    """What the SDK raises for an error answer (the class its client picks by status)."""
    request = httpx2.Request("POST", f"{URL}/chat/completions")
    response = httpx2.Response(status, headers=headers or {}, request=request)
    if body is ...:
        body = {"message": message, "type": "invalid_request_error", "param": param,
                "code": code}
    kind = STATUS_ERRORS.get(status, openai.InternalServerError if status >= 500
                             else openai.APIStatusError)
    return kind(f"Error code: {status} - {message}", response=response, body=body)


def translate(exc: openai.OpenAIError) -> ProviderError:
    return errors.translate(exc, model_id="openai/gpt-4o-mini", endpoint=URL)


def test_a_429_is_retryable_after_the_retry_after_header() -> None:
    error = translate(status_error(429, "Rate limit reached", code="rate_limit_exceeded",
                                   headers={"retry-after": "7"}))
    assert (error.retryable, error.retry_after_s, error.status) == (True, 7.0, 429)
    assert "Rate limit reached" in error.message
    error = translate(status_error(429, headers={"retry-after-ms": "1500", "retry-after": "9"}))
    assert error.retry_after_s == 1.5
    assert translate(status_error(429)).retry_after_s is None


def test_retry_after_as_an_http_date_and_nonsense() -> None:
    assert errors.retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None  # past
    assert errors.retry_after({"retry-after": "soon"}) is None
    assert errors.retry_after({"retry-after": "-3"}) is None
    assert errors.retry_after({"retry-after": "1e12"}) == errors.MAX_RETRY_AFTER_S


def test_insufficient_quota_is_permanent_and_says_so() -> None:
    error = translate(status_error(429, "You exceeded your current quota",
                                   code="insufficient_quota"))
    assert not error.retryable and error.status == 429
    assert "no quota left" in error.message and "OPENAI_API_KEY" in error.message


@pytest.mark.parametrize("status", [500, 502, 503, 408, 409])
def test_server_errors_are_retryable(status: int) -> None:
    error = translate(status_error(status, "The server had an error"))
    assert error.retryable and error.status == status
    assert f"answered {status}" in error.message and "The server had an error" in error.message


def test_timeouts_and_connection_errors_are_retryable() -> None:
    request = httpx2.Request("POST", f"{URL}/chat/completions")
    error = translate(openai.APITimeoutError(request))
    assert error.retryable and "timeout" in error.message and URL in error.message
    error = translate(openai.APIConnectionError(request=request))
    assert error.retryable and "cannot connect to" in error.message


def test_context_length_exceeded_by_code_or_by_words() -> None:
    error = translate(status_error(400, "This model's maximum context length is 8192 tokens",
                                   code="context_length_exceeded"))
    assert isinstance(error, ContextWindowExceeded) and not error.retryable
    vllm = status_error(400, "This model's maximum context length is 4096 tokens. However, "
                             "you requested 5000 tokens", code=None)
    assert isinstance(translate(vllm), ContextWindowExceeded)
    llama_cpp = status_error(400, "the request exceeds the available context size, try "
                                  "increasing it", code=None)
    assert isinstance(translate(llama_cpp), ContextWindowExceeded)


def test_other_client_errors_are_permanent_with_the_providers_message() -> None:
    error = translate(status_error(400, "Invalid value for 'temperature'", param="temperature"))
    assert type(error) is ProviderError and not error.retryable and error.status == 400
    assert "Invalid value for 'temperature'" in error.message
    assert "Error code" not in error.message
    auth = translate(status_error(401, "Incorrect API key provided", code="invalid_api_key"))
    assert not auth.retryable and "OPENAI_API_KEY" in auth.message
    assert "Incorrect API key provided" in auth.message
    denied = translate(status_error(403, "Project does not have access to model"))
    assert not denied.retryable and "OPENAI_API_KEY" in denied.message
    missing = translate(status_error(404, 'model "llama3.1" not found, try pulling it first'))
    assert not missing.retryable and "openai/gpt-4o-mini" in missing.message
    assert URL in missing.message and "pulling it first" in missing.message
    plain = translate(status_error(400, body="not json at all"))
    assert "not json at all" in plain.message


def test_a_rejected_output_limit_field_is_recognised() -> None:
    openai_says = status_error(400, "Unsupported parameter: 'max_tokens' is not supported with "
                                    "this model. Use 'max_completion_tokens' instead.",
                               code="unsupported_parameter", param="max_tokens")
    assert errors.rejects_parameter(openai_says, "max_tokens")
    assert not errors.rejects_parameter(openai_says, "max_completion_tokens")
    old_server = status_error(400, "Unrecognized request argument supplied: "
                                   "max_completion_tokens")
    assert errors.rejects_parameter(old_server, "max_completion_tokens")
    assert not errors.rejects_parameter(status_error(400, "Invalid messages"), "max_tokens")


# -- provider ----------------------------------------------------------------------------------


def test_a_key_is_required_for_openai_but_not_for_a_server_of_ones_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    provider = OpenAIProvider()
    assert provider.prefix == "openai" and provider.supports_base_url
    assert provider.required_env_for("openai/gpt-4o-mini") == ("OPENAI_API_KEY",)
    assert provider.required_env_for("openai/llama3.1", URL) == ()
    assert provider.required_env_for("openai/gpt-4o", "https://api.openai.com/v1") == (
        "OPENAI_API_KEY",)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://vllm:8000/v1")
    assert provider.required_env_for("openai/meta-llama/Llama-3.1-8B-Instruct") == ()


def test_models_carry_price_window_endpoint_and_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    provider = OpenAIProvider()
    model = provider.get_model("openai/gpt-4o-2024-08-06")
    assert model.pricing == prices.MODELS["gpt-4o"].pricing
    assert model.context_window == 128_000
    assert model.endpoint == "https://api.openai.com/v1"  # type: ignore[attr-defined]
    assert model.token_field == "max_completion_tokens"  # type: ignore[attr-defined]
    local = provider.get_model("openai/llama3.1", base_url=URL + "/")
    assert local.pricing is None and local.context_window is None
    assert local.endpoint == URL and local.token_field == "max_tokens"  # type: ignore[attr-defined]
    monkeypatch.setenv("OPENAI_BASE_URL", "http://lmstudio:1234/v1")
    monkeypatch.setenv("TOREN_OPENAI_TIMEOUT", "12.5")
    env_model = provider.get_model("openai/qwen2.5-7b-instruct")
    assert env_model.endpoint == "http://lmstudio:1234/v1"  # type: ignore[attr-defined]
    assert env_model.timeout_s == 12.5  # type: ignore[attr-defined]
    # the agent's baseUrl wins over OPENAI_BASE_URL
    assert provider.get_model("openai/x", base_url=URL).endpoint == URL  # type: ignore[attr-defined]
    monkeypatch.setenv("TOREN_OPENAI_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="TOREN_OPENAI_TIMEOUT"):
        provider.get_model("openai/gpt-4o")
    with pytest.raises(ConfigError, match="names no model"):
        OpenAIProvider().get_model("openai/")


def test_openai_endpoints_are_recognised() -> None:
    assert is_openai_endpoint(None) and is_openai_endpoint("https://api.openai.com/v1")
    assert is_openai_endpoint("https://eu.api.openai.com/v1")
    assert is_openai_endpoint("https://my-resource.openai.azure.com/openai/v1")
    assert not is_openai_endpoint("http://localhost:11434/v1")
    assert not is_openai_endpoint("https://openai.example.com/v1")


def test_a_limit_that_is_too_high_is_not_mistaken_for_a_rejected_field() -> None:
    too_high = status_error(400, "max_tokens is too large: 200000. This model supports at most "
                                 "16384 completion tokens", param="max_tokens")
    assert not errors.rejects_parameter(too_high, "max_tokens")
