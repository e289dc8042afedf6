"""Error translation (SDK exception objects, and the real SDK against the fake over HTTP),
client configuration and preflight."""

from __future__ import annotations

import logging
import socket
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import anthropic
import fake_anthropic as fake
import httpx2
import pytest
from fake_anthropic import TEST_KEY, FakeFactory
from toren_anthropic.errors import provider_error, retry_after_s
from toren_anthropic.model import AnthropicModel
from toren_anthropic.provider import AnthropicProvider

from toren.errors import ContextWindowExceeded, ProviderError
from toren.seams.model import Message, ModelRequest
from toren.seams.plugins import PluginHost

MODEL = "anthropic/claude-sonnet-4-6"
REQUEST = ModelRequest(MODEL, "Be brief.", (Message("user", "hello"),))
ENDPOINT = "https://api.anthropic.com"


def status_exc(status: int, kind: str, text: str,
               headers: dict[str, str] | None = None) -> anthropic.APIStatusError:
    body = {"type": "error", "error": {"type": kind, "message": text}}
    request = httpx2.Request("POST", f"{ENDPOINT}/v1/messages")
    response = httpx2.Response(status, json=body, headers=headers or {}, request=request)
    return anthropic.APIStatusError(f"Error code: {status} - {body}", response=response,
                                    body=body)


def translate(exc: anthropic.AnthropicError) -> ProviderError:
    return provider_error(exc, model_id=MODEL, endpoint=ENDPOINT, timeout_s=600)


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529])
def test_transient_statuses_are_retryable(status: int) -> None:
    error = translate(status_exc(status, "overloaded_error", "Overloaded",
                                 {"retry-after": "7"}))
    assert type(error) is ProviderError
    assert (error.retryable, error.status, error.retry_after_s) == (True, status, 7.0)
    assert error.message == f"Anthropic API {status} overloaded_error for {MODEL}: Overloaded"


@pytest.mark.parametrize("text", [
    "prompt is too long: 212000 tokens > 200000 maximum",
    "input length and `max_tokens` exceed context limit: 190000 + 20000 > 200000, decrease "
    "input length or `max_tokens` and try again"])
def test_a_400_about_the_context_window_is_context_window_exceeded(text: str) -> None:
    error = translate(status_exc(400, "invalid_request_error", text))
    assert isinstance(error, ContextWindowExceeded) and not error.retryable
    assert text.split(":")[0] in error.message
    assert isinstance(translate(status_exc(413, "request_too_large", "Request exceeds the "
                                           "maximum size")), ContextWindowExceeded)


@pytest.mark.parametrize(("status", "kind", "hint"), [
    (400, "invalid_request_error", "tools.0.name: String should match pattern"),
    (401, "authentication_error", "set a valid ANTHROPIC_API_KEY"),
    (403, "permission_error", "check that the key in ANTHROPIC_API_KEY may use"),
    (404, "not_found_error", "check the model id in agent.yaml"),
    (402, "billing_error", "credit balance is too low")])
def test_other_client_errors_are_permanent_one_line_messages(status: int, kind: str,
                                                             hint: str) -> None:
    text = {400: "tools.0.name: String should match pattern", 402: "Your credit balance is\n"
            "too low"}.get(status, "nope")
    error = translate(status_exc(status, kind, text))
    assert type(error) is ProviderError and not error.retryable and error.status == status
    assert hint in error.message and "\n" not in error.message
    assert error.message.startswith(f"Anthropic API {status} {kind} for {MODEL}: ")


def test_connection_errors_and_timeouts_are_retryable() -> None:
    request = httpx2.Request("POST", f"{ENDPOINT}/v1/messages")
    timeout = translate(anthropic.APITimeoutError(request))
    assert timeout.retryable and "within 600s (TOREN_ANTHROPIC_TIMEOUT)" in timeout.message
    try:
        raise anthropic.APIConnectionError(request=request) from OSError("Connection refused")
    except anthropic.APIConnectionError as exc:
        down = translate(exc)
    assert down.retryable
    assert down.message == f"cannot reach the Anthropic API at {ENDPOINT}: Connection refused"


def test_retry_after_headers() -> None:
    now = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_s({"retry-after": "2"}) == 2.0
    assert retry_after_s({"retry-after": later}, now=now.timestamp()) == pytest.approx(30)
    assert retry_after_s({"retry-after": "whenever"}) is None
    assert retry_after_s({}) is None


# -- through the real SDK and HTTP ---------------------------------------------------------------


async def test_the_client_uses_the_base_url_the_key_and_makes_one_attempt(
        fake_anthropic: FakeFactory) -> None:
    server = await fake_anthropic([fake.server_error()], api_key=TEST_KEY)
    model = AnthropicProvider().get_model(MODEL, base_url=server.url)
    try:
        with pytest.raises(ProviderError) as raised:
            await model.complete(REQUEST)
    finally:
        await model.aclose()  # type: ignore[attr-defined]
    assert raised.value.retryable and raised.value.status == 500
    assert isinstance(raised.value.__cause__, anthropic.InternalServerError)
    # Toren's recorded backoff is the only retry: the SDK tried exactly once
    assert server.counts["/v1/messages"] == 1
    assert server.requests[0]["model"] == "claude-sonnet-4-6"
    assert server.headers[0]["authorization"] == f"Bearer {TEST_KEY}"


