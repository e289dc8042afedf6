"""Streaming Chat Completions through the real SDK against the fake's ``data:`` chunks: text
pieces as they arrive, tool call fragments put together, usage from the last chunk, and a
server that rejects ``stream_options``."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from fake_openai import Fail, completion, tool_call, usage
from toren_openai import wire

from toren.seams.model import Message, ModelRequest, ToolCall, Usage

REQUEST = ModelRequest("openai/gpt-4o-mini", "Be brief.", (Message("user", "hello"),))


async def test_text_arrives_in_pieces_while_the_answer_streams(make_fake: Any,
                                                               make_model: Any) -> None:
    fake = await make_fake([completion("one two three four",
                                       usage_data=usage(prompt=11, completion=4))],
                           stream_delay_s=0.2)
    model = make_model(base_url=fake.url)
    heard: list[tuple[float, str]] = []
    response = await model.stream(REQUEST, lambda text: heard.append((time.monotonic(), text)))
    assert "".join(text for _, text in heard) == response.text == "one two three four"
    assert len(heard) == 4
    # each piece was heard before the next one was even sent
    sent = fake.first_content_at
    assert all(heard[i][0] < sent[i + 1] for i in range(len(heard) - 1))
    assert response.usage == Usage(input_tokens=11, output_tokens=4)
    (sent,) = fake.requests
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


async def test_tool_call_fragments_are_put_together(make_fake: Any, make_model: Any) -> None:
    fake = await make_fake([completion("Looking.", [
        tool_call("lookup", {"topic": "leases"}, call_id="call_a"),
        tool_call("add", {"a": 1, "b": 2}, call_id="call_b")])])
    model = make_model(base_url=fake.url)
    heard: list[str] = []
    response = await model.stream(REQUEST, heard.append)
    assert "".join(heard) == "Looking."
    assert response.tool_calls == (ToolCall("call_a", "lookup", {"topic": "leases"}),
                                   ToolCall("call_b", "add", {"a": 1, "b": 2}))
    assert response.stop_reason == "tool_use"


async def test_a_server_rejecting_stream_options_streams_without_usage(
        make_fake: Any, make_model: Any) -> None:
    fake = await make_fake([Fail(400, "Unrecognized request argument supplied: stream_options",
                                 param="stream_options", code="unsupported_parameter"),
                            completion("fine"), completion("again")])
    model = make_model(base_url=fake.url)
    assert (await model.stream(REQUEST, lambda text: None)).text == "fine"
    assert (await model.stream(REQUEST, lambda text: None)).text == "again"
    assert ["stream_options" in body for body in fake.requests] == [True, False, False]


async def test_a_server_answering_a_stream_request_with_json_is_read_whole(
        make_fake: Any, make_model: Any, caplog: pytest.LogCaptureFixture) -> None:
    fake = await make_fake([completion("all at once", usage_data=usage(prompt=7, completion=3)),
                            completion("Looking.", [tool_call("lookup", {"topic": "x"},
                                                              call_id="call_a")])],
                           stream_as_json=True)
    model = make_model(base_url=fake.url)
    heard: list[str] = []

    with caplog.at_level(logging.WARNING, logger="toren_openai"):
        first = await model.stream(REQUEST, heard.append)
        second = await model.stream(REQUEST, heard.append)

    assert first.text == "all at once" and first.usage == Usage(input_tokens=7, output_tokens=3)
    assert second.tool_calls == (ToolCall("call_a", "lookup", {"topic": "x"}),)
    assert heard == ["all at once", "Looking."]  # watchers hear the text, whole
    assert [body["stream"] for body in fake.requests] == [True, True]  # one request per call
    said = [r.getMessage() for r in caplog.records if "plain JSON" in r.getMessage()]
    assert len(said) == 1, said  # once, not per call


def test_a_stream_is_put_back_together_from_chunks() -> None:
    streamed = wire.StreamedCompletion()
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"content": "Hi "}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "c1", "function": {"name": "f", "arguments": '{"x"'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": ": 1}"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    ]
    said = [streamed.add(chunk) for chunk in chunks]
    assert said == ["", "Hi ", "", "", "", ""]
    response = wire.model_response(streamed.completion(), "openai/x")
    assert response.text == "Hi " and response.tool_calls == (ToolCall("c1", "f", {"x": 1}),)
    assert response.usage.input_tokens == 3 and response.usage.output_tokens == 2
    # an empty stream is an answer without a completion, as before
    assert wire.StreamedCompletion().completion() == {}
