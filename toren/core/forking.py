"""Forks and diffs of runs, as pure functions of their logs (no I/O).

A fork is a new run whose log starts as a prefix of another run's: ``plan_fork`` says which
events to copy. For a single-task run the prefix ends after step N (its Nth model call and the
results of the tool calls it asked for); for a workflow run it ends after wave N (every task of
waves 1..N, whole, and the run-stream events recorded before wave N+1 started). The existing
resume path does the rest: a worker folds the copied events and goes on from there, exactly as
after a crash. ``diff_runs`` says where two runs' logs diverge.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from toren.core import events as ev
from toren.core.errors import ForkRefused, InvalidForkStep
from toren.core.events import Event, NewEvent
from toren.core.runs import RunRecord

#: The single-task run's task (``toren.execution.messages.MAIN_TASK``).
MAIN_TASK = "main"
#: Run-stream events a fork writes itself (its own ``RunCreated`` and ``RunForked``) or must
#: not inherit (how and whether the source ended).
_OWN_RUN_EVENTS = frozenset({ev.RUN_CREATED, ev.SCHEDULE_FIRED, ev.RUN_FORKED, ev.RUN_FINISHED,
                             ev.RUN_CANCELLED, ev.RUN_DEAD_LETTERED})
#: Task events that are no part of the conversation: snapshots of the source's state (which
#: number its events) and the source's budget-ledger bookkeeping (the fork has its own ledger).
_NOT_COPIED = frozenset({ev.TASK_CHECKPOINT, ev.BUDGET_RESERVED, ev.BUDGET_SETTLED,
                         ev.BUDGET_WARNING})


@dataclass(frozen=True)
class ForkPlan:
    """What a fork copies from its source: run-stream events (after the fork's own
    ``RunCreated`` and ``RunForked``), per task stream the copied events with the
    ``TaskForked`` that closes them, and the signals the copied run-stream events read."""

    unit: Literal["step", "wave"]
    at_step: int
    #: Steps (single-task run) or waves (workflow run) the source has.
    available: int
    #: The fork's overrides (its own, or inherited from a source that is a fork itself).
    model: str | None = None
    prompt_sha256: str | None = None
    run_events: list[NewEvent] = field(default_factory=list)
    task_events: dict[str, list[NewEvent]] = field(default_factory=dict)
    #: The source's ``signals`` stream up to the last signal a copied wait took or a copied
    #: ``ctx.signals`` read: the fork's workflow replays them as the source did.
    signal_events: list[NewEvent] = field(default_factory=list)

    @property
    def copied_events(self) -> int:
        """Events copied from the source (the ``TaskForked`` markers are the fork's own)."""
        return (len(self.run_events) + len(self.signal_events)
                + sum(len(events) - 1 for events in self.task_events.values()))


def _by_stream(events: Iterable[Event]) -> dict[str, list[Event]]:
    streams: dict[str, list[Event]] = {}
    for event in sorted(events, key=lambda e: (e.stream, e.seq)):
        streams.setdefault(event.stream, []).append(event)
    return streams


def model_steps(events: Iterable[Event]) -> list[int]:
    """The steps of a task stream's own model calls (compaction calls apart), in order."""
    return [e.data["step"] for e in events
            if e.type == ev.MODEL_CALL_COMPLETED and e.data.get("purpose") != "compaction"]


def is_workflow_run(run_stream: Sequence[Event]) -> bool:
    """A single-task run schedules the task ``main``; a workflow run schedules waves."""
    return not any(e.type == ev.TASK_SCHEDULED and e.data["task_id"] == MAIN_TASK
                   for e in run_stream)


def plan_fork(source: RunRecord, events: Sequence[Event], at_step: int, *,
              model: str | None = None, prompt_sha256: str | None = None) -> ForkPlan:
    """The events a fork of ``source`` at ``at_step`` copies (``events``: all of its log).

    ``ForkRefused`` for a session, or a step whose results are not all in the log yet (the
    run is still working on it); ``InvalidForkStep`` for a step the run does not have.
    ``model`` and ``prompt_sha256`` are the fork's overrides; a fork of a fork inherits the
    source fork's when not given.
    """
    if source.kind == "session":
        raise ForkRefused(f"run {source.id} is a session; only runs (single-task or workflow) "
                          "can be forked")
    if isinstance(at_step, bool) or not isinstance(at_step, int) or at_step < 0:
        raise InvalidForkStep(f"the step to fork at must be a whole number from 0 up, not "
                              f"{at_step!r}")
    streams = _by_stream(events)
    run_stream = streams.get(ev.RUN_STREAM, [])
    inherited = next((e.data for e in run_stream if e.type == ev.RUN_FORKED), {})
    model = model or inherited.get("model")
    prompt_sha256 = prompt_sha256 or inherited.get("prompt_sha256")
    if is_workflow_run(run_stream):
        return _plan_workflow(source, streams, at_step, model, prompt_sha256)
    return _plan_task(source, streams, at_step, model, prompt_sha256)


def _task_prefix(items: Sequence[Event], at_step: int | None) -> list[Event]:
    """A task stream's events up to the end of step ``at_step`` (``None``: all of them, the
    stream of a finished task), without snapshots and ledger bookkeeping."""
    kept = []
    for event in items:
        if at_step is not None and (event.type == ev.TASK_FINISHED
                                    or event.data.get("step", 0) > at_step):
            break
        if event.type not in _NOT_COPIED:
            kept.append(event)
    return kept


def _copy_task(source: RunRecord, stream: str, items: Sequence[Event], at_step: int | None,
               model: str | None, prompt_sha256: str | None) -> list[NewEvent]:
    copied = _task_prefix(items, at_step)
    steps = model_steps(copied)
    marker = ev.TaskForked(source_run_id=source.id, source_task_id=stream.removeprefix("task:"),
                           at_step=steps[-1] if steps else 0, copied_events=len(copied),
                           model=model, prompt_sha256=prompt_sha256)
    return [NewEvent(e.type, e.data) for e in copied] + [NewEvent.of(marker)]


def _plan_task(source: RunRecord, streams: dict[str, list[Event]], at_step: int,
               model: str | None, prompt_sha256: str | None) -> ForkPlan:
    stream = ev.task_stream(MAIN_TASK)
    items = streams.get(stream, [])
    steps = model_steps(items)
    available = max(steps, default=0)
    if at_step > available:
        raise InvalidForkStep(f"run {source.id} has {available} step(s): fork it at a step "
                              f"from 0 to {available}, not {at_step}")
    # step N is complete once step N+1 has begun or the task has ended; a run that ended
    # without its task finishing (cancelled mid-step) ends where its log does: a fork resumes
    # the tool calls it left without results as a worker resumes after a crash
    ended = source.status in ev.TERMINAL_STATUSES or any(
        e.type == ev.TASK_FINISHED for e in items)
    later = any(e.data.get("step", 0) > at_step for e in items)
    if not items or (not ended and not later):
        raise ForkRefused(f"step {at_step} of run {source.id} is not complete yet (the run is "
                          f"{source.status} and has not started step {at_step + 1}): fork it "
                          "at an earlier step, or wait until it finishes")
    run_events = [NewEvent(e.type, e.data) for e in streams.get(ev.RUN_STREAM, [])
                  if e.type == ev.TASK_SCHEDULED]
    return ForkPlan("step", at_step, available, model, prompt_sha256, run_events, {
        stream: _copy_task(source, stream, items, at_step, model, prompt_sha256)})


def _plan_workflow(source: RunRecord, streams: dict[str, list[Event]], at_step: int,
                   model: str | None, prompt_sha256: str | None) -> ForkPlan:
    run_stream = streams.get(ev.RUN_STREAM, [])
    waves = {e.data["wave"]: e.data for e in run_stream if e.type == ev.WAVE_STARTED}
    available = max(waves, default=0)
    if at_step > available:
        raise InvalidForkStep(f"workflow run {source.id} has {available} wave(s): fork it at "
                              f"a wave from 0 to {available}, not {at_step}")
    prefix = []
    for event in run_stream:
        if event.type == ev.WAVE_STARTED and event.data["wave"] > at_step:
            break
        if event.type not in _OWN_RUN_EVENTS:
            prefix.append(event)
    absorbed = {e.data["task_id"] for e in prefix if e.type == ev.TASK_ABSORBED}
    copied_tasks = [task["task_id"] for number in range(1, at_step + 1)
                    for task in waves[number]["tasks"]]
    unfinished = [task_id for task_id in copied_tasks if task_id not in absorbed]
    if unfinished:
        raise ForkRefused(f"wave {at_step} of workflow run {source.id} is not complete yet "
                          f"(task(s) {', '.join(unfinished)} had not finished before the next "
                          "wave started): fork it at an earlier wave, or wait until it finishes")
    task_events = {ev.task_stream(task_id): _copy_task(
        source, ev.task_stream(task_id), streams.get(ev.task_stream(task_id), []), None, model,
        prompt_sha256) for task_id in copied_tasks}
    read = max([e.data["signal"] for e in prefix if e.type == ev.SIGNAL_CONSUMED]
               + [e.data["through"] for e in prefix if e.type == ev.SIGNALS_READ], default=0)
    signals = [NewEvent(e.type, e.data) for e in streams.get(ev.SIGNALS_STREAM, [])
               if e.seq <= read]
    return ForkPlan("wave", at_step, available, model, prompt_sha256,
                    [NewEvent(e.type, e.data) for e in prefix], task_events, signals)


# -- diffs -------------------------------------------------------------------------------------

def _steps(items: Sequence[Event]) -> list[dict[str, Any]]:
    """A task's steps as a diff compares them: the model's output (text and tool calls) and
    the results of the tool calls it asked for, and whether the step was copied; with what
    the step cost this run (a copied step: nothing), how long its model call took (a copied
    step: 0, this run did not wait for it) and its tokens, for per-step deltas."""
    fork_at = max((e.seq for e in items if e.type == ev.TASK_FORKED), default=0)
    steps: dict[int, dict[str, Any]] = {}
    prompt: str | None = None  # the system prompt in effect (a fork or an upgrade changes it)
    for event in items:
        data = event.data
        if event.type in (ev.TASK_STARTED, ev.TASK_PROMPT_CHANGED) or (
                event.type == ev.TASK_FORKED and data.get("prompt_sha256")):
            prompt = data["prompt_sha256"]
        if event.type == ev.MODEL_CALL_COMPLETED and data.get("purpose") != "compaction":
            steps[data["step"]] = {
                "step": data["step"], "model": data["model"], "prompt_sha256": prompt,
                "text": data["text"],
                "tool_calls": [{"name": c["name"], "arguments": c["arguments"]}
                               for c in data["tool_calls"]],
                "tool_results": [], "copied": event.seq < fork_at,
                "cost_usd": 0.0 if event.seq < fork_at else data["cost_usd"],
                "latency_ms": 0.0 if event.seq < fork_at else data["latency_ms"],
                "input_tokens": data["usage"]["input_tokens"],
                "output_tokens": data["usage"]["output_tokens"]}
        elif event.type == ev.TOOL_CALL_COMPLETED and data["step"] in steps:
            steps[data["step"]]["tool_results"].append(
                {"name": data["name"], "output": data["output"], "is_error": data["is_error"]})
    return [steps[number] for number in sorted(steps)]


def _same_step(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """What differs between two steps (``None``: nothing a diff looks at). Alike output from
    another model or system prompt (a fork made with ``--model`` or ``--prompt``) differs in
    ``model`` or ``prompt``: the same answer from a changed setup is a finding, not sameness."""
    if a["text"] != b["text"] or a["tool_calls"] != b["tool_calls"]:
        return "model_output"
    if a["tool_results"] != b["tool_results"]:
        return "tool_results"
    if a["model"] != b["model"]:
        return "model"
    if a.get("prompt_sha256") != b.get("prompt_sha256"):
        return "prompt"
    return None


def _task_order(task_id: str) -> tuple[int, int, str]:
    wave, _, index = task_id.removeprefix("w").partition("-")
    if wave.isdigit() and index.isdigit():
        return (int(wave), int(index), task_id)
    return (0, 0, task_id)


def _outcome(record: RunRecord) -> dict[str, Any]:
    return {"id": record.id, "agent": record.agent, "status": record.status,
            "stop_reason": record.stop_reason, "output": record.output}


def diff_runs(a: RunRecord, a_events: Sequence[Event], b: RunRecord,
              b_events: Sequence[Event]) -> dict[str, Any]:
    """Where two runs diverge: each task's steps side by side (``same`` is ``None`` for a
    step both runs made alike, else what differs: ``model_output``, ``tool_results``,
    ``model``, ``prompt``, ``only_in_a``, ``only_in_b``), and the first difference, in task
    order (waves in order).
    ``identical`` when no step differs and both runs ended alike."""
    a_streams, b_streams = _by_stream(a_events), _by_stream(b_events)
    task_ids = sorted({s.removeprefix("task:") for s in (*a_streams, *b_streams)
                       if s.startswith("task:")}, key=_task_order)
    tasks = []
    first: dict[str, Any] | None = None
    for task_id in task_ids:
        a_steps = _steps(a_streams.get(ev.task_stream(task_id), []))
        b_steps = _steps(b_streams.get(ev.task_stream(task_id), []))
        rows = []
        for index in range(max(len(a_steps), len(b_steps))):
            left = a_steps[index] if index < len(a_steps) else None
            right = b_steps[index] if index < len(b_steps) else None
            if left is None or right is None:
                differs: str | None = "only_in_a" if right is None else "only_in_b"
            else:
                differs = _same_step(left, right)
            step = (left or right or {}).get("step", index + 1)
            rows.append({"step": step, "same": differs is None, "differs": differs,
                         "a": left, "b": right})
            if differs is not None and first is None:
                first = {"task_id": task_id, "step": step, "differs": differs}
        tasks.append({"task_id": task_id, "steps": rows})
    outcome_differs = (a.status, a.output) != (b.status, b.output)
    if first is None and outcome_differs:
        first = {"task_id": None, "step": None, "differs": "outcome"}
    return {"a": _outcome(a), "b": _outcome(b), "identical": first is None,
            "first_difference": first, "tasks": tasks}
