"""Images and PDFs shown to Claude (issue 38 §4): ``image`` and ``document`` blocks with the
files' base64, in a user turn and inside a tool result, through the real SDK against the fake
Messages API (which checks the blocks as the API does); a run's files and a tool's image
through Toren; and a worker SIGKILLed right after the call that saw the image."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import fake_anthropic as fake
import msgspec
import psycopg
import pytest
from fake_anthropic import FakeFactory
from toren_anthropic import wire
from toren_anthropic.model import AnthropicModel, input_types_for
from toren_anthropic.provider import AnthropicProvider

from toren.core.attachments import Attachment, describe_file, estimated_tokens
from toren.core.catalog import validate_event
from toren.host.runtime import Runtime
from toren.plugin import IMAGE_TYPES, PDF_TYPE, Message, ModelRequest, ToolCall, ToolSpec
from toren.testing import OutputProcess, pdf_bytes, png_bytes, wait_for, write_agent_dir

RuntimeFactory = Callable[..., Awaitable[Runtime]]
MODEL = "anthropic/claude-sonnet-4-6"
SHOOT = ToolSpec("screenshot", "Take a screenshot.", {
    "type": "object", "properties": {"page": {"type": "string"}}, "required": ["page"]})
CHART, SHOT = png_bytes(640, 480, (10, 120, 200)), png_bytes(320, 200)
REPORT = pdf_bytes("Revenue grew 12%.", "Costs fell.")
SCREENSHOT_TOOLS = '''
import toren
from toren.testing import png_bytes


@toren.tool(idempotent=True)
def screenshot(page: str) -> toren.ToolResult:
    """Take a screenshot of a page."""
    return toren.ToolResult(f"screenshot of {page}",
                            files=[toren.ToolFile("shot.png", "image/png", png_bytes(320, 200))])


@toren.tool(idempotent=True)
def record(seen: str) -> str:
    """Record what was seen."""
    return f"recorded: {seen}"
'''


def attachment(file_id: str, name: str, content_type: str, data: bytes) -> Attachment:
    return describe_file(file_id=file_id, name=name, content_type=content_type,
                         size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest(),
                         data=data)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def image_block(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                        "data": b64(data)}}


def document_block(data: bytes) -> dict[str, Any]:
    return {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                           "data": b64(data)}}


def looked_at_request(*, prompt_caching: bool = False, question: str = "What do these show?"
                      ) -> ModelRequest:
    """A user turn with an image and a PDF, a tool call, and its result with an image."""
    chart = attachment("file_chart", "chart.png", "image/png", CHART)
    report = attachment("file_report", "report.pdf", PDF_TYPE, REPORT)
    shot = attachment("file_shot", "shot.png", "image/png", SHOT)
    return ModelRequest(
        MODEL, "Be brief.", (
            Message("user", question, attachments=(chart, report)),
            Message("assistant", "Let me look at the page too.",
                    tool_calls=(ToolCall("toolu_shot", "screenshot", {"page": "home"}),)),
            Message("tool", "screenshot of home", tool_call_id="toolu_shot",
                    attachments=(shot,))),
        (SHOOT,), prompt_caching=prompt_caching,
        attachment_data={"file_chart": CHART, "file_report": REPORT, "file_shot": SHOT})


# -- the wire, through the real SDK --------------------------------------------------------------


async def test_images_and_a_pdf_go_as_base64_blocks_in_the_user_turn_and_the_tool_result(
        fake_anthropic: FakeFactory) -> None:
    server = await fake_anthropic([fake.text("A chart, a report and a home page.")])
    model = AnthropicModel(MODEL, base_url=server.url)
    try:
        response = await model.complete(looked_at_request())
    finally:
        await model.aclose()

    assert response.text == "A chart, a report and a home page."
    assert response.usage.image_tokens == 0  # the kernel estimates them (attachment_tokens)
    (sent,) = server.requests
    assert sent["messages"] == [
        {"role": "user", "content": [
            image_block(CHART), document_block(REPORT),
            {"type": "text", "text": "What do these show?"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look at the page too."},
            {"type": "tool_use", "id": "toolu_shot", "name": "screenshot",
             "input": {"page": "home"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_shot", "content": [
                {"type": "text", "text": "screenshot of home"}, image_block(SHOT)]}]}]


async def test_cache_breakpoints_still_land_on_the_last_block_of_each_user_turn(
        fake_anthropic: FakeFactory) -> None:
    server = await fake_anthropic([fake.text("ok"), fake.text("ok")],
                                  cache=fake.PromptCache(min_tokens=1))
    model = AnthropicModel(MODEL, base_url=server.url)
    try:
        await model.complete(looked_at_request(prompt_caching=True))
        # a question-less turn: its last block, the image, carries the breakpoint
        await model.complete(looked_at_request(prompt_caching=True, question=""))
    finally:
        await model.aclose()

    with_text, without = server.requests
    assert wire.cache_breakpoints(with_text) == [
        "tools.0", "system.0", "messages.0.content.2", "messages.2.content.0"]
    assert wire.cache_breakpoints(without) == [
        "tools.0", "system.0", "messages.0.content.1", "messages.2.content.0"]
    assert without["messages"][0]["content"][-1]["type"] == "document"
    # the breakpoint marks the tool_result, never a block inside it
    inner = with_text["messages"][2]["content"][0]["content"]
    assert all("cache_control" not in block for block in inner)
    assert server.usages[1] is not None and server.usages[1]["cache_read_input_tokens"] > 0


def test_a_request_without_tools_gets_the_tool_results_image_after_its_text() -> None:
    request = looked_at_request()
    params = wire.request_params(ModelRequest(request.model, request.system, request.messages,
                                              attachment_data=request.attachment_data),
                                 model="claude-sonnet-4-6")
    assert params["messages"][2]["content"] == [
        {"type": "text", "text": "[result of screenshot call toolu_shot]\nscreenshot of home"},
        image_block(SHOT)]
    assert fake.conversation_problem(params) is None


def test_an_attachment_without_its_bytes_is_named_in_text_not_sent_empty() -> None:
    request = looked_at_request()
    params = wire.request_params(ModelRequest(
        request.model, request.system, request.messages, request.tools,
        attachment_data={"file_chart": CHART, "file_shot": SHOT}), model="claude-sonnet-4-6")
    first = params["messages"][0]["content"]
    assert first[0] == image_block(CHART)
    assert first[1]["type"] == "text" and first[1]["text"].startswith(
        "[not shown: report.pdf (application/pdf, 2 pages")
    assert fake.conversation_problem(params) is None


def test_the_fake_refuses_blocks_the_api_refuses() -> None:
    def problem(block: dict[str, Any]) -> str | None:
        return fake.conversation_problem({"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": [block, {"type": "text", "text": "What is it?"}]}]})

    assert problem(image_block(CHART)) is None and problem(document_block(REPORT)) is None
    assert "does not match the provided media type image/jpeg" in str(
        problem(image_block(CHART, "image/jpeg")))
    assert "media_type: Input should be" in str(problem(image_block(CHART, "image/bmp")))
    assert "PDF specified was not valid" in str(problem(
        {"type": "document", "source": {**document_block(REPORT)["source"],
                                        "data": b64(CHART)}}))
    assert "invalid base64" in str(problem({"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "not base64!"}}))


#: Every image type Toren shows, and PDFs.
ALL = IMAGE_TYPES | {PDF_TYPE}


@pytest.mark.parametrize(("api_model", "types"), [
    ("claude-sonnet-4-6", ALL), ("claude-haiku-4-5-20251001", ALL),
    ("claude-3-haiku-20240307", ALL), ("claude-some-future-model", ALL),
    ("claude-2.1", frozenset()), ("claude-instant-1.2", frozenset())])
def test_claude_3_and_later_take_images_and_pdfs(api_model: str,
                                                 types: frozenset[str]) -> None:
    assert input_types_for(api_model) == types
    model = AnthropicProvider().get_model(f"anthropic/{api_model}")
    assert model.input_types == types
    shown = attachment("f", "chart.png", "image/png", CHART)
    assert model.attachment_tokens(shown) == estimated_tokens(shown)  # the kernel's formula


# -- through Toren -------------------------------------------------------------------------------


async def add_file(runtime: Runtime, name: str, data: bytes, content_type: str) -> str:
    stored = await runtime.store.add_file(name=name, content_type=content_type, data=data,
                                          sha256=hashlib.sha256(data).hexdigest())
    return stored.id


async def finished(runtime: Runtime, run_id: str) -> tuple[Any, list[Any]]:
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    events = await runtime.events(run_id)
    for event in events:
        validate_event(event.stream, event.type, event.data)
    return record, events


async def test_a_runs_image_and_pdf_reach_claude_as_blocks(
        tmp_path: Path, fake_anthropic: FakeFactory,
        anthropic_runtime: RuntimeFactory) -> None:
    # the kernel records at most the call's input tokens as image tokens: bill enough
    server = await fake_anthropic([fake.text("A blue chart and a two-page report.",
                                             input_tokens=5000)])
    directory = write_agent_dir(tmp_path, "looker", model=MODEL, baseUrl=server.url)
    runtime = await anthropic_runtime([directory])
    image_id = await add_file(runtime, "chart.png", CHART, "image/png")
    pdf_id = await add_file(runtime, "report.pdf", REPORT, PDF_TYPE)

    run_id = await runtime.start_run("looker", "What do these show?",
                                     files=[image_id, pdf_id])
    record, events = await finished(runtime, run_id)

    assert (record.status, record.output) == ("completed", "A blue chart and a two-page report.")
    (sent,) = server.requests
    (turn,) = sent["messages"]
    assert turn["content"][:2] == [image_block(CHART), document_block(REPORT)]
    question = turn["content"][2]["text"]
    assert question.startswith("What do these show?") and image_id in question
    assert "cache_control" in turn["content"][2]  # promptCaching is on: the last block
    (call,) = [e.data for e in events if e.type == "ModelCallCompleted"]
    shown = [msgspec.convert(a, Attachment) for a in next(
        e.data for e in events if e.type == "TaskStarted")["attachments"]]
    assert call["image_tokens"] == sum(estimated_tokens(a) for a in shown) > 0


async def test_a_tools_image_is_sent_inside_its_tool_result(
        tmp_path: Path, fake_anthropic: FakeFactory,
        anthropic_runtime: RuntimeFactory) -> None:
    def answer(body: dict[str, Any]) -> fake.Reply:
        return fake.text(f"saw {len(fake.images(body))} image(s)", input_tokens=5000)

    server = await fake_anthropic([fake.tool_use("screenshot", {"page": "home"},
                                                 call_id="toolu_shot"), answer])
    directory = write_agent_dir(tmp_path, "shooter", model=MODEL, baseUrl=server.url,
                                tools_py=SCREENSHOT_TOOLS)
    runtime = await anthropic_runtime([directory])

    record, events = await finished(runtime, await runtime.start_run("shooter", "look"))

    assert (record.status, record.output) == ("completed", "saw 1 image(s)")
    first, second = server.requests
    assert fake.images(first) == []
    (result,) = fake.tool_results(second)
    assert result["content"] == [{"type": "text", "text": "screenshot of home"},
                                 image_block(SHOT)]
    (tool,) = [e.data for e in events if e.type == "ToolCallCompleted"]
    assert [(a["name"], a["width"], a["height"]) for a in tool["attachments"]] == [
        ("shot.png", 320, 200)]
    calls = [e.data for e in events if e.type == "ModelCallCompleted"]
    assert [c.get("image_tokens", 0) for c in calls] == [
        0, estimated_tokens(msgspec.convert(tool["attachments"][0], Attachment))]


# -- a worker killed right after the call that saw the image -------------------------------------


@pytest.mark.slow
def test_a_worker_killed_after_the_call_that_saw_the_image_is_not_called_again(
        database_url: str, tmp_path: Path, output_processes: list[OutputProcess]) -> None:
    toren = Path(sys.executable).parent / "toren"
    env = {key: value for key, value in os.environ.items()
           if key != "DATABASE_URL" and not key.startswith(("TOREN_", "ANTHROPIC_"))}
    env |= {"DATABASE_URL": database_url, "ANTHROPIC_API_KEY": "x",
            "TOREN_LOAD_PLUGINS": "toren-anthropic", "TOREN_LEASE_TTL": "1",
            "TOREN_POLL_INTERVAL": "0.2", "TOREN_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    server = OutputProcess([sys.executable, str(Path(fake.__file__)), "--screenshots"],
                           env=env, stderr_path=tmp_path / "fake.err")
    output_processes.append(server)
    url = f"http://127.0.0.1:{server.next_json(timeout=30)['port']}"
    directory = write_agent_dir(tmp_path, "seeing-claude", model=MODEL, baseUrl=url,
                                tools_py=SCREENSHOT_TOOLS)
    created = subprocess.run([str(toren), "run", "seeing-claude", "look", "--no-follow",
                              "--json", "--dir", str(directory)], env=env, capture_output=True,
                             text=True, timeout=60, check=False)
    assert created.returncode == 0, created.stderr
    run_id = json.loads(created.stdout)["id"]

    # step 2's call sees the screenshot and asks for record: its answer is appended before
    # record runs; the worker dies once record has run (its result not appended yet)
    crashing = env | {"TOREN_CRASH_AT": "after_tool@2",
                      "TOREN_CRASH_ONCE": str(tmp_path / "crashed")}
    doomed = OutputProcess([str(toren), "worker", "--dir", str(directory), "--json"],
                           env=crashing, stderr_path=tmp_path / "doomed.err")
    output_processes.append(doomed)
    assert doomed.proc.wait(timeout=60) == -signal.SIGKILL, doomed.stderr

    def state() -> tuple[str, Any, list[tuple[str, dict[str, Any]]]]:
        with psycopg.connect(database_url) as conn:
            status, output = conn.execute(
                "SELECT status, output FROM agent_seeing_claude.runs WHERE id = %s",
                [run_id]).fetchone()  # type: ignore[misc]
            rows = conn.execute("SELECT stream, type, data FROM agent_seeing_claude.events "
                                "WHERE run_id = %s ORDER BY stream, seq", [run_id]).fetchall()
        for stream, kind, data in rows:
            validate_event(stream, kind, data)
        return status, output, [(kind, data) for _stream, kind, data in rows]

    def paid() -> int:
        with urllib.request.urlopen(f"{url}/_fake/stats", timeout=10) as answer:
            return int(json.load(answer)["/v1/messages"])

    _status, _output, at_kill = state()
    seen = [data for kind, data in at_kill if kind == "ModelCallCompleted"]
    assert [(c["step"], c["tool_calls"][0]["name"]) for c in seen] == [
        (1, "screenshot"), (2, "record")]
    assert seen[1]["image_tokens"] > 0  # the call that saw the image was recorded
    assert paid() == 2

    worker = OutputProcess([str(toren), "worker", "--dir", str(directory), "--json"],
                           env=crashing, stderr_path=tmp_path / "worker.err")
    output_processes.append(worker)
    assert wait_for(lambda: state()[0] in ("completed", "failed"), 60), worker.stderr
    status, output, events = state()
    said = f"saw 1 image(s) of {len(SHOT)} bytes"
    assert (status, output) == ("completed", said)
    calls = [data for kind, data in events if kind == "ModelCallCompleted"]
    assert [(c["step"], c.get("repeated", False)) for c in calls] == [
        (1, False), (2, False), (3, False)]
    assert paid() == 3  # step 2, which saw the image, was not asked again
    recorded = [data["output"] for kind, data in events
                if kind == "ToolCallCompleted" and data["name"] == "record"]
    assert recorded == [f"recorded: {said}"]
