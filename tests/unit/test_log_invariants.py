"""The log invariants of tests/durable.py catch what they are meant to catch: each check is fed
a hand-built log (and effects file or call log) with the fault, and a clean one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.durable import (
    check_log,
    duplicate_facts,
    model_call_violations,
    tool_execution_violations,
)
from toren.core.events import Event

RUN = "r1"
KEY = "toren:r1:main:1:0"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Log:
    """A task's log written by hand, one event per second of the database clock."""

    def __init__(self, stream: str = "task:main") -> None:
        self.stream = stream
        self.events: list[Event] = []

    def add(self, kind: str, epoch: int = 1, **data: Any) -> Log:
        seq = len(self.events) + 1
        self.events.append(Event(RUN, self.stream, seq, kind, data | {"epoch": epoch},
                                 T0 + timedelta(seconds=seq)))
        return self

    def started(self, epoch: int = 1) -> Log:
        return self.add("TaskStarted", epoch, task_id="main", subagent=None,
                        model="toren/scripted", input="x", limits={}, tools=["t"],
                        prompt_sha256="0")

    def call(self, step: int, epoch: int = 1, tools: int = 0, repeated: bool = False) -> Log:
        calls = [{"id": f"c{step}_{i}", "name": "t", "arguments": {}} for i in range(tools)]
        self.add("ModelCallStarted", epoch, step=step)
        return self.completed(step, epoch, calls, repeated)

    def completed(self, step: int, epoch: int = 1, calls: list[dict[str, Any]] | None = None,
                  repeated: bool = False) -> Log:
        return self.add("ModelCallCompleted", epoch, step=step, model="toren/scripted",
                        text="ok", tool_calls=calls or [],
                        stop_reason="tool_use" if calls else "end_turn",
                        usage={"input_tokens": 1, "output_tokens": 1, "cache_read_tokens": 0,
                               "cache_write_tokens": 0}, cost_usd=0.0,
                        latency_ms=1.0, repeated=repeated)

    def tool_started(self, step: int = 1, index: int = 0, epoch: int = 1,
                     key: str | None = None) -> Log:
        return self.add("ToolCallStarted", epoch, step=step, call_id=f"c{step}_{index}",
                        name="t", arguments={},
                        idempotency_key=key or f"toren:{RUN}:main:{step}:{index}")

    def tool_done(self, step: int = 1, index: int = 0, epoch: int = 1,
                  error_kind: str | None = None) -> Log:
        return self.add("ToolCallCompleted", epoch, step=step, call_id=f"c{step}_{index}",
                        name="t", output="r", is_error=error_kind is not None,
                        error_kind=error_kind, truncated=False, original_bytes=1,
                        duration_ms=1.0)

    def finished(self, epoch: int = 1) -> Log:
        return self.add("TaskFinished", epoch, task_id="main", status="completed",
                        stop_reason="end_turn", output="ok", error=None, steps=2, cost_usd=0.0)


def clean() -> Log:
    """Step 1 asks for one tool, step 2 answers: the log of a task nothing went wrong in."""
    return (Log().started().call(1, tools=1).tool_started().tool_done().call(2).finished())


def test_a_clean_log_passes_every_check() -> None:
    events = clean().events
    assert check_log(events, executed=[KEY], calls=[call_at(2.5, 1), call_at(6.5, 3)])
    assert duplicate_facts(events) == []


# -- facts recorded twice ----------------------------------------------------------------------

def test_a_model_call_completed_twice_for_one_step_is_found_in_one_epoch_or_two() -> None:
    for epoch in (1, 2):
        log = Log().started().call(1).completed(1, epoch=epoch)
        assert duplicate_facts(log.events) == [
            f"run r1 task:main: model call step 1 completed 2 times (seqs 3, 4, epochs "
            f"{'1' if epoch == 1 else '1, 2'}): one call recorded twice"]
        with pytest.raises(AssertionError, match="model call step 1 completed 2 times"):
            check_log(log.events)


