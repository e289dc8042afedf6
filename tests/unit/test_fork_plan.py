"""What a fork copies (``toren.core.forking.plan_fork``), how the fold reads a fork, and what a
diff says: pure functions over hand-built logs."""

from __future__ import annotations

from typing import Any

import pytest

from toren.core import events as ev
from toren.core.catalog import decode_events
from toren.core.events import Event, NewEvent
from toren.core.fold import fold_task
from toren.core.forking import diff_runs, plan_fork
from toren.core.runs import RunRecord
from toren.errors import ForkRefused, InvalidForkStep

RUN = "11111111-1111-4111-8111-111111111111"
USAGE = ev.TokenUsage(input_tokens=10, output_tokens=5)


def log(stream: str, *items: ev.EventData | NewEvent) -> list[Event]:
    events = [item if isinstance(item, NewEvent) else NewEvent.of(item) for item in items]
    return [Event(RUN, stream, seq, e.type, e.data) for seq, e in enumerate(events, start=1)]


def call(step: int, text: str, tools: tuple[str, ...] = (), *, cost: float = 0.1,
         purpose: Any = None, model: str = "test/a") -> ev.ModelCallCompleted:
    return ev.ModelCallCompleted(
        step=step, epoch=1, model=model, text=text,
        tool_calls=tuple(ev.RecordedToolCall(id=f"c{step}{i}", name=name, arguments={"n": step})
                         for i, name in enumerate(tools)),
        stop_reason="tool_use" if tools else "end_turn", usage=USAGE, cost_usd=cost,
        latency_ms=1.0, repeated=False, purpose=purpose)


def result(step: int, output: str, index: int = 0) -> ev.ToolCallCompleted:
    return ev.ToolCallCompleted(step=step, call_id=f"c{step}{index}", name="add", output=output,
                                is_error=False, error_kind=None, truncated=False,
                                original_bytes=len(output), duration_ms=1.0, epoch=1)


def started(step: int) -> ev.ToolCallStarted:
    return ev.ToolCallStarted(step=step, call_id=f"c{step}0", name="add", arguments={"n": step},
                              idempotency_key=f"toren:{RUN}:main:{step}:0", epoch=1)


def reserved(step: int) -> ev.BudgetReserved:
    return ev.BudgetReserved(step=step, model="test/a", reservation_id=step, reserved_usd=1.0,
                             spend=(), epoch=1)


TASK_STARTED = ev.TaskStarted(task_id="main", subagent=None, model="test/a", input="go",
                              limits={}, tools=("add",), prompt_sha256="p" * 64, epoch=1)


def single_task_log(*, finished: bool = True) -> list[Event]:
    """Three steps: two tool steps (the second after a retry, a compaction and an approval),
    then the answer; with budget events and a checkpoint in between."""
    task = [
        TASK_STARTED,
        reserved(1), ev.ModelCallStarted(step=1, epoch=1), call(1, "one", ("add",)),
        ev.BudgetSettled(step=1, reservation_id=1, reserved_usd=1.0, settled_usd=0.1, epoch=1),
        started(1), result(1, "2"),
        ev.RetryScheduled(step=2, attempt=1, error={"code": "x", "message": "y"}, delay_s=0.1,
                          next_attempt_at="2026-01-01T00:00:00+00:00", epoch=1),
        ev.ModelCallStarted(step=2, epoch=1, purpose="compaction"),
        call(2, "summary", purpose="compaction", cost=0.05),
        ev.Compacted(step=2, summary="summary", replaced=1, reason="threshold", tokens_before=9,
                     tokens_after=3, epoch=1),
        ev.ModelCallStarted(step=2, epoch=1), call(2, "two", ("add",)),
        ev.ApprovalRequested(step=2, approval_id="a", call_id="c20", name="add",
                             arguments={"n": 2}, idempotency_key=f"toren:{RUN}:main:2:0",
                             epoch=1),
        ev.ApprovalDecided(approval_id="a", call_id="c20", outcome="approved", decided_by="me",
                           decided_at="2026-01-01T00:00:00+00:00", epoch=1),
        started(2), result(2, "4"),
        ev.ModelCallStarted(step=3, epoch=1), call(3, "the answer"),
    ]
    if finished:
        task.append(ev.TaskFinished(task_id="main", status="completed", stop_reason="end_turn",
                                    output="the answer", error=None, steps=3, cost_usd=0.35,
                                    epoch=1))
    items = log("task:main", *task)
    # a checkpoint after step 1 (its content does not matter to the copy: it is left out)
    items.insert(7, Event(RUN, "task:main", 0, ev.TASK_CHECKPOINT, {}))
    items = [Event(RUN, e.stream, seq, e.type, e.data) for seq, e in enumerate(items, start=1)]
    run = log("run", ev.RunCreated(agent="calc", input="go", idempotency_key=None),
              ev.TaskScheduled(task_id="main", subagent=None, input="go"))
    return run + items


