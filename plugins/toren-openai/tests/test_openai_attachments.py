"""Images and PDFs shown to OpenAI models (issue 38 §4) through Chat Completions: ``image_url``
and ``file`` parts with the files' base64 in a user message, a tool's files in ONE user message
after the tool messages of its assistant turn (each tool message still right after its
assistant message), through the real SDK against the fake (which checks both as OpenAI does);
which models see, and OpenAI's token formulas; a run's files and a tool's image through Toren;
a model that cannot see reads a note; and a worker SIGKILLed right after the call that saw the
image."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import fake_openai as fake
import msgspec
import psycopg
import pytest
from fake_openai import completion, tool_call, usage
from toren_openai import vision, wire

from toren.core.attachments import Attachment, describe_file, estimated_tokens
from toren.core.catalog import validate_event
from toren.host.runtime import Runtime
from toren.plugin import IMAGE_TYPES, PDF_TYPE, Message, ModelRequest, ToolCall, ToolSpec
from toren.testing import OutputProcess, pdf_bytes, png_bytes, wait_for, write_agent_dir

CHART, SHOT, PAGE = png_bytes(640, 480, (10, 120, 200)), png_bytes(320, 200), png_bytes(
    1024, 1024, (0, 0, 0))
REPORT = pdf_bytes("Revenue grew 12%.", "Costs fell.")
SHOOT = ToolSpec("screenshot", "Take a screenshot.", {
    "type": "object", "properties": {"page": {"type": "string"}}, "required": ["page"]})
LOOKUP = ToolSpec("lookup", "Look a page up.", {
    "type": "object", "properties": {"page": {"type": "string"}}, "required": ["page"]})
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


def data_url(content_type: str, data: bytes) -> str:
    return f"data:{content_type};base64,{base64.b64encode(data).decode()}"


def image_part(data: bytes) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url("image/png", data)}}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


# -- the wire, through the real SDK --------------------------------------------------------------


async def test_a_users_files_are_parts_and_tool_files_follow_the_turns_tool_messages(
        make_fake: Any, make_model: Any) -> None:
    chart = attachment("file_chart", "chart.png", "image/png", CHART)
    report = attachment("file_report", "report.pdf", PDF_TYPE, REPORT)
    shot = attachment("file_shot", "shot.png", "image/png", SHOT)
    page = attachment("file_page", "page.png", "image/png", PAGE)
    request = ModelRequest(
        "openai/gpt-4o", "Be brief.", (
            Message("user", "What do these show?", attachments=(chart, report)),
            Message("assistant", "Looking at the pages.", tool_calls=(
                ToolCall("call_a", "screenshot", {"page": "home"}),
                ToolCall("call_b", "lookup", {"page": "home"}),
                ToolCall("call_c", "screenshot", {"page": "about"}))),
            Message("tool", "screenshot of home", tool_call_id="call_a", attachments=(shot,)),
            Message("tool", "a page about us", tool_call_id="call_b"),
            Message("tool", "screenshot of about", tool_call_id="call_c",
                    attachments=(page,)),
            Message("user", "Thanks.")),
        (SHOOT, LOOKUP),
        attachment_data={"file_chart": CHART, "file_report": REPORT, "file_shot": SHOT,
                         "file_page": PAGE})
    server = await make_fake([completion("A chart, a report and two pages.")])
    model = make_model("openai/gpt-4o", server.url)

    response = await model.complete(request)

    assert response.text == "A chart, a report and two pages."
    assert response.usage.image_tokens == 0  # the kernel estimates them (attachment_tokens)
    (sent,) = server.requests
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [
            text_part("What do these show?"), image_part(CHART),
            {"type": "file", "file": {"filename": "report.pdf",
                                      "file_data": data_url(PDF_TYPE, REPORT)}}]},
        {"role": "assistant", "content": "Looking at the pages.", "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": name, "arguments": json.dumps({"page": page_name})}}
            for call, name, page_name in (("call_a", "screenshot", "home"),
                                          ("call_b", "lookup", "home"),
                                          ("call_c", "screenshot", "about"))]},
        {"role": "tool", "tool_call_id": "call_a", "content": "screenshot of home"},
        {"role": "tool", "tool_call_id": "call_b", "content": "a page about us"},
        {"role": "tool", "tool_call_id": "call_c", "content": "screenshot of about"},
        {"role": "user", "content": [
            text_part("Files returned by screenshot (call call_a):"), image_part(SHOT),
            text_part("Files returned by screenshot (call call_c):"), image_part(PAGE)]},
        {"role": "user", "content": "Thanks."}]


def test_the_fake_refuses_what_openai_refuses() -> None:
    def problem(messages: list[dict[str, Any]], model: str = "gpt-4o") -> str | None:
        refused = fake.conversation_problem({"model": model, "messages": messages})
        return refused.message if refused is not None else None

    called = {"role": "assistant", "content": None, "tool_calls": [
        tool_call("screenshot", {"page": "home"}, call_id="call_a")]}
    result = {"role": "tool", "tool_call_id": "call_a", "content": "shot"}
    files = {"role": "user", "content": [image_part(SHOT)]}
    assert problem([{"role": "user", "content": "go"}, called, result, files]) is None
    assert "must be followed by tool messages" in str(
        problem([{"role": "user", "content": "go"}, called, files, result]))
    assert "must be a response to a preceeding message with 'tool_calls'" in str(
        problem([{"role": "user", "content": "go"}, result]))
    assert "not allowed in messages with role 'tool'" in str(problem([
        {"role": "user", "content": "go"}, called, {**result, "content": [image_part(SHOT)]}]))
    assert "image_url is only supported by certain models" in str(
        problem([files], model="gpt-3.5-turbo"))
    assert "unsupported image" in str(problem([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url("image/png", REPORT)}}]}]))
    assert "a base64 data: URL of a PDF" in str(problem([{"role": "user", "content": [
        {"type": "file", "file": {"filename": "x.pdf", "file_data": data_url(PDF_TYPE, SHOT)}}
    ]}]))


def test_an_attachment_without_its_bytes_is_named_in_text_not_sent_empty() -> None:
    report = attachment("file_report", "report.pdf", PDF_TYPE, REPORT)
    params = wire.chat_request(ModelRequest("openai/gpt-4o", "", (
        Message("user", "Read it.", attachments=(report,)),)), "gpt-4o")
    (message,) = params["messages"]
    assert message["content"][0] == text_part("Read it.")
    assert message["content"][1]["text"].startswith(
        "[not shown: report.pdf (application/pdf, 2 pages")


# -- which models see, and what an image costs them ----------------------------------------------

ALL = IMAGE_TYPES | {PDF_TYPE}


@pytest.mark.parametrize(("model_id", "base_url", "types"), [
    ("openai/gpt-4o", None, ALL), ("openai/gpt-4o-mini-2024-07-18", None, ALL),
    ("openai/gpt-4.1-nano", None, ALL), ("openai/gpt-5.4-mini", None, ALL),
    ("openai/o1", None, ALL), ("openai/o3-pro", None, ALL), ("openai/o4-mini", None, ALL),
    ("openai/gpt-3.5-turbo", None, frozenset()), ("openai/gpt-4", None, frozenset()),
    ("openai/o1-mini", None, frozenset()), ("openai/o3-mini-2025-01-31", None, frozenset()),
    ("openai/gpt-4o-audio-preview", None, frozenset()),
    ("openai/gpt-4o-search-preview", None, frozenset()),
    # a server of one's own: by the same names (a gateway's gpt-4o sees; llava is unknown)
    ("openai/llama3.1", "http://localhost:11434/v1", frozenset()),
    ("openai/llava", "http://localhost:11434/v1", frozenset()),
    ("openai/gpt-4o", "http://gateway:4000/v1", ALL),
    ("openai/openai/gpt-4.1", "http://gateway:4000/v1", ALL)])
def test_the_vision_models_take_images_and_pdfs(make_model: Any, model_id: str,
                                                base_url: str | None,
                                                types: frozenset[str]) -> None:
    assert make_model(model_id, base_url).input_types == types


@pytest.mark.parametrize(("model", "width", "height", "tokens"), [
    # OpenAI's worked examples (images-vision guide, "Calculating costs")
    ("gpt-4o", 1024, 1024, 85 + 170 * 4),  # scaled to 768 x 768: 4 tiles
    ("gpt-4o", 2048, 4096, 85 + 170 * 6),  # to 1024 x 2048, then 768 x 1536: 6 tiles
    ("gpt-4.1-mini", 1024, 1024, 1659),  # 1,024 patches x 1.62
    ("gpt-5-mini", 1800, 2400, 2352),  # scaled to 33 x 44 = 1,452 patches, x 1.62
    # small images are not enlarged: one tile
    ("gpt-4o", 128, 64, 85 + 170), ("gpt-4o-mini", 128, 64, 2833 + 5667),
    ("gpt-4o-mini-2024-07-18", 320, 200, 2833 + 5667), ("o3", 320, 200, 75 + 150),
    ("gpt-5", 1024, 1024, 70 + 140 * 4), ("o4-mini", 128, 64, round(8 * 1.72)),
    ("gpt-4.1-nano", 128, 64, round(8 * 2.46)),
    # unknown size: the most an image can cost (2 x 4 tiles; 1,536 patches)
    ("gpt-4o", None, None, 85 + 170 * 8), ("gpt-5-nano", None, None, round(1536 * 2.46))])
def test_image_tokens_follow_openais_published_formulas(
        model: str, width: int | None, height: int | None, tokens: int) -> None:
    assert vision.image_tokens(model, width, height) == tokens


def test_the_model_counts_images_by_its_formula_and_pdfs_by_the_default(
        make_model: Any) -> None:
    model = make_model("openai/gpt-4o-mini")
    chart = attachment("f1", "chart.png", "image/png", CHART)
    report = attachment("f2", "report.pdf", PDF_TYPE, REPORT)
    assert model.attachment_tokens(chart) == 2833 + 5667 * 2  # 640 x 480: 2 x 1 tiles
    assert model.attachment_tokens(report) == estimated_tokens(report) == 2 * 1600


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


def of_type(events: list[Any], kind: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == kind]


async def test_a_runs_image_and_pdf_reach_the_model_as_parts(
        make_fake: Any, start_runtime: Any, tmp_path: Path) -> None:
    # the kernel records at most the call's input tokens as image tokens: bill enough
    server = await make_fake([completion("A blue chart and a two-page report.",
                                         usage_data=usage(prompt=50_000, completion=9))])
    runtime = await start_runtime(write_agent_dir(tmp_path, "looker", model="openai/gpt-4o-mini",
                                                  baseUrl=server.url))
    image_id = await add_file(runtime, "chart.png", CHART, "image/png")
    pdf_id = await add_file(runtime, "report.pdf", REPORT, PDF_TYPE)

    record, events = await finished(runtime, await runtime.start_run(
        "looker", "What do these show?", files=[image_id, pdf_id]))

    assert (record.status, record.output) == ("completed", "A blue chart and a two-page report.")
    (sent,) = server.requests
    question, image, pdf = sent["messages"][1]["content"]
    assert question["text"].startswith("What do these show?") and image_id in question["text"]
    assert image == image_part(CHART)
    assert pdf == {"type": "file", "file": {"filename": "report.pdf",
                                            "file_data": data_url(PDF_TYPE, REPORT)}}
    (call,) = of_type(events, "ModelCallCompleted")
    assert call["image_tokens"] == (2833 + 5667 * 2) + 2 * 1600  # gpt-4o-mini's tiles; pages


async def test_a_tools_image_follows_the_tool_message_in_a_user_message(
        make_fake: Any, start_runtime: Any, tmp_path: Path) -> None:
    server = await make_fake(responder=fake.look_at_screenshots)
    runtime = await start_runtime(write_agent_dir(
        tmp_path, "shooter", model="openai/gpt-4o", baseUrl=server.url,
        tools_py=SCREENSHOT_TOOLS))

    record, events = await finished(runtime, await runtime.start_run("shooter", "look"))

    said = f"saw 1 image(s) of {len(SHOT)} bytes"
    assert (record.status, record.output) == ("completed", said)
    first, second, third = server.requests
    assert fake.images(first) == []
    assert [m["role"] for m in second["messages"]] == [
        "system", "user", "assistant", "tool", "user"]
    assert second["messages"][3] == {"role": "tool", "tool_call_id": "call_shot",
                                     "content": "screenshot of home"}
    assert second["messages"][4] == {"role": "user", "content": [
        text_part("Files returned by screenshot (call call_shot):"), image_part(SHOT)]}
    # the next turn's assistant and tool messages come after it, adjacent as ever
    assert [m["role"] for m in third["messages"]] == [
        "system", "user", "assistant", "tool", "user", "assistant", "tool"]
    (shot,) = of_type(events, "ToolCallCompleted")[0]["attachments"]
    calls = of_type(events, "ModelCallCompleted")
    assert [c.get("image_tokens", 0) for c in calls] == [0, 85 + 170, 85 + 170]
    assert (shot["width"], shot["height"]) == (320, 200)


async def test_a_model_that_takes_no_images_reads_a_note_and_gets_no_image_part(
        make_fake: Any, start_runtime: Any, tmp_path: Path) -> None:
    server = await make_fake(responder=fake.look_at_screenshots)
    runtime = await start_runtime(write_agent_dir(
        tmp_path, "blind", model="openai/gpt-3.5-turbo", baseUrl=server.url,
        tools_py=SCREENSHOT_TOOLS))
    image_id = await add_file(runtime, "chart.png", CHART, "image/png")

    record, events = await finished(runtime, await runtime.start_run(
        "blind", "What is this?", files=[image_id]))

    # the fake refuses any image part for gpt-3.5-turbo, as OpenAI does: none was sent
    assert (record.status, record.output) == ("completed", "saw 0 image(s) of 0 bytes")
    assert all(fake.images(body) == [] for body in server.requests)
    first = server.requests[0]["messages"][1]["content"]
    assert isinstance(first, str) and "chart.png" in first and image_id in first
    tool_message = server.requests[1]["messages"][3]
    assert tool_message["role"] == "tool"
    assert tool_message["content"].startswith("screenshot of home\n\n[openai/gpt-3.5-turbo "
                                              "cannot be shown these files")
    assert "shot.png (image/png, 320x200 px" in tool_message["content"]
    assert [m["role"] for m in server.requests[1]["messages"]] == [
        "system", "user", "assistant", "tool"]  # no user message of files
    assert all(c.get("image_tokens", 0) == 0 for c in of_type(events, "ModelCallCompleted"))
    shown = msgspec.convert(of_type(events, "ToolCallCompleted")[0]["attachments"],
                            tuple[Attachment, ...])
    assert [a.name for a in shown] == ["shot.png"]  # stored and recorded all the same


# -- a worker killed right after the call that saw the image -------------------------------------


@pytest.mark.slow
def test_a_worker_killed_after_the_call_that_saw_the_image_is_not_called_again(
        database_url: str, tmp_path: Path, output_processes: list[OutputProcess]) -> None:
    toren = Path(sys.executable).parent / "toren"
    env = {key: value for key, value in os.environ.items()
           if key != "DATABASE_URL" and not key.startswith(("TOREN_", "OPENAI_"))}
    env |= {"DATABASE_URL": database_url, "OPENAI_API_KEY": "x",
            "TOREN_LOAD_PLUGINS": "toren-openai", "TOREN_LEASE_TTL": "1",
            "TOREN_POLL_INTERVAL": "0.2", "TOREN_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    server = OutputProcess([sys.executable, str(Path(fake.__file__)), "--screenshots"],
                           env=env, stderr_path=tmp_path / "fake.err")
    output_processes.append(server)
    url = server.next_json(timeout=30)["url"]
    directory = write_agent_dir(tmp_path, "seeing-gpt", model="openai/gpt-4o", baseUrl=url,
                                tools_py=SCREENSHOT_TOOLS)
    created = subprocess.run([str(toren), "run", "seeing-gpt", "look", "--no-follow", "--json",
                              "--dir", str(directory)], env=env, capture_output=True, text=True,
                             timeout=60, check=False)
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
                "SELECT status, output FROM agent_seeing_gpt.runs WHERE id = %s",
                [run_id]).fetchone()  # type: ignore[misc]
            rows = conn.execute("SELECT stream, type, data FROM agent_seeing_gpt.events "
                                "WHERE run_id = %s ORDER BY stream, seq", [run_id]).fetchall()
        for stream, kind, data in rows:
            validate_event(stream, kind, data)
        return status, output, [(kind, data) for _stream, kind, data in rows]

    def paid() -> int:
        stats = url.removesuffix("/v1") + "/_fake/stats"
        with urllib.request.urlopen(stats, timeout=10) as answer:
            return int(json.load(answer)["counts"]["/v1/chat/completions"])

    _status, _output, at_kill = state()
    seen = [data for kind, data in at_kill if kind == "ModelCallCompleted"]
    assert [(c["step"], c["tool_calls"][0]["name"]) for c in seen] == [
        (1, "screenshot"), (2, "record")]
    assert seen[1]["image_tokens"] == 85 + 170  # the call that saw the image was recorded
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