def test_a_compaction_call_shares_its_step_with_the_call_after_it() -> None:
    log = Log().started()
    log.add("ModelCallStarted", step=1, purpose="compaction")
    log.completed(1)
    log.events[-1].data.update(purpose="compaction", tool_calls=[])
    log.call(1)
    assert duplicate_facts(log.events) == []


def test_a_tool_call_completed_twice_under_one_key_is_found() -> None:
    log = Log().started().call(1, tools=1).tool_started().tool_done().tool_done(epoch=2)
    assert duplicate_facts(log.events) == [
        f"run r1 task:main: ToolCallCompleted of tool call {KEY} recorded 2 times "
        "(seqs 5, 6, epochs 1, 2)"]
    log = Log().started().call(1, tools=1).tool_started().tool_started(epoch=2)
    assert duplicate_facts(log.events) == [
        f"run r1 task:main: ToolCallStarted of tool call {KEY} recorded 2 times "
        "(seqs 4, 5, epochs 1, 2)"]


def test_a_key_that_is_not_its_position_and_a_result_nobody_asked_for_are_found() -> None:
    log = Log().started().call(1, tools=1).tool_started(key="toren:r1:main:1:7")
    log.tool_done(step=1, index=3)
    assert duplicate_facts(log.events) == [
        "run r1 task:main seq 4: ToolCallStarted of call 'c1_0' carries idempotency key "
        f"'toren:r1:main:1:7', but its position (step 1, call 0) gives '{KEY}'",
        "run r1 task:main seq 5: ToolCallCompleted of call 'c1_3' at step 1, which no model "
        "response asked for"]


def test_once_only_facts_of_a_task_and_a_run_are_found_twice() -> None:
    log = clean().finished()
    assert duplicate_facts(log.events) == [
        "run r1 task:main: TaskFinished recorded 2 times (seqs 8, 9, epochs 1)"]
    run = Log("run")
    for wave in (1, 2, 1):
        run.events.append(Event(RUN, "run", len(run.events) + 1, "WaveStarted",
                                {"wave": wave, "tasks": []}))
    assert duplicate_facts(run.events) == [
        "run r1 run: WaveStarted wave=1 recorded 2 times (seqs 1, 3)"]


# -- tools executed more often than the log allows --------------------------------------------

def test_a_tool_run_twice_whose_result_came_in_the_starting_epoch_is_found() -> None:
    events = clean().events
    assert tool_execution_violations(events, [KEY]) == []
    assert tool_execution_violations(events, [KEY, KEY]) == [
        f"run r1 task:main: tool call {KEY} (started seq 4 at epoch 1, result seq 5 at epoch 1) "
        "executed 2 times; the log allows 1: its result was recorded under the epoch that "
        "started it, so nothing re-ran it"]


def test_an_idempotent_tool_re_run_by_a_later_lease_holder_is_allowed_once_per_holder() -> None:
    # the worker at epoch 1 ran the tool and died before recording it; epoch 2 ran it again
    log = Log().started().call(1, tools=1).tool_started().tool_done(epoch=2)
    assert tool_execution_violations(log.events, [KEY, KEY]) == []
    assert len(tool_execution_violations(log.events, [KEY] * 3)) == 1
    # epoch 2 died too, without writing anything; epoch 3 recorded it: three runs at most
    log = Log().started().call(1, tools=1).tool_started().tool_done(epoch=3)
    assert tool_execution_violations(log.events, [KEY] * 3) == []
    assert "the log allows 3: at most one run per lease holder from epoch 1 to 3" in (
        tool_execution_violations(log.events, [KEY] * 4)[0])