async def test_anthropic_base_url_is_honoured_without_baseurl(
        fake_anthropic: FakeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    server = await fake_anthropic([fake.text("hi", input_tokens=3, output_tokens=1)])
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    model = AnthropicProvider().get_model(MODEL)
    try:
        response = await model.complete(REQUEST)
    finally:
        await model.aclose()  # type: ignore[attr-defined]
    assert (response.text, response.usage.input_tokens) == ("hi", 3)


async def test_a_rate_limit_carries_retry_after_and_a_slow_answer_times_out(
        fake_anthropic: FakeFactory) -> None:
    server = await fake_anthropic([fake.rate_limited(3), fake.text("late")])
    model = AnthropicModel(MODEL, base_url=server.url, timeout_s=0.3)
    try:
        with pytest.raises(ProviderError) as limited:
            await model.complete(REQUEST)
        server.delay = 2.0
        with pytest.raises(ProviderError) as slow:
            await model.complete(REQUEST)
    finally:
        await model.aclose()
    assert (limited.value.retryable, limited.value.retry_after_s) == (True, 3.0)
    assert "rate_limit_error" in limited.value.message
    assert slow.value.retryable and "did not answer" in slow.value.message


def free_port() -> int:
    """A port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_unreachable_endpoint_is_a_retryable_error() -> None:
    port = free_port()
    model = AnthropicModel(MODEL, base_url=f"http://127.0.0.1:{port}", timeout_s=5)
    try:
        with pytest.raises(ProviderError) as raised:
            await model.complete(REQUEST)
    finally:
        await model.aclose()
    assert raised.value.retryable
    assert raised.value.message.startswith(f"cannot reach the Anthropic API at "
                                           f"http://127.0.0.1:{port}")


async def test_preflight_fails_on_a_rejected_key(fake_anthropic: FakeFactory) -> None:
    server = await fake_anthropic(api_key="another-key")
    model = AnthropicModel(MODEL, base_url=server.url)
    try:
        with pytest.raises(ProviderError) as raised:
            await model.preflight()
        server.api_key = None
        await model.preflight()  # accepted now
    finally:
        await model.aclose()
    message = raised.value.message
    assert "ANTHROPIC_API_KEY" in message and server.url in message and "401" in message
    assert server.counts["/v1/models"] == 2
    assert server.requests == []  # preflight costs nothing: no /v1/messages call


async def preflight_warnings(model: AnthropicModel,
                             caplog: pytest.LogCaptureFixture) -> list[str]:
    """Run the model's preflight (then close it); the warnings it logged."""
    try:
        with caplog.at_level(logging.INFO, logger="toren_anthropic"):
            await model.preflight()
    finally:
        await model.aclose()
    return [record.getMessage() for record in caplog.records
            if record.name.startswith("toren_anthropic") and record.levelno >= logging.WARNING]


async def test_preflight_starts_when_nothing_listens_saying_it_is_not_the_key(
        caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    model = AnthropicModel(MODEL, base_url=url)
    (warning,) = await preflight_warnings(model, caplog)
    assert f"the Anthropic API at {url} is unreachable, not a bad key" in warning
    assert MODEL in warning and "starting anyway" in warning


@pytest.mark.parametrize("outage", ["overloaded", "no answer"])
async def test_preflight_starts_through_an_outage_after_one_request(
        outage: str, fake_anthropic: FakeFactory, caplog: pytest.LogCaptureFixture) -> None:
    if outage == "overloaded":
        server = await fake_anthropic(models_reply=fake.overloaded())
        model = AnthropicModel(MODEL, base_url=server.url)
    else:
        server = await fake_anthropic(models_delay=30)
        model = AnthropicModel(MODEL, base_url=server.url, timeout_s=0.3)
    (warning,) = await preflight_warnings(model, caplog)
    assert "is unreachable, not a bad key" in warning
    assert ("529 overloaded_error" if outage == "overloaded" else "no answer within 0.3s"
            ) in warning
    assert server.counts["/v1/models"] == 1  # no retries: one bounded request, then start


async def test_preflight_skips_a_gateway_without_a_model_list(
        fake_anthropic: FakeFactory, caplog: pytest.LogCaptureFixture) -> None:
    server = await fake_anthropic(models_reply=fake.error(404, "not_found_error", "Not found"))
    model = AnthropicModel(MODEL, base_url=server.url)
    assert await preflight_warnings(model, caplog) == []
    assert "has no model list" in caplog.text


def test_the_entry_point_registers_the_provider() -> None:
    host = PluginHost(load=("toren-anthropic",))
    provider = host.provider_for(MODEL)
    assert isinstance(provider, AnthropicProvider)
    assert (provider.prefix, provider.required_env, provider.supports_base_url) == (
        "anthropic", ("ANTHROPIC_API_KEY",), True)
    assert host.info["anthropic"].distribution == "toren-anthropic"
    assert host.info["anthropic"].models == ["anthropic/*"]


@pytest.mark.parametrize(("reply", "retryable", "reason"), [
    (fake.overloaded(), True, "overloaded"),
    (fake.server_error(), True, "server_error"),
    (fake.rate_limited(1), True, "rate_limited"),
    (fake.error(404, "not_found_error", "model: claude-nonexistent"), False, "model_not_found"),
    (fake.unauthorized(), False, "auth"),
    (fake.invalid("temperature: range"), False, "invalid_request"),
    (fake.prompt_too_long(), False, "context_window_exceeded"),
])
async def test_errors_are_classified_for_fallbacks(fake_anthropic: FakeFactory, reply: Any,
                                                   retryable: bool, reason: str) -> None:
    # the kind decides whether the task falls back to the agent's next model (fallbacks:)
    server = await fake_anthropic([reply])
    model = AnthropicModel(MODEL, base_url=server.url)
    try:
        with pytest.raises(ProviderError) as failed:
            await model.complete(REQUEST)
    finally:
        await model.aclose()
    assert (failed.value.retryable, failed.value.reason) == (retryable, reason)
