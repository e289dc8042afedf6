"""Forks of runs that showed the model files, in process on real Postgres: a fork copies the
attachments' references (the input's image and the image a tool returned), shares the stored
files (nothing is stored again, the tool does not run again) and its live steps are shown
both; a fork on a model that cannot see reads a note naming them; a file deleted since the
source ran reaches the fork as a note, as it would the source."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.durable import check_catalog
from tests.integration.test_attachments import SeeingModel, add_file
from toren.core import events as ev
from toren.host.runtime import Runtime
from toren.testing import png_bytes, write_agent_dir

MakeRuntime = Callable[..., Awaitable[Runtime]]

#: A tool that returns a picture, and one that returns text: with the run's input image, the
#: offline model calls both (steps 1 and 2), then answers (step 3).
TOOLS = """
import toren
from toren.testing import png_bytes

SHOTS = []

@toren.tool(idempotent=True)
def screenshot(page: str) -> toren.ToolResult:
    'Take a screenshot of a page.'
    SHOTS.append(page)
    return toren.ToolResult(f"screenshot of {page}",
                            files=[toren.ToolFile("shot.png", "image/png",
                                                  png_bytes(320, 200, (0, 128, 255)))])

@toren.tool(idempotent=True)
def lookup(topic: str) -> str:
    'Look a topic up.'
    return f"facts about {topic}"
"""
CHART = png_bytes(640, 480, (200, 40, 40))
SHOT = png_bytes(320, 200, (0, 128, 255))


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def source_run(runtime: Runtime) -> tuple[Any, str]:
    """A finished run of ``looker`` whose input had the chart; its record and the chart's id."""
    chart_id = await add_file(runtime, "chart.png", CHART, "image/png")
    run_id = await runtime.start_run("looker", "example.com", files=[chart_id])
    record = await runtime.wait_for_run(run_id, timeout_s=60)
    assert record.status == "completed", record.error
    return record, chart_id


def attachments_of(events: list[ev.Event], kind: str) -> list[list[tuple[str, str]]]:
    return [[(a["name"], a["file_id"]) for a in e.data.get("attachments", ())]
            for e in events if e.type == kind and e.stream == "task:main"]


async def test_a_fork_after_the_images_shows_both_to_its_live_steps_without_storing_again(
        make_runtime: MakeRuntime, tmp_path: Path) -> None:
    model = SeeingModel()
    runtime = await make_runtime(
        dirs=[write_agent_dir(tmp_path, "looker", tools_py=TOOLS, model="test/see")],
        models={"see": model})
    source, chart_id = await source_run(runtime)
    # step 1 was shown the input's chart; steps 2 and 3 the chart and the tool's screenshot
    assert model.seen == [[("chart.png", digest(CHART))]] + 2 * [
        [("chart.png", digest(CHART)), ("shot.png", digest(SHOT))]]
    source_events = await runtime.events(source.id)
    (shot,) = [a for e in source_events if e.type == ev.TOOL_CALL_COMPLETED
               for a in e.data.get("attachments", ())]
    files_before = await runtime.store.list_files()
    calls_before = len(model.seen)

    fork = await runtime.fork_run(source.id, 2)
    record = await runtime.wait_for_run(fork.id, timeout_s=60)

    assert record.status == "completed", record.error
    # steps 1 and 2 were copied (no call, the tool did not run again); step 3 went on live and
    # was shown both images, read from the files the source run stored
    assert len(model.seen) == calls_before + 1
    assert model.seen[-1] == [("chart.png", digest(CHART)), ("shot.png", digest(SHOT))]
    assert "shot.png (image/png, 320x200 px): " in record.output
    events = await runtime.events(fork.id)
    check_catalog(events)
    # the references were copied as they were: the same file ids, no new upload or tool file
    assert attachments_of(events, ev.TASK_STARTED) == [[("chart.png", chart_id)]]
    assert attachments_of(events, ev.TOOL_CALL_COMPLETED) == [
        [("shot.png", shot["file_id"])], []]
    assert [f.id for f in await runtime.store.list_files()] == [f.id for f in files_before]
    receipt = await runtime.receipt(fork.id)
    calls = [c for task in receipt["tasks"] for c in task["model_calls"]]
    assert [(c["copied"], c["image_tokens"] > 0) for c in calls] == [
        (True, True), (True, True), (False, True)]

    # at step 0 only the input is copied: its chart is shown to the fork's first step
    from_start = await runtime.fork_run(source.id, 0)
    assert (await runtime.wait_for_run(from_start.id, timeout_s=60)).status == "completed"
    assert model.seen[-3] == [("chart.png", digest(CHART))]


async def test_a_fork_on_a_model_that_cannot_see_reads_a_note_naming_the_files(
        make_runtime: MakeRuntime, tmp_path: Path) -> None:
    model, blind = SeeingModel(), SeeingModel(input_types=frozenset())
    runtime = await make_runtime(
        dirs=[write_agent_dir(tmp_path, "looker", tools_py=TOOLS, model="test/see")],
        models={"see": model, "blind": blind})
    source, chart_id = await source_run(runtime)

    fork = await runtime.fork_run(source.id, 2, model="test/blind")
    record = await runtime.wait_for_run(fork.id, timeout_s=60)

    assert record.status == "completed", record.error
    assert blind.seen == [[]]  # nothing attached: each file is named in its message instead
    first, _call, tool_result, *_later = blind.texts[0]
    assert "test/blind cannot be shown these files; tools may read them by id" in first
    assert f"chart.png (image/png, 640x480 px, {len(CHART):,} bytes, file id {chart_id})" \
        in first
    assert "shot.png (image/png, 320x200 px, " in tool_result
    receipt = await runtime.receipt(fork.id)
    live = [c for task in receipt["tasks"] for c in task["model_calls"] if not c["copied"]]
    assert [c["image_tokens"] for c in live] == [0]


async def test_a_file_deleted_since_the_source_ran_reaches_the_fork_as_a_note(
        make_runtime: MakeRuntime, tmp_path: Path) -> None:
    model = SeeingModel()
    runtime = await make_runtime(
        dirs=[write_agent_dir(tmp_path, "looker", tools_py=TOOLS, model="test/see")],
        models={"see": model})
    source, chart_id = await source_run(runtime)
    # the fork shares the source's files: deleting one deletes it for both
    await runtime.store.delete_file(chart_id)

    fork = await runtime.fork_run(source.id, 2)
    record = await runtime.wait_for_run(fork.id, timeout_s=60)

    assert record.status == "completed", record.error
    assert model.seen[-1] == [("shot.png", digest(SHOT))]
    assert "these files were deleted and cannot be shown" in model.texts[-1][0]
    assert "chart.png" in model.texts[-1][0]
