"""Images and PDFs shown to the model (issue 38 §4), in process on real Postgres: a run's and
a session's files and a tool's returned image reach the model as attachments (references in
the log, bytes read before each call), a model that cannot take them reads a note, a deleted
file becomes a note, compaction names the files it drops, and receipts count image tokens."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from toren.core import events as ev
from toren.core.attachments import Attachment, estimated_tokens
from toren.errors import AgentDefinitionError
from toren.host.runtime import Runtime
from toren.seams.model import ModelRequest, ModelResponse, Usage
from toren.testing import ScriptedModel, pdf_bytes, png_bytes, write_agent_dir

MakeRuntime = Callable[..., Awaitable[Runtime]]

SCREENSHOT_TOOL = """
import toren
from toren.testing import png_bytes

@toren.tool
def screenshot(page: str) -> toren.ToolResult:
    'Take a screenshot of a page.'
    return toren.ToolResult(f"screenshot of {page}",
                            files=[toren.ToolFile("shot.png", "image/png", png_bytes(320, 200))])

@toren.tool
def bad_file(page: str) -> toren.ToolResult:
    'Return a file that is not what it says.'
    return toren.ToolResult("here", files=[toren.ToolFile("x.png", "image/png", b"%PDF-1.4")])
"""


class SeeingModel(ScriptedModel):
    """The scripted model, recording each request's attachments and the bytes it got."""

    def __init__(self, model_id: str = "test/see", *,
                 input_types: frozenset[str] | None = None, **kwargs: Any) -> None:
        super().__init__(model_id, **kwargs)
        if input_types is not None:
            self.input_types = input_types
        self.seen: list[list[tuple[str, str]]] = []
        self.texts: list[list[str]] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.seen.append([(a.name, hashlib.sha256(request.attachment_data[a.file_id])
                           .hexdigest()) for a in request.attachments])
        self.texts.append([m.text for m in request.messages])
        return await super().complete(request)


async def add_file(runtime: Runtime, name: str, data: bytes, content_type: str) -> str:
    stored = await runtime.store.add_file(name=name, content_type=content_type, data=data,
                                          sha256=hashlib.sha256(data).hexdigest())
    return stored.id


async def task_events(runtime: Runtime, agent: str, run_id: str) -> list[ev.Event]:
    return await runtime.store.load_stream(agent, run_id, ev.task_stream("main"))


async def test_a_runs_image_and_pdf_reach_the_model_as_references(
        make_runtime: MakeRuntime, tmp_path: Path) -> None:
    model = SeeingModel()
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "looker", model="test/see")],
                                 models={"see": model})
    png, pdf = png_bytes(640, 480), pdf_bytes("Revenue grew 12%.", "Costs fell.")
    image_id = await add_file(runtime, "chart.png", png, "image/png")
    pdf_id = await add_file(runtime, "report.pdf", pdf, "application/pdf")

    run_id = await runtime.start_run("looker", "What do these show?",
                                     files=[image_id, pdf_id])
    record = await runtime.wait_for_run(run_id, timeout_s=30)

    assert record.status == "completed", record.error
    assert model.seen[0] == [("chart.png", hashlib.sha256(png).hexdigest()),
                             ("report.pdf", hashlib.sha256(pdf).hexdigest())]
    assert f"chart.png (image/png, 640x480 px): {len(png):,} bytes received" in record.output
    events = await task_events(runtime, "looker", run_id)
    started = next(e for e in events if e.type == ev.TASK_STARTED)
    shown = started.data["attachments"]
    assert [(a["name"], a["file_id"], a.get("width"), a.get("pages")) for a in shown] == [
        ("chart.png", image_id, 640, None), ("report.pdf", pdf_id, None, 2)]
    stored = json.dumps([e.data for e in events])
    assert len(stored) < 8_000  # references, never the bytes
    completed = next(e for e in events if e.type == ev.MODEL_CALL_COMPLETED)
    assert completed.data["image_tokens"] == sum(
        estimated_tokens(msgspec.convert(a, Attachment)) for a in shown)


async def test_a_tools_image_is_stored_and_shown_with_its_result(
        make_runtime: MakeRuntime, tmp_path: Path) -> None:
    model = SeeingModel()
    runtime = await make_runtime(
        dirs=[write_agent_dir(tmp_path, "shooter", tools_py=SCREENSHOT_TOOL, model="test/see")],
        models={"see": model})

    run_id = await runtime.start_run("shooter", "example.com")
    record = await runtime.wait_for_run(run_id, timeout_s=30)

    assert record.status == "completed", record.error
    events = await task_events(runtime, "shooter", run_id)
    results = {e.data["name"]: e.data for e in events if e.type == ev.TOOL_CALL_COMPLETED}
    shot = results["screenshot"]["attachments"]
    assert [(a["name"], a["width"], a["height"]) for a in shot] == [("shot.png", 320, 200)]
    stored = await runtime.store.get_file(shot[0]["file_id"])
    assert stored is not None and stored.run_id == run_id and stored.uploaded_by == (
        "tool:screenshot")
    assert "attachments" not in results["bad_file"]
    assert "not shown: 'x.png' says image/png but its content is not such an image" in (
        results["bad_file"]["output"])
    assert ("shot.png", hashlib.sha256(png_bytes(320, 200)).hexdigest()) in model.seen[-1]


