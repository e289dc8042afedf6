"""Property: resuming from a checkpoint is the same as folding the whole stream.

Hypothesis builds task streams the way a worker writes them (model calls with tool calls, invalid
calls, retries, compactions, takeovers by new epochs, session turns, a finish), stores every
event as the log does (JSON), and checks, for every point a checkpoint could be written at, that
folding the checkpoint plus the rest gives exactly (every field) the state of folding everything.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toren.core import events as ev
from toren.core.catalog import decode
from toren.core.events import NewEvent
from toren.core.fold import TaskState, fold_task

TOOLS = ("search", "fetch", "write")


def stored(event: Any) -> Any:
    """The event as a resume reads it: encoded as the store writes it, decoded from JSON."""
    new = NewEvent.of(event)
    return decode(new.type, json.loads(json.dumps(new.data)))


@st.composite
def task_streams(draw: st.DrawFn) -> list[Any]:
    session = draw(st.booleans())
    epoch = 1
    events: list[Any] = [ev.TaskStarted(
        task_id="main", subagent=draw(st.sampled_from([None, "researcher"])),
        model="toren/scripted", input=None if session else draw(st.text(max_size=20)),
        limits={"maxSteps": 50}, tools=TOOLS, prompt_sha256="0" * 64, epoch=epoch,
        session=session)]
    step = turn = 0
    messages = 0 if session else 1
    for _ in range(draw(st.integers(0, 8))):
        if draw(st.integers(0, 5)) == 0:
            epoch += 1  # another worker took the task over
        if session:
            turn += 1
            events.append(ev.UserMessage(turn=turn, text=draw(st.text(min_size=1, max_size=10))))
            messages += 1
        kind = draw(st.sampled_from(["call", "call", "call", "retry", "compact"]))
        if kind == "retry":
            events.append(ev.ModelCallStarted(step=step + 1, epoch=epoch))
            events.append(ev.RetryScheduled(
                step=step + 1, attempt=draw(st.integers(1, 5)),
                error={"code": "rate_limited", "message": "429"}, delay_s=1.5,
                next_attempt_at="2026-12-01T08:00:00+00:00", epoch=epoch))
            continue
        if kind == "compact" and messages > 2:
            replaced = draw(st.integers(1, messages - 1))
            events += [ev.ModelCallStarted(step=step + 1, epoch=epoch, purpose="compaction"),
                       completed(draw, step + 1, epoch, (), purpose="compaction"),
                       ev.Compacted(step=step + 1, summary="summary", replaced=replaced,
                                    reason="threshold", tokens_before=900, tokens_after=120,
                                    epoch=epoch)]
            messages -= replaced - 1
        step += 1
        calls = tuple(ev.RecordedToolCall(
            id=f"call_{step}_{i}", name=draw(st.sampled_from((*TOOLS, "nope"))),
            arguments={"q": draw(st.text(max_size=5))},
            arguments_error=draw(st.sampled_from([None, None, "invalid JSON"])))
            for i in range(draw(st.integers(0, 3))))
        events += [ev.ModelCallStarted(step=step, epoch=epoch),
                   completed(draw, step, epoch, calls)]
        messages += 1
        started = []
        for index, call in enumerate(calls):
            if call.name == "nope" or call.arguments_error:
                events.append(result(step, call, epoch, "unknown_tool" if call.name == "nope"
                                     else "invalid_arguments"))
            else:
                started.append(call)
                events.append(ev.ToolCallStarted(
                    step=step, call_id=call.id, name=call.name, arguments=call.arguments,
                    idempotency_key=f"toren:r:main:{step}:{index}", epoch=epoch))
            messages += 1  # each call gets one result message
        for call in draw(st.permutations(started)):
            events.append(result(step, call, epoch, draw(st.sampled_from([None, "exception"]))))
        if session and not calls:
            events.append(ev.TurnEnded(turn=turn, stop_reason="end_turn", output="done",
                                       steps=1, cost_usd=0.01 * step, epoch=epoch))
    if session and draw(st.booleans()):
        events.append(ev.CloseRequested(reason="closed by the user"))
    if draw(st.booleans()):
        events.append(ev.TaskFinished(
            task_id="main", status="completed", stop_reason="end_turn", output="done",
            error=None, steps=step, cost_usd=0.01 * step, epoch=epoch))
    return events


def completed(draw: st.DrawFn, step: int, epoch: int, calls: tuple[ev.RecordedToolCall, ...],
              purpose: str | None = None) -> ev.ModelCallCompleted:
    return ev.ModelCallCompleted(
        step=step, epoch=epoch, model="toren/scripted", text=draw(st.text(max_size=20)),
        tool_calls=calls, stop_reason="tool_use" if calls else "end_turn",
        usage=ev.TokenUsage(input_tokens=draw(st.integers(0, 5000)),
                            output_tokens=draw(st.integers(0, 500))),
        cost_usd=draw(st.one_of(st.none(), st.floats(0, 1, allow_nan=False))),
        latency_ms=12.5, repeated=draw(st.booleans()), purpose=purpose,  # type: ignore[arg-type]
        provider_data=draw(st.sampled_from([None, {"thinking": [{"text": "hm"}]}]))
        if purpose is None else None)


def result(step: int, call: ev.RecordedToolCall, epoch: int,
           error_kind: Any) -> ev.ToolCallCompleted:
    return ev.ToolCallCompleted(
        step=step, call_id=call.id, name=call.name, output="Error: no" if error_kind else "ok",
        is_error=error_kind is not None, error_kind=error_kind, truncated=False,
        original_bytes=2, duration_ms=0.5, epoch=epoch)


def differences(a: TaskState, b: TaskState) -> dict[str, Any]:
    return {name: (getattr(a, name), getattr(b, name)) for name in TaskState.__struct_fields__
            if getattr(a, name) != getattr(b, name)}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task_streams())
def test_folding_a_checkpoint_and_the_rest_equals_folding_everything(events: list[Any]) -> None:
    log = [stored(event) for event in events]
    assert log == events  # what the log gives back is what was recorded
    for cut in range(1, len(log) + 1):
        checkpoint = stored(fold_task(log[:cut]).snapshot())
        whole = fold_task([*log[:cut], checkpoint, *log[cut:]])
        resumed = fold_task([checkpoint, *log[cut:]])
        assert resumed == whole, f"resuming at event {cut}: {differences(resumed, whole)}"


@settings(max_examples=50, deadline=None)
@given(task_streams())
def test_a_checkpoint_holds_every_field_of_the_state(events: list[Any]) -> None:
    state = fold_task([stored(event) for event in events])
    restored = TaskState()
    restored.restore(stored(state.snapshot()))
    for name in TaskState.__struct_fields__:
        if name not in ("next_seq", "last_checkpoint_seq"):
            assert getattr(restored, name) == getattr(state, name), name
    assert restored.next_seq == state.next_seq + 1
