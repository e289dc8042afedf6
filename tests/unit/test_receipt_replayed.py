"""A receipt marks a model call "replayed from log" only when a worker took its task over (a
crash, a lost lease, a shutdown's hand-back), not when the task resumed after a pause of its
own such as a peer call (``toren.core.receipts``)."""

from __future__ import annotations

from toren.core import events as ev
from toren.core.events import Event, NewEvent
from toren.core.messages import Usage
from toren.core.receipts import build_receipt
from toren.core.runs import RunRecord

ASK = ev.RecordedToolCall(id="c1", name="ask_writer", arguments={"request": "a poem"})


def task_log(*items: ev.EventData) -> list[Event]:
    return [Event("r1", "task:main", seq, NewEvent.of(item).type, NewEvent.of(item).data)
            for seq, item in enumerate(items, start=1)]


def model_call(step: int, epoch: int, *, ask: bool = False) -> list[ev.EventData]:
    return [ev.ModelCallStarted(step=step, epoch=epoch), ev.ModelCallCompleted(
        step=step, epoch=epoch, model="test/m", text="", tool_calls=(ASK,) if ask else (),
        stop_reason="tool_use" if ask else "end_turn", usage=Usage(input_tokens=3),
        cost_usd=0.0041, latency_ms=1.0, repeated=False)]


STARTED = ev.TaskStarted(task_id="main", subagent=None, model="test/m", input="go", limits={},
                         tools=("ask_writer",), prompt_sha256="p" * 64, epoch=1)
ASKED = ev.ToolCallStarted(step=1, call_id="c1", name="ask_writer",
                           arguments={"request": "a poem"}, idempotency_key="k", epoch=1)
ANSWERED = ev.ToolCallCompleted(step=1, call_id="c1", name="ask_writer", output="a poem",
                                is_error=False, error_kind=None, truncated=False,
                                original_bytes=6, duration_ms=0.0, epoch=2)
FINISHED = ev.TaskFinished(task_id="main", status="completed", stop_reason="end_turn",
                           output="done", error=None, steps=2, cost_usd=0.0082, epoch=2)


def replayed(events: list[Event]) -> list[bool]:
    made = build_receipt(RunRecord(id="r1", agent="a", status="completed", input="go",
                                   stop_reason="end_turn"), events)
    return [call["replayed"] for call in made["tasks"][0]["model_calls"]]


def test_a_resume_after_a_peer_call_replays_nothing() -> None:
    events = task_log(STARTED, *model_call(1, 1, ask=True), ASKED, ev.PeerCallStarted(
        step=1, call_id="c1", peer="writer", run_id="child", depth=1, epoch=1),
        ev.PeerCallFinished(step=1, call_id="c1", peer="writer", run_id="child",
                            status="completed", cost_usd=0.0123, epoch=2),
        ANSWERED, *model_call(2, 2), FINISHED)

    assert replayed(events) == [False, False]


def test_a_take_over_after_a_crash_marks_the_calls_before_it_replayed() -> None:
    events = task_log(STARTED, *model_call(1, 1, ask=True), ASKED,  # killed here
                      ANSWERED, *model_call(2, 2), FINISHED)

    assert replayed(events) == [True, False]


def test_a_crash_after_a_planned_resume_still_counts() -> None:
    events = task_log(STARTED, *model_call(1, 1, ask=True), ASKED, ev.PeerCallStarted(
        step=1, call_id="c1", peer="writer", run_id="child", depth=1, epoch=1),
        ev.PeerCallFinished(step=1, call_id="c1", peer="writer", run_id="child",
                            status="completed", cost_usd=0.0123, epoch=2),
        ANSWERED, *model_call(2, 2), *model_call(3, 3), FINISHED)  # epoch 2 died after step 2

    assert replayed(events) == [True, True, False]
