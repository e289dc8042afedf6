"""Images and PDFs from MCP tools reach the model: a real MCP server (the official SDK's, over
stdio: media_mcp_server.py) answers with a PNG, an SVG, a PDF resource, audio and an error
with a screenshot, in a started runtime on real Postgres; the offline model reports the bytes
it received of each file it was shown."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp_support import AgentFactory, of_type, plan

from toren.host.runtime import Runtime
from toren.testing import pdf_bytes, png_bytes, write_agent_dir

pytestmark = [pytest.mark.timeout(120)]

MEDIA_SERVER = {"command": sys.executable,
                "args": [str(Path(__file__).parent / "media_mcp_server.py")]}


async def run(runtime: Runtime, *calls: tuple[str, dict[str, Any]]
              ) -> tuple[str, str, list[Any]]:
    """``(run id, the model's answer, the run's events)`` of a plan of tool calls."""
    run_id = await runtime.start_run("reacher", plan(*calls))
    record = await runtime.wait_for_run(run_id, timeout_s=90)
    assert record.status == "completed", record
    events = [(event.type, event.data) for event in await runtime.events(run_id)]
    return run_id, str(record.output), events


async def test_an_mcp_tools_image_and_pdf_are_stored_and_shown_to_the_model(
        mcp_agent: AgentFactory) -> None:
    runtime = await mcp_agent(mcpServers={"media": MEDIA_SERVER})
    run_id, answer, events = await run(
        runtime, ("media__chart", {"title": "Q3"}), ("media__report", {}),
        ("media__vector", {}), ("media__jingle", {}), ("media__broken", {}))
    chart, report, vector, jingle, broken = of_type(events, "ToolCallCompleted")
    png = png_bytes(640, 480, (20, 90, 200))

    # the PNG: a stored file of the run, named after the tool, with its size in pixels
    assert not chart["is_error"]
    [shown] = chart["attachments"]
    assert (shown["name"], shown["content_type"], shown["width"], shown["height"]) == (
        "chart-1.png", "image/png", 640, 480)
    assert chart["output"] == (f"the chart of Q3\n[image: chart-1.png (image/png, "
                               f"{len(png):,} bytes)]")
    found = await runtime.store.read_file(shown["file_id"])
    assert found is not None
    stored, content = found
    assert content == png
    assert stored.run_id == run_id and stored.uploaded_by == "tool:media__chart"

    # the PDF resource keeps its own name; the text resource beside it is text
    [pdf] = report["attachments"]
    assert (pdf["name"], pdf["content_type"], pdf["pages"]) == ("q3.pdf", "application/pdf", 2)
    assert report["output"].endswith("\nQ3: up 12%.")
    found = await runtime.store.read_file(pdf["file_id"])
    assert found is not None and found[1] == pdf_bytes("Revenue grew 12%.", "Costs fell.")

    # what Toren cannot show is a note saying what was dropped and why
    assert "attachments" not in vector and "attachments" not in jingle
    assert vector["output"].startswith("the logo\n[image image/svg+xml, about ")
    assert "not shown: Toren shows a model PNG, JPEG, GIF and WebP images and PDFs]" in (
        vector["output"])
    assert jingle["output"].startswith("[audio audio/wav, about ")
    assert jingle["output"].endswith("not shown: Toren shows a model PNG, JPEG, GIF and WebP "
                                     "images and PDFs, not audio]")

    # an error result is still an error, and its screenshot is shown with it
    assert broken["is_error"]
    assert broken["output"].startswith("Error: the page did not load\n[image: broken-1.png")
    assert [a["name"] for a in broken["attachments"]] == ["broken-1.png"]

    # the model was given the bytes of every file (the offline model says what it received)
    assert f"- chart-1.png (image/png, 640x480 px): {len(png):,} bytes received" in answer
    assert f"- q3.pdf (application/pdf): {pdf['size_bytes']:,} bytes received" in answer
    assert "- broken-1.png (image/png, 320x200 px): " in answer
    assert "svg" not in answer.split("I was shown:")[1]


async def test_an_image_over_the_file_limit_is_a_note_and_the_run_completes(
        toren_runtime: Callable[..., Awaitable[Runtime]], tmp_path: Path) -> None:
    # TOREN_MAX_FILE_BYTES, as the runtime's settings hold it: 8 MiB
    limit = 8 * 1024 * 1024
    # 27 MB of base64 on one line (the SDK's reader, unpatched, took ~12 s of the event loop
    # for it, ~106 s for 60 MB); the call's timeout is not what this test is about
    directory = write_agent_dir(tmp_path / "agents", "reacher",
                                mcpServers={"media": MEDIA_SERVER | {"timeoutSeconds": 300}},
                                limits={"toolTimeoutSeconds": 300})
    runtime = await toren_runtime([directory], load_plugins=("toren-mcp",),
                                  max_file_bytes=limit, shutdown_grace_s=2.0)
    _run_id, answer, events = await run(
        runtime, ("media__huge_image", {"megabytes": 20}), ("media__chart", {"title": "Q4"}))
    huge, chart = of_type(events, "ToolCallCompleted")
    size = len(png_bytes(64, 64)) + 20 * 1024 * 1024

    assert not huge["is_error"] and "attachments" not in huge, huge["output"][:2000]
    assert huge["output"] == (
        f"the big picture\n[image: huge_image-1.png (image/png, {size:,} bytes)]\n"
        f"[not shown: 'huge_image-1.png' is {size:,} bytes, over the {limit:,} a file may have "
        "(TOREN_MAX_FILE_BYTES)]")
    # the server and the run go on: the next image is shown
    assert [a["name"] for a in chart["attachments"]] == ["chart-1.png"]
    assert "- chart-1.png (image/png, 640x480 px): " in answer
    assert "huge_image-1.png (" not in answer.split("I was shown:")[1]
