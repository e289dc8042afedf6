"""The model against the fake server over real HTTP, through the real SDK (no runtime)."""

from __future__ import annotations

import logging
import socket
from typing import Any

import pytest
from fake_openai import CHAT_PATH, MODELS_PATH, Fail, completion, rate_limited, tool_call, usage

from toren.errors import ContextWindowExceeded, ProviderError
from toren.seams.model import Message, ModelRequest, ToolCall, ToolSpec, Usage

REQUEST = ModelRequest(model="openai/gpt-4o-mini", system="Be brief.",
                       messages=(Message("user", "2+3?"),),
                       tools=(ToolSpec("add", "Add.", {"type": "object", "properties": {}}),))


async def test_a_call_round_trips_through_the_sdk(make_fake: Any, make_model: Any) -> None:
    fake = await make_fake([completion(None, [tool_call("add", {"a": 2}, call_id="call_1")],
                                       usage_data=usage(prompt=120, completion=7, cached=100))])
    model = make_model(base_url=fake.url)
    response = await model.complete(REQUEST)
    assert response.tool_calls == (ToolCall("call_1", "add", {"a": 2}),)
    assert response.usage == Usage(input_tokens=20, output_tokens=7, cache_read_tokens=100)
    assert response.model == "openai/gpt-4o-mini" and response.cost_usd is None
    (sent,) = fake.requests
    assert sent["model"] == "gpt-4o-mini" and sent["max_tokens"] == 4096
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["tools"][0]["function"]["name"] == "add"
    # no key set and a server of one's own: the SDK gets a placeholder key
    assert fake.authorizations == ["Bearer no-key-needed"]