def record(status: str = "completed", output: str | None = "the answer",
           kind: str = "run") -> RunRecord:
    return RunRecord(id=RUN, agent="calc", status=status, input="go", output=output, kind=kind)


def types(plan_events: list[NewEvent]) -> list[str]:
    return [e.type for e in plan_events]


def test_a_fork_copies_whole_steps_and_leaves_out_checkpoints_and_the_ledger() -> None:
    plan = plan_fork(record(), single_task_log(), 1)
    assert (plan.unit, plan.available) == ("step", 3)
    assert types(plan.run_events) == ["TaskScheduled"]
    copied = plan.task_events["task:main"]
    assert types(copied) == ["TaskStarted", "ModelCallStarted", "ModelCallCompleted",
                             "ToolCallStarted", "ToolCallCompleted", "TaskForked"]
    assert copied[-1].data == {"source_run_id": RUN, "source_task_id": "main", "at_step": 1,
                               "copied_events": 5}
    assert plan.copied_events == 6

    # step 2 takes its retry, its compaction call and its approval with it
    two = types(plan_fork(record(), single_task_log(), 2).task_events["task:main"])
    assert two[5:] == ["RetryScheduled", "ModelCallStarted", "ModelCallCompleted", "Compacted",
                       "ModelCallStarted", "ModelCallCompleted", "ApprovalRequested",
                       "ApprovalDecided", "ToolCallStarted", "ToolCallCompleted", "TaskForked"]
    last = types(plan_fork(record(), single_task_log(), 3).task_events["task:main"])
    assert last[-3:] == ["ModelCallStarted", "ModelCallCompleted", "TaskForked"]
    assert "TaskFinished" not in last
    assert types(plan_fork(record(), single_task_log(), 0).task_events["task:main"]) == [
        "TaskStarted", "TaskForked"]


def test_the_fold_of_a_fork_is_the_sources_conversation_at_no_cost() -> None:
    source = [e for e in single_task_log() if e.stream == "task:main" and e.type not in (
        ev.TASK_CHECKPOINT, ev.BUDGET_RESERVED, ev.BUDGET_SETTLED)]
    plan = plan_fork(record(), single_task_log(), 2, model="test/b", prompt_sha256="q" * 64)
    copied = [Event(RUN, "task:main", seq, e.type, e.data)
              for seq, e in enumerate(plan.task_events["task:main"], start=1)]
    state = fold_task(decode_events(copied))
    before = fold_task(decode_events(source[:len(copied) - 1]))
    assert state.messages == before.messages and state.steps == 2
    assert state.cost_usd == 0.0 and state.input_tokens == 0 and before.cost_usd > 0
    assert state.fork is not None and state.fork.model == "test/b"
    assert state.fork.prompt_sha256 == "q" * 64
    assert state.finished is None and not state.pending_tools and state.retry is None
    assert state.next_seq == len(copied) + 1


