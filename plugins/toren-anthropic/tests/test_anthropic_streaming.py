"""Streaming through the real SDK (``messages.stream``) against the fake's server-sent events:
text pieces as they arrive, the final message recorded as before, errors as before."""

from __future__ import annotations

import time

import fake_anthropic as fake
import pytest
from fake_anthropic import FakeFactory
from toren_anthropic.model import AnthropicModel

from toren.errors import ProviderError
from toren.seams.model import Message, ModelRequest, ToolCall, Usage

MODEL = "anthropic/claude-sonnet-4-6"
REQUEST = ModelRequest(MODEL, "Be brief.", (Message("user", "hello"),))


async def test_text_arrives_in_pieces_while_the_answer_streams(
        fake_anthropic: FakeFactory) -> None:
    server = await fake_anthropic([fake.text("one two three four", input_tokens=30,
                                             output_tokens=4)], stream_delay=0.2)
    model = AnthropicModel(MODEL, base_url=server.url)
    heard: list[tuple[float, str]] = []
    response = await model.stream(REQUEST, lambda text: heard.append((time.monotonic(), text)))
    await model.aclose()
    assert "".join(text for _, text in heard) == response.text == "one two three four"
    assert len(heard) == 4
    # each piece was heard before the next one was even sent
    sent = server.deltas_sent_at
    assert all(heard[i][0] < sent[i + 1] for i in range(len(heard) - 1))
    assert response.usage == Usage(input_tokens=30, output_tokens=4)
    assert server.requests[0]["stream"] is True


async def test_a_streamed_tool_call_is_recorded_whole(fake_anthropic: FakeFactory) -> None:
    server = await fake_anthropic([fake.tool_use("lookup", {"topic": "leases", "n": 2},
                                                 call_id="toolu_1", say="Let me look.")])
    model = AnthropicModel(MODEL, base_url=server.url)
    heard: list[str] = []
    response = await model.stream(REQUEST, heard.append)
    await model.aclose()
    assert "".join(heard) == "Let me look."
    assert response.tool_calls == (ToolCall("toolu_1", "lookup", {"topic": "leases", "n": 2}),)
    assert response.stop_reason == "tool_use"


async def test_errors_before_the_stream_are_the_usual_provider_errors(
        fake_anthropic: FakeFactory) -> None:
    server = await fake_anthropic([fake.rate_limited(3)])
    model = AnthropicModel(MODEL, base_url=server.url)
    with pytest.raises(ProviderError) as caught:
        await model.stream(REQUEST, lambda text: None)
    await model.aclose()
    assert caught.value.retryable and caught.value.status == 429
