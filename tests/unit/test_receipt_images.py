"""Receipts count the input tokens images and PDF pages took (``ModelCallCompleted``'s
``image_tokens``) per call, per task and per run; the terminal shows an "image tok" column
only when a call was shown a file, as it shows the cache columns only when a call cached
(``toren.core.receipts``, ``toren.cli.render``)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from toren.cli.render import event_line, receipt_tables, run_summary
from toren.core import events as ev
from toren.core.catalog import validate_event
from toren.core.events import Event
from toren.core.receipts import build_receipt
from toren.core.runs import RunRecord


def call(stream: str, seq: int, step: int, *, image_tokens: int | None = None,
         input_tokens: int = 2_000, cost_usd: float = 0.01) -> Event:
    """A ``ModelCallCompleted``; ``image_tokens=None`` leaves the field out, as the events of
    calls without attachments (and of every call before Toren counted images) have it."""
    data: dict[str, Any] = {
        "step": step, "epoch": 1, "model": "anthropic/claude-sonnet-4-5", "text": "",
        "tool_calls": [], "stop_reason": "end_turn",
        "usage": {"input_tokens": input_tokens, "output_tokens": 30},
        "cost_usd": cost_usd, "latency_ms": 5.0, "repeated": False}
    if image_tokens is not None:
        data["image_tokens"] = image_tokens
    validate_event(stream, ev.MODEL_CALL_COMPLETED, data)
    return Event("r1", stream, seq, ev.MODEL_CALL_COMPLETED, data)


def forked(stream: str, seq: int, copied: int) -> Event:
    data = {"source_run_id": "r0", "source_task_id": "main", "at_step": 1,
            "copied_events": copied}
    validate_event(stream, ev.TASK_FORKED, data)
    return Event("r1", stream, seq, ev.TASK_FORKED, data)


def receipt(*events: Event) -> dict[str, Any]:
    return build_receipt(RunRecord(id="r1", agent="a", status="completed", input="go",
                                   stop_reason="end_turn"), list(events))


def render(table: Any) -> str:
    console = Console(width=250, record=True, color_system=None)
    console.print(table)
    return console.export_text()


def test_each_call_and_the_totals_of_each_task_and_the_run_count_image_tokens() -> None:
    made = receipt(call("task:w1-0", 1, 1, image_tokens=1_590),
                   call("task:w1-0", 2, 2, image_tokens=1_590),
                   call("task:w1-1", 1, 1, image_tokens=3_200, input_tokens=4_000),
                   call("task:w1-1", 2, 2))
    first, second = made["tasks"]
    assert [c["image_tokens"] for c in first["model_calls"]] == [1_590, 1_590]
    # a call whose event has no image_tokens (no file shown, or recorded before Toren counted
    # them) counts 0, not a missing key
    assert [c["image_tokens"] for c in second["model_calls"]] == [3_200, 0]
    assert first["totals"]["image_tokens"] == 3_180
    assert second["totals"]["image_tokens"] == 3_200
    assert made["totals"]["image_tokens"] == 6_380
    # images are part of the input, not on top of it
    assert made["totals"]["input_tokens"] == 3 * 2_000 + 4_000


def test_a_run_without_images_counts_zero() -> None:
    made = receipt(call("task:main", 1, 1), call("task:main", 2, 2, image_tokens=0))
    assert made["totals"]["image_tokens"] == 0
    assert made["tasks"][0]["totals"]["image_tokens"] == 0


def test_a_forks_copied_call_keeps_its_image_tokens_and_costs_nothing() -> None:
    # tokens are what the call took, copied or not (as input_tokens); its cost was paid by
    # the source run
    made = receipt(call("task:main", 1, 1, image_tokens=800), forked("task:main", 2, 1),
                   call("task:main", 3, 2, image_tokens=800))
    copied, live = made["tasks"][0]["model_calls"]
    assert (copied["copied"], copied["cost_usd"], copied["image_tokens"]) == (True, 0.0, 800)
    assert (live["copied"], live["image_tokens"]) == (False, 800)
    assert made["totals"]["image_tokens"] == 1_600


def test_the_terminal_shows_an_image_column_only_when_a_call_was_shown_a_file() -> None:
    with_images = receipt(call("task:main", 1, 1, image_tokens=1_590), call("task:main", 2, 2))
    table = render(receipt_tables(with_images)[0])
    header = next(line for line in table.splitlines() if "step" in line and "model" in line)
    assert "image tok" in header
    assert header.index(" in ") < header.index("image tok") < header.index(" out ")
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in table.splitlines()
            if line.startswith("│")]
    # in, image tok, out; a call shown no file has an empty cell, as cache cells are
    assert [row[4:7] for row in rows] == [["2000", "1590", "30"], ["2000", "", "30"]]
    summary = render(run_summary(with_images))
    assert "4000 in / 60 out (1590 of the input for images and PDF pages, estimated)" in summary

    without = receipt(call("task:main", 1, 1), call("task:main", 2, 2, image_tokens=0))
    assert "image" not in render(receipt_tables(without)[0])
    assert "images" not in render(run_summary(without))


def test_the_live_line_of_a_call_says_what_its_images_took() -> None:
    line = event_line(call("task:main", 1, 1, image_tokens=1_590))
    assert line is not None and "2000→30 tokens (1590 for images/PDFs)" in line
    plain = event_line(call("task:main", 1, 1))
    assert plain is not None and "for images" not in plain