def test_a_fork_of_a_fork_inherits_its_overrides_and_not_its_marker() -> None:
    first = plan_fork(record(), single_task_log(), 2, model="test/b")
    fork_log = log("run", ev.RunCreated(agent="calc", input="go", idempotency_key=None),
                   NewEvent.of(ev.RunForked(source_run_id=RUN, at_step=2, unit="step",
                                            copied_events=12, model="test/b")),
                   *first.run_events)
    task = first.task_events["task:main"] + [NewEvent.of(call(3, "b's answer", model="test/b"))]
    fork_log += log("task:main", *task)
    second = plan_fork(record(), fork_log, 2)
    assert second.model == "test/b" and second.prompt_sha256 is None
    assert types(second.run_events) == ["TaskScheduled"]
    # the source fork's marker is part of the copied history; the new one closes the copy
    markers = [e for e in second.task_events["task:main"] if e.type == "TaskForked"]
    assert len(markers) == 2 and markers[-1].data["copied_events"] == len(task) - 1
    third = plan_fork(record(), fork_log, 3, model="test/c")
    assert [e.data.get("model") for e in third.task_events["task:main"]
            if e.type == "TaskForked"] == ["test/b", "test/c"]
    assert plan_fork(record(), fork_log, 1).task_events["task:main"][-2].type == \
        "ToolCallCompleted", "forked before the source fork's copy ended: one marker"


def test_bad_steps_and_unfinished_runs_are_refused() -> None:
    with pytest.raises(InvalidForkStep, match="has 3 step"):
        plan_fork(record(), single_task_log(), 4)
    for bad in (-1, True, 1.0, "1"):
        with pytest.raises(InvalidForkStep):
            plan_fork(record(), single_task_log(), bad)  # type: ignore[arg-type]
    with pytest.raises(ForkRefused, match="session"):
        plan_fork(record(kind="session"), single_task_log(), 0)
    running = single_task_log(finished=False)
    assert plan_fork(record("running"), running, 2).available == 3
    with pytest.raises(ForkRefused, match="not complete"):
        plan_fork(record("running"), running, 3)


def workflow_log(*, wave_two_done: bool = True) -> list[Event]:
    tasks = (ev.WaveTask(task_id="w1-0", subagent="echo", input="a"),)
    wave_two = (ev.WaveTask(task_id="w2-0", subagent="echo", input="b"),
                ev.WaveTask(task_id="w2-1", subagent="echo", input="c"))

    def absorbed(task_id: str) -> ev.TaskAbsorbed:
        return ev.TaskAbsorbed(task_id=task_id, status="completed", stop_reason="end_turn",
                               output=task_id, error=None, cost_usd=0.1)

    run = [ev.RunCreated(agent="flow", input="go", idempotency_key=None),
           ev.ValueRecorded(n=0, kind="now", value="2026-01-01T00:00:00+00:00"),
           ev.WaveStarted(wave=1, tasks=tasks),
           ev.TaskScheduled(task_id="w1-0", subagent="echo", input="a", wave=1),
           absorbed("w1-0"),
           ev.TimerStarted(timer=1, seconds=1.0, fire_at="2026-01-01T00:00:01+00:00"),
           ev.WaveStarted(wave=2, tasks=wave_two),
           ev.TaskScheduled(task_id="w2-0", subagent="echo", input="b", wave=2),
           ev.TaskScheduled(task_id="w2-1", subagent="echo", input="c", wave=2),
           absorbed("w2-0")]
    if wave_two_done:
        run += [absorbed("w2-1"), ev.RunFinished(status="completed", stop_reason="end_turn",
                                                 output="done", error=None)]
    events = log("run", *run)
    for task_id in ("w1-0", "w2-0", "w2-1"):
        events += log(f"task:{task_id}", TASK_STARTED, call(1, task_id),
                      ev.TaskFinished(task_id=task_id, status="completed",
                                      stop_reason="end_turn", output=task_id, error=None,
                                      steps=1, cost_usd=0.1, epoch=1))
    return events