def test_an_interrupted_tool_ran_at_most_once_and_unknown_runs_are_found() -> None:
    log = Log().started().call(1, tools=1).tool_started().tool_done(epoch=2,
                                                                   error_kind="interrupted")
    assert tool_execution_violations(log.events, []) == []
    assert tool_execution_violations(log.events, [KEY]) == []
    (found,) = tool_execution_violations(log.events, [KEY, KEY])
    assert "interrupted) executed 2 times; the log allows 1" in found
    assert tool_execution_violations(clean().events, ["toren:r1:main:9:0"]) == [
        "tool call toren:r1:main:9:0 executed 1 times but no ToolCallStarted records it",
        f"run r1 task:main: tool call {KEY} (started seq 4 at epoch 1, result seq 5 at "
        "epoch 1) has a result but was never executed"]
    with pytest.raises(AssertionError, match="executed 2 times"):
        check_log(clean().events, executed=[KEY, KEY])


def test_a_tool_with_no_result_yet_is_not_judged() -> None:
    log = Log().started().call(1, tools=1).tool_started()
    assert tool_execution_violations(log.events, [KEY, KEY, KEY]) == []


# -- model calls made outside an announced attempt --------------------------------------------

def call_at(second: float, messages: int, model: str = "toren/scripted") -> dict[str, Any]:
    """A call-log line: a call started ``second`` seconds after T0 sending ``messages``."""
    return {"pid": 7, "model": model, "call": 0, "messages": messages,
            "at": (T0 + timedelta(seconds=second)).timestamp()}


def test_a_call_for_a_step_already_completed_is_found() -> None:
    events = clean().events  # step 1 open from second 2 to 3, step 2 from 6 to 7
    assert model_call_violations(events, [call_at(2.5, 1), call_at(6.5, 3)]) == []
    (found,) = model_call_violations(events, [call_at(2.5, 1), call_at(3.5, 1),
                                              call_at(6.5, 3)])
    assert found.startswith("model call of call-log line 2 (pid 7, toren/scripted, 1 "
                            "messages, started at 2026-01-01T00:00:03.500000+00:00) was made "
                            "outside every announced attempt: the latest such step to finish, "
                            "step 1 of run r1 task:main, had its completion committed at "
                            "2026-01-01T00:00:03.000000+00:00")
    with pytest.raises(AssertionError, match="outside every announced attempt"):
        check_log(events, calls=[call_at(2.5, 1), call_at(6.5, 3), call_at(8, 3)])


def test_a_call_before_its_announcement_or_of_another_size_or_model_is_found() -> None:
    events = clean().events
    assert len(model_call_violations(events, [call_at(1.5, 1), call_at(6.5, 3)])) == 1
    assert len(model_call_violations(events, [call_at(2.5, 2), call_at(6.5, 3)])) == 1
    assert len(model_call_violations(events, [call_at(2.5, 1, "toren/other"),
                                              call_at(6.5, 3)])) == 1


def test_one_attempt_explains_one_call_and_a_repeated_attempt_explains_a_second() -> None:
    events = clean().events
    assert len(model_call_violations(events, [call_at(2.2, 1), call_at(2.7, 1),
                                              call_at(6.5, 3)])) == 1
    # a worker announced step 1 and called; it died; the next one announced it again
    log = Log().started()
    log.add("ModelCallStarted", step=1)
    log.add("ModelCallStarted", epoch=2, step=1)
    log.completed(1, epoch=2, repeated=True)
    assert model_call_violations(log.events, [call_at(2.5, 1), call_at(3.5, 1)]) == []


def test_a_retried_attempt_closes_at_its_retry() -> None:
    log = Log().started()
    log.add("ModelCallStarted", step=1)
    log.add("RetryScheduled", step=1, attempt=1, error={"code": "x", "message": "503"},
            delay_s=1.0, next_attempt_at=T0.isoformat())
    log.call(1)
    assert model_call_violations(log.events, [call_at(2.5, 1), call_at(4.5, 1)]) == []
    assert len(model_call_violations(log.events, [call_at(3.5, 1), call_at(4.5, 1)])) == 1


def test_the_call_check_needs_the_events_created_at() -> None:
    events = [Event(RUN, "task:main", 1, "TaskStarted", {"model": "toren/scripted"})]
    with pytest.raises(ValueError, match="load the events with their created_at"):
        model_call_violations(events, [])
