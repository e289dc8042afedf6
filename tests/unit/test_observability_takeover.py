"""``toren.host.worker.interrupted``: a stream taken over with a call in flight, or not."""

from __future__ import annotations

from toren.core.events import Event
from toren.host.worker import interrupted


def event(kind: str, **data: object) -> Event:
    return Event("run", "task:main", 1, kind, dict(data))


def test_a_call_started_under_an_older_epoch_is_a_takeover() -> None:
    started = [event("TaskStarted", epoch=1), event("ModelCallStarted", step=1, epoch=1)]
    assert interrupted(started, 2)
    tool = [event("ModelCallCompleted", epoch=1), event("ToolCallStarted", epoch=1)]
    assert interrupted(tool, 3)


def test_routine_hand_overs_are_not() -> None:
    assert not interrupted([], 1)
    assert not interrupted([event("ModelCallStarted", epoch=2)], 2)  # ours: a retried start
    assert not interrupted([event("RetryScheduled", epoch=1)], 2)
    assert not interrupted([event("TurnEnded", epoch=1)], 2)
    assert not interrupted([event("ToolCallCompleted", epoch=1)], 2)


def test_a_checkpoint_closing_the_flush_is_looked_through() -> None:
    after = [event("ModelCallStarted", epoch=1), event("TaskCheckpoint")]
    assert interrupted(after, 2)
    only = [event("TaskCheckpoint", model_call_pending={"step": 4, "epoch": 1})]
    assert interrupted(only, 2)
    tools = [event("TaskCheckpoint", pending_tools=[{"step": 4, "epoch": 3}])]
    assert not interrupted(tools, 3)
    assert interrupted(tools, 4)
    assert not interrupted([event("TaskCheckpoint")], 2)
