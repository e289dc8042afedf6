"""`toren chat` shows a turn the same way whether or not the model's text was streamed to it
piece by piece (live text is best-effort: a watcher may get all, some or none of the pieces)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from toren.cli import chat
from toren.cli.output import console
from toren.core import events as ev
from toren.core.events import Event
from toren.seams.shapes import TextDelta

RUN = "run-1"
TASK = "task-1"


def _completed(step: int, text: str, tool_calls: list[dict[str, Any]]) -> Event:
    return Event(RUN, f"task:{TASK}", step * 10, ev.MODEL_CALL_COMPLETED, {
        "step": step, "text": text, "tool_calls": tool_calls, "purpose": None,
        "model": "offline", "usage": {"input_tokens": 1, "output_tokens": 1},
        "cost_usd": 0.0, "latency_ms": 1.0})


def _tool(step: int, name: str, output: str) -> Event:
    return Event(RUN, f"task:{TASK}", step * 10 + 1, ev.TOOL_CALL_COMPLETED, {
        "name": name, "output": output, "is_error": False, "duration_ms": 0.5})


TURN = [
    (_completed(1, "Calling lookup_topic.", [{"name": "lookup_topic"}]),
     ["Calling ", "lookup_topic."]),
    (_tool(1, "lookup_topic", "a fold over the log"), []),
    (_completed(2, "Here is what I found.", []), ["Here is ", "what I ", "found."]),
    (Event(RUN, f"task:{TASK}", 99, ev.TURN_ENDED, {"stop_reason": "end_turn", "steps": 2}), []),
]


class _Backend:
    """The one method of an operator that `_follow_turn` reads."""

    def __init__(self, pieces: str) -> None:
        self.pieces = pieces

    async def session_events(self) -> AsyncIterator[Event | TextDelta]:
        for event, texts in TURN:
            step = int(event.data.get("step", 0))
            chosen = {"all": texts, "none": [], "some": texts[:1], "late": []}[self.pieces]
            for index, text in enumerate(chosen):
                yield TextDelta(RUN, TASK, step, index, text)
            if self.pieces == "late" and texts:
                yield event  # pieces arriving after their call completed are dropped
                for index, text in enumerate(texts):
                    yield TextDelta(RUN, TASK, step, index, text)
                continue
            yield event


def _render(pieces: str) -> str:
    with console.capture() as captured:
        status = asyncio.run(chat._follow_turn(_Backend(pieces), as_json=False))  # type: ignore[arg-type]
    assert status == "awaiting_input"
    return captured.get()


@pytest.mark.parametrize("pieces", ["none", "some", "late"])
def test_a_turn_reads_the_same_with_or_without_its_pieces(pieces: str) -> None:
    streamed = _render("all")
    assert streamed.splitlines() == [
        "agent> Calling lookup_topic.",
        "    ↳ lookup_topic a fold over the log (0.5 ms)",
        "agent> Here is what I found.",
    ]
    assert _render(pieces) == streamed