async def test_a_model_that_cannot_see_reads_a_note_and_a_deleted_file_too(
        make_runtime: MakeRuntime, tmp_path: Path) -> None:
    blind = SeeingModel(input_types=frozenset())
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "blind", model="test/see")],
                                 models={"see": blind})
    cat = png_bytes()
    image_id = await add_file(runtime, "cat.png", cat, "image/png")

    run_id = await runtime.start_run("blind", "Describe it", files=[image_id])
    record = await runtime.wait_for_run(run_id, timeout_s=30)

    assert record.status == "completed"
    assert blind.seen == [[]]  # nothing attached: the file is named in the text
    assert f"cat.png (image/png, {len(cat)} bytes): id {image_id}" in blind.texts[0][0]
    started = next(e for e in await task_events(runtime, "blind", run_id)
                   if e.type == ev.TASK_STARTED)
    assert "attachments" not in started.data


async def test_refuse_makes_a_blind_model_an_error_at_load(
        make_runtime: MakeRuntime, tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "strict", model="test/see",
                                attachments={"show": ["pdf"], "unsupported": "refuse"})
    with pytest.raises(AgentDefinitionError) as refused:
        await make_runtime(dirs=[directory],
                           models={"see": SeeingModel(input_types=frozenset())})
    assert "cannot take PDFs" in refused.value.message
    assert "attachments.unsupported: text" in refused.value.message
    assert str(directory / "agent.yaml") in str(refused.value)


async def test_a_session_message_shows_its_image_and_a_deleted_file_becomes_a_note(
        make_runtime: MakeRuntime, tmp_path: Path) -> None:
    model = SeeingModel()
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "chat", model="test/see")],
                                 models={"see": model})
    image_id = await add_file(runtime, "photo.png", png_bytes(10, 10), "image/png")
    session = await runtime.start_session("chat")

    await runtime.send_message(session, "", files=[image_id])
    first = await runtime.wait_for_turn(session, timeout_s=30)
    user, reply = first["transcript"][-2:]
    assert user["attachments"][0]["name"] == "photo.png"
    assert "photo.png (image/png, 10x10 px): " in reply["text"]
    await runtime.store.delete_file(image_id)
    await runtime.send_message(session, "and now?")
    await runtime.wait_for_turn(session, timeout_s=30)

    assert model.seen[-1] == []
    assert "these files were deleted and cannot be shown" in model.texts[-1][0]


async def test_compaction_names_the_files_it_no_longer_shows(
        make_runtime: MakeRuntime, tmp_path: Path) -> None:
    def script(request: ModelRequest) -> ModelResponse:
        if request.system.startswith("Write a faithful"):
            return ModelResponse(text="The user showed a photo.",
                                 usage=Usage(input_tokens=10, output_tokens=5))
        return ModelResponse(text="ok", usage=Usage(input_tokens=10, output_tokens=1))

    model = SeeingModel(script=script)
    runtime = await make_runtime(
        dirs=[write_agent_dir(tmp_path, "long", model="test/see",
                              compaction={"thresholdTokens": 1000, "keepRecentMessages": 2})],
        models={"see": model})
    image_id = await add_file(runtime, "big.png", png_bytes(1500, 1000), "image/png")
    session = await runtime.start_session("long")
    await runtime.send_message(session, "look", files=[image_id])
    await runtime.wait_for_turn(session, timeout_s=30)
    await runtime.send_message(session, "and?")
    await runtime.wait_for_turn(session, timeout_s=30)

    events = await task_events(runtime, "long", session)
    assert any(e.type == ev.COMPACTED for e in events)
    assert model.seen[-1] == []  # the image is no longer sent on every call
    assert "files shown earlier, no longer attached" in model.texts[-1][0]
    assert "big.png (image/png, 1500x1000 px, " in model.texts[-1][0]


async def test_show_leaves_a_kind_out_of_what_tools_return_too(
        make_runtime: MakeRuntime, tmp_path: Path) -> None:
    model = SeeingModel()
    runtime = await make_runtime(
        dirs=[write_agent_dir(tmp_path, "pdfs-only", tools_py=SCREENSHOT_TOOL, model="test/see",
                              attachments={"show": ["pdf"]})],
        models={"see": model})

    run_id = await runtime.start_run("pdfs-only", "example.com")
    record = await runtime.wait_for_run(run_id, timeout_s=30)

    assert record.status == "completed", record.error
    assert all(seen == [] for seen in model.seen)  # the screenshot is stored, not shown
    last = model.texts[-1]
    assert any("attachments.show leaves these files out" in text and "shot.png" in text
               for text in last)


async def test_a_message_of_files_alone_over_http(make_runtime: MakeRuntime,
                                                  tmp_path: Path) -> None:
    import aiohttp

    from toren.server.app import create_app
    from toren.testing import serve_on_free_port

    model = SeeingModel()
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "chat", model="test/see")],
                                 models={"see": model})
    image_id = await add_file(runtime, "photo.png", png_bytes(12, 8), "image/png")
    session = await runtime.start_session("chat")
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=False))
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/sessions/{session}/messages",
                                 json={"text": "  "}) as refused:
                assert refused.status == 400
                assert "may be empty when files are sent" in (await refused.json())[
                    "error"]["message"]
            async with http.post(f"{url}/sessions/{session}/messages",
                                 json={"text": "", "files": [image_id]}) as taken:
                assert taken.status == 202, await taken.text()
        turn = await runtime.wait_for_turn(session, timeout_s=30)
    finally:
        await runner.cleanup()
    user = turn["transcript"][-2]
    assert user["text"].startswith("Attached files") and user["attachments"][0]["width"] == 12
    assert model.seen[-1][0][0] == "photo.png"