def test_a_workflow_forks_at_a_wave_boundary() -> None:
    one = plan_fork(record(), workflow_log(), 1)
    assert (one.unit, one.available) == ("wave", 2)
    assert types(one.run_events) == ["ValueRecorded", "WaveStarted", "TaskScheduled",
                                     "TaskAbsorbed", "TimerStarted"]
    assert set(one.task_events) == {"task:w1-0"}
    assert types(one.task_events["task:w1-0"]) == ["TaskStarted", "ModelCallCompleted",
                                                   "TaskFinished", "TaskForked"]
    two = plan_fork(record(), workflow_log(), 2)
    assert "RunFinished" not in types(two.run_events)
    assert set(two.task_events) == {"task:w1-0", "task:w2-0", "task:w2-1"}
    assert types(plan_fork(record(), workflow_log(), 0).run_events) == ["ValueRecorded"]
    with pytest.raises(InvalidForkStep, match="has 2 wave"):
        plan_fork(record(), workflow_log(), 3)
    with pytest.raises(ForkRefused, match="w2-1"):
        plan_fork(record("running"), workflow_log(wave_two_done=False), 2)


def test_a_diff_names_the_first_step_that_differs() -> None:
    a = single_task_log()
    plan = plan_fork(record(), a, 1)
    b = log("run", ev.RunCreated(agent="calc", input="go", idempotency_key=None))
    b += log("task:main", *plan.task_events["task:main"], call(2, "another way"))
    found = diff_runs(record(), a, record(output="another way"), b)
    assert found["first_difference"] == {"task_id": "main", "step": 2,
                                         "differs": "model_output"}
    rows = found["tasks"][0]["steps"]
    assert [(r["step"], r["differs"]) for r in rows] == [
        (1, None), (2, "model_output"), (3, "only_in_a")]
    assert rows[0]["b"]["copied"] and rows[0]["b"]["cost_usd"] == 0.0
    assert rows[0]["a"]["tool_results"] == [{"name": "add", "output": "2", "is_error": False}]
    assert diff_runs(record(), a, record(), a)["identical"]
    ended = diff_runs(record(), a, record(status="failed"), a)
    assert ended["first_difference"] == {"task_id": None, "step": None, "differs": "outcome"}


def test_a_diff_tells_alike_output_from_another_model_or_prompt() -> None:
    a = log("task:main", TASK_STARTED, call(1, "the answer"))

    def forked(model: str | None, prompt: str | None) -> list[Event]:
        return log("task:main", TASK_STARTED,
                   ev.TaskForked(source_run_id=RUN, at_step=0, copied_events=1, model=model,
                                 prompt_sha256=prompt),
                   call(1, "the answer", model=model or "test/a"))

    by_model = diff_runs(record(), a, record(), forked("test/b", None))
    by_prompt = diff_runs(record(), a, record(), forked(None, "q" * 64))

    assert not by_model["identical"]
    assert by_model["first_difference"] == {"task_id": "main", "step": 1, "differs": "model"}
    assert by_prompt["first_difference"] == {"task_id": "main", "step": 1, "differs": "prompt"}
    row = by_prompt["tasks"][0]["steps"][0]
    assert (row["a"]["prompt_sha256"], row["b"]["prompt_sha256"]) == ("p" * 64, "q" * 64)
    both = diff_runs(record(), a, record(), forked("test/b", "q" * 64))
    assert both["first_difference"]["differs"] == "model"
    assert diff_runs(record(), a, record(), forked(None, None))["identical"]


def test_a_workflow_forks_overrides_ride_on_its_task_messages() -> None:
    from toren.execution.forking import new_task_fork, with_fork
    from toren.execution.messages import run_tick, task_message

    messages = [task_message("w2-0", "echo", "b"), run_tick("x")]
    plain = ev.RunForked(source_run_id=RUN, at_step=1, unit="wave", copied_events=4)
    assert with_fork(messages, None) == messages == with_fork(messages, plain)
    changed = ev.RunForked(source_run_id=RUN, at_step=1, unit="wave", copied_events=4,
                           model="test/b")
    task, tick = with_fork(messages, changed)
    assert tick == messages[1] and task.payload["key"] == "task:w2-0"
    forked = new_task_fork(task.payload)
    assert forked == ev.TaskForked(source_run_id=RUN, at_step=0, copied_events=0,
                                   model="test/b")
    assert new_task_fork(messages[0].payload) is None
    assert new_task_fork({"fork": {"source_run_id": 7}}) is None  # not a message Toren made