async def test_the_api_key_is_sent_when_set(make_fake: Any, make_model: Any,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    fake = await make_fake([completion("hi")])
    await make_model(base_url=fake.url).complete(REQUEST)
    assert fake.authorizations == ["Bearer sk-test-123"]


async def test_openai_itself_needs_a_key(make_model: Any) -> None:
    with pytest.raises(ProviderError, match="OPENAI_API_KEY is not set"):
        await make_model().complete(REQUEST)


async def test_the_sdk_does_not_retry_on_its_own(make_fake: Any, make_model: Any) -> None:
    fake = await make_fake([Fail(500, "The server had an error", type="server_error"),
                            rate_limited("2")])
    model = make_model(base_url=fake.url)
    with pytest.raises(ProviderError) as failed:
        await model.complete(REQUEST)
    assert failed.value.retryable and failed.value.status == 500
    with pytest.raises(ProviderError) as limited:
        await model.complete(REQUEST)
    assert (limited.value.retryable, limited.value.retry_after_s) == (True, 2.0)
    assert fake.counts[CHAT_PATH] == 2  # one request per call: Toren's backoff is the only one


async def test_a_context_overflow_becomes_context_window_exceeded(make_fake: Any,
                                                                  make_model: Any) -> None:
    fake = await make_fake(max_prompt_chars=10)
    with pytest.raises(ContextWindowExceeded, match="maximum context length"):
        await make_model(base_url=fake.url).complete(REQUEST)


async def test_a_rejected_max_tokens_switches_to_max_completion_tokens_once(
        make_fake: Any, make_model: Any) -> None:
    fake = await make_fake([
        Fail(400, "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                  "'max_completion_tokens' instead.", code="unsupported_parameter",
             param="max_tokens"),
        completion("first"), completion("second")])
    model = make_model("openai/o3", base_url=fake.url)
    assert (await model.complete(REQUEST)).text == "first"
    assert (await model.complete(REQUEST)).text == "second"
    fields = [("max_tokens" in r, "max_completion_tokens" in r) for r in fake.requests]
    assert fields == [(True, False), (False, True), (False, True)]


async def test_a_timeout_is_retryable(make_fake: Any, make_model: Any,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_OPENAI_TIMEOUT", "0.1")
    fake = await make_fake([completion("late")], delay_s=0.5)
    with pytest.raises(ProviderError, match="within the timeout") as late:
        await make_model(base_url=fake.url).complete(REQUEST)
    assert late.value.retryable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_unreachable_server_is_retryable_for_calls(make_model: Any) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    model = make_model("openai/llama3.1", base_url=url)
    with pytest.raises(ProviderError, match="cannot connect to") as down:
        await model.complete(REQUEST)
    assert down.value.retryable


def preflight_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.name.startswith("toren_openai") and record.levelno >= logging.WARNING]


async def test_preflight_starts_when_nothing_listens_saying_it_is_not_the_key(
        make_model: Any, caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with caplog.at_level(logging.INFO, logger="toren_openai"):
        await make_model("openai/llama3.1", base_url=url).preflight()
    (warning,) = preflight_warnings(caplog)
    assert f"{url} is unreachable, not a bad key" in warning
    assert "openai/llama3.1" in warning and "starting anyway" in warning


@pytest.mark.parametrize("outage", ["server error", "no answer"])
async def test_preflight_starts_through_an_outage_after_one_request(
        outage: str, make_fake: Any, make_model: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    if outage == "server error":
        fake = await make_fake(models_status=503)
    else:
        monkeypatch.setenv("TOREN_OPENAI_TIMEOUT", "0.3")  # preflight waits at most this long
        fake = await make_fake(models_delay_s=30)
    with caplog.at_level(logging.INFO, logger="toren_openai"):
        await make_model(base_url=fake.url).preflight()
    (warning,) = preflight_warnings(caplog)
    assert "is unreachable, not a bad key" in warning
    assert ("answered 503" if outage == "server error" else "no answer within 0.3s") in warning
    assert fake.counts[MODELS_PATH] == 1  # no retries: one bounded request, then start


async def test_preflight_lists_models_and_refuses_a_rejected_key(make_fake: Any,
                                                                 make_model: Any) -> None:
    good = await make_fake()
    await make_model(base_url=good.url).preflight()
    assert good.counts[MODELS_PATH] == 1 and good.counts[CHAT_PATH] == 0
    bad = await make_fake(models_status=401)
    with pytest.raises(ProviderError) as refused:
        await make_model(base_url=bad.url).preflight()
    assert refused.value.status == 401
    assert "OPENAI_API_KEY" in refused.value.message and bad.url in refused.value.message
    assert "Incorrect API key provided" in refused.value.message


async def test_preflight_passes_a_server_without_a_model_list(
        make_fake: Any, make_model: Any, caplog: pytest.LogCaptureFixture) -> None:
    fake = await make_fake(models_status=404)
    with caplog.at_level(logging.INFO, logger="toren_openai"):
        await make_model("openai/llama3.1", base_url=fake.url).preflight()
    assert "has no model list" in caplog.text


async def test_preflight_warns_about_a_model_the_server_does_not_list(
        make_fake: Any, make_model: Any, caplog: pytest.LogCaptureFixture) -> None:
    fake = await make_fake(models=["llama3.1:8b"])
    with caplog.at_level(logging.WARNING, logger="toren_openai"):
        await make_model("openai/llama3.1", base_url=fake.url).preflight()
    assert "does not list llama3.1" in caplog.text


@pytest.mark.parametrize(("answer", "retryable", "reason"), [
    (Fail(503, "The engine is currently overloaded, please try again later",
          type="server_error"), True, "overloaded"),
    (Fail(500, "The server had an error", type="server_error"), True, "server_error"),
    (rate_limited("1"), True, "rate_limited"),
    (Fail(429, "You exceeded your current quota", code="insufficient_quota",
          type="insufficient_quota"), False, "quota"),
    (Fail(404, "The model `gpt-9` does not exist", code="model_not_found"), False,
     "model_not_found"),
    (Fail(401, "Incorrect API key provided", code="invalid_api_key"), False, "auth"),
    (Fail(400, "Invalid value for 'temperature'"), False, "invalid_request"),
])
async def test_errors_are_classified_for_fallbacks(make_fake: Any, make_model: Any,
                                                   answer: Fail, retryable: bool,
                                                   reason: str) -> None:
    # the kind decides whether the task falls back to the agent's next model (fallbacks:)
    fake = await make_fake([answer])
    with pytest.raises(ProviderError) as failed:
        await make_model(base_url=fake.url).complete(REQUEST)
    assert (failed.value.retryable, failed.value.reason) == (retryable, reason)


async def test_a_context_overflow_is_classified_for_fallbacks(make_fake: Any,
                                                              make_model: Any) -> None:
    fake = await make_fake(max_prompt_chars=10)
    with pytest.raises(ContextWindowExceeded) as failed:
        await make_model(base_url=fake.url).complete(REQUEST)
    assert failed.value.reason == "context_window_exceeded"
