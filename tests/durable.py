"""Helpers for durable-core tests: in-process runtimes on a per-test database, scripted
providers, and checks of a run's log: every event well-formed, no fact recorded twice, and
(given the records kept outside the database) no tool run and no model call made that the log
does not explain."""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from toren import hookimpl
from toren.agents import AgentSpec
from toren.config import Settings
from toren.core.catalog import validate_event
from toren.core.events import Event
from toren.host.runtime import Runtime
from toren.seams.model import Model, ModelProvider
from toren.seams.plugins import PluginHost

#: Fast timings so crash and lease tests take seconds, not minutes.
FAST = {"lease_ttl_s": 1.0, "poll_interval_s": 0.2, "guardian_interval_s": 0.5,
        "retry_base_s": 0.05, "retry_max_delay_s": 0.2, "shutdown_grace_s": 2.0}


class ModelsPlugin:
    """A plugin object that registers one provider serving ``<prefix>/<name>`` models."""

    def __init__(self, prefix: str, models: dict[str, Model]) -> None:
        self.provider = _Provider(prefix, models)

    @hookimpl
    def register_models(self, register: Callable[[ModelProvider], None]) -> None:
        register(self.provider)


class _Provider(ModelProvider):
    description = "test models"

    def __init__(self, prefix: str, models: dict[str, Model]) -> None:
        self.prefix = prefix
        self.models = models

    def get_model(self, model_id: str) -> Model:
        model = self.models[model_id.partition("/")[2]]
        model.model_id = model_id
        return model


def plugin_host(models: dict[str, Model] | None = None, prefix: str = "test") -> PluginHost:
    """Built-in plugins only, plus ``models`` served under ``prefix/``."""
    host = PluginHost(load=())
    if models:
        host.add_plugin(ModelsPlugin(prefix, models), f"{prefix}-models")
    return host


def check_log(events: Sequence[Event], *, executed: Iterable[str] | None = None,
              calls: Sequence[Mapping[str, Any]] | None = None) -> dict[str, list[Event]]:
    """Every event matches the catalog and each stream's seqs are exactly 1..n
    (``check_catalog``); no fact is recorded twice (``duplicate_facts``). With ``executed``
    (the idempotency key of every tool execution, from an effects file) no tool ran more often
    than the log allows (``tool_execution_violations``); with ``calls`` (the lines of the
    offline model's call log) no model call was made outside an announced attempt
    (``model_call_violations``). Returns the events by stream."""
    by_stream = check_catalog(events)
    violations = duplicate_facts(events)
    if executed is not None:
        violations += tool_execution_violations(events, executed)
    if calls is not None:
        violations += model_call_violations(events, calls)
    assert not violations, "\n".join(violations)
    return by_stream


def check_catalog(events: Sequence[Event]) -> dict[str, list[Event]]:
    """Every event matches the catalog; each stream's seqs are exactly 1..n. By stream."""
    by_stream: dict[str, list[Event]] = {}
    for event in events:
        validate_event(event.stream, event.type, event.data)
        by_stream.setdefault(event.stream, []).append(event)
    for stream, items in by_stream.items():
        seqs = sorted(e.seq for e in items)
        assert seqs == list(range(1, len(seqs) + 1)), f"gaps in {stream}: {seqs}"
    return by_stream


# -- facts recorded twice ---------------------------------------------------------------------
# The primary key (run, stream, seq) already makes one event number impossible to write twice;
# these are the facts a buggy writer could still record twice under different numbers (a
# second worker appending the same step after a takeover, a retried append that had in fact
# committed).

#: Per event type on the run stream: the field that names the fact (``None``: once per run).
RUN_FACTS: dict[str, str | None] = {
    "RunCreated": None, "RunFinished": None, "WaveStarted": "wave", "TaskScheduled": "task_id",
    "TaskAbsorbed": "task_id", "TimerStarted": "timer", "TimerFired": "timer",
    "ValueRecorded": "n", "WorkflowLogged": "n"}
#: The same for a task stream (model and tool calls are checked apart: they need the key).
TASK_FACTS: dict[str, str | None] = {
    "TaskStarted": None, "TaskFinished": None, "UserMessage": "turn", "TurnEnded": "turn"}


def tool_call_key(run_id: str, stream: str, step: int, index: int) -> str:
    """The idempotency key of the ``index``-th tool call asked for by model call ``step`` of
    the task on ``stream``: ``toren:<run id>:<task id>:<step>:<index>`` (the format
    docs/reference/events.md documents)."""
    return f"toren:{run_id}:{stream.removeprefix('task:')}:{step}:{index}"


def _where(items: Sequence[Event]) -> str:
    seqs = ", ".join(str(e.seq) for e in items)
    epochs = sorted({e.data["epoch"] for e in items if e.data.get("epoch") is not None})
    return f"seqs {seqs}" + (f", epochs {', '.join(map(str, epochs))}" if epochs else "")


def _twice(prefix: str, items: Sequence[Event], kind: str, field: str | None,
           found: list[str]) -> None:
    groups: dict[Any, list[Event]] = defaultdict(list)
    for event in items:
        if event.type == kind:
            groups[None if field is None else event.data.get(field)].append(event)
    for value, group in groups.items():
        if len(group) > 1:
            what = kind if field is None else f"{kind} {field}={value!r}"
            found.append(f"{prefix}: {what} recorded {len(group)} times ({_where(group)})")


def duplicate_facts(events: Sequence[Event]) -> list[str]:
    """Facts the log records more than once, each a sentence naming the run, stream and seqs.

    Besides the once-only facts of ``RUN_FACTS`` and ``TASK_FACTS``: a model call completed
    twice for one step of a task (compaction calls apart), in one epoch or in two; a tool call
    started or completed twice under one idempotency key; a tool result for a call no model
    response asked for; and a ``ToolCallStarted`` whose key is not the one its position gives.
    """
    found: list[str] = []
    streams: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for event in sorted(events, key=lambda e: (e.run_id, e.stream, e.seq)):
        streams[(event.run_id, event.stream)].append(event)
    for (run_id, stream), items in streams.items():
        prefix = f"run {run_id} {stream}"
        if stream == "run":
            for kind, field in RUN_FACTS.items():
                _twice(prefix, items, kind, field, found)
            continue
        for kind, field in TASK_FACTS.items():
            _twice(prefix, items, kind, field, found)
        found += _duplicate_calls(run_id, stream, items)
    return found


def _duplicate_calls(run_id: str, stream: str, items: Sequence[Event]) -> list[str]:
    prefix = f"run {run_id} {stream}"
    found: list[str] = []
    steps: dict[int, list[Event]] = defaultdict(list)
    #: (step, call id) -> the call's position in the response that asked for it
    positions: dict[tuple[int, str], int] = {}
    for event in items:
        if event.type == "ModelCallCompleted" and event.data.get("purpose") != "compaction":
            steps[event.data["step"]].append(event)
            for index, call in enumerate(event.data["tool_calls"]):
                positions.setdefault((event.data["step"], call["id"]), index)
    for step, group in steps.items():
        if len(group) > 1:
            found.append(f"{prefix}: model call step {step} completed {len(group)} times "
                         f"({_where(group)}): one call recorded twice")
    started: dict[str, list[Event]] = defaultdict(list)
    completed: dict[str, list[Event]] = defaultdict(list)
    for event in items:
        if event.type not in ("ToolCallStarted", "ToolCallCompleted"):
            continue
        step, call_id = event.data["step"], event.data["call_id"]
        index = positions.get((step, call_id))
        if index is None:
            found.append(f"{prefix} seq {event.seq}: {event.type} of call {call_id!r} at step "
                         f"{step}, which no model response asked for")
            continue
        key = tool_call_key(run_id, stream, step, index)
        if event.type == "ToolCallStarted":
            started[key].append(event)
            if event.data["idempotency_key"] != key:
                found.append(f"{prefix} seq {event.seq}: ToolCallStarted of call {call_id!r} "
                             f"carries idempotency key {event.data['idempotency_key']!r}, but "
                             f"its position (step {step}, call {index}) gives {key!r}")
        else:
            completed[key].append(event)
    for kind, by_key in (("ToolCallStarted", started), ("ToolCallCompleted", completed)):
        for key, group in by_key.items():
            if len(group) > 1:
                found.append(f"{prefix}: {kind} of tool call {key} recorded {len(group)} times "
                             f"({_where(group)})")
    return found


# -- tools executed more often than the log allows ---------------------------------------------

def tool_execution_violations(events: Sequence[Event], executed: Iterable[str]) -> list[str]:
    """Tool executions (``executed``: the idempotency key of each, from an effects file) that
    the log does not explain.

    A tool call runs under the lease epoch that recorded its ``ToolCallStarted``. It may run
    again only when that worker stopped before recording the result and the tool is idempotent:
    the task loop then runs it again under its own, later epoch, and records the result there
    (a non-idempotent tool gets ``error_kind: interrupted`` instead, and is not run again). So
    a call whose result carries its start's epoch ran exactly once; one whose result came
    ``k`` epochs later ran at most ``k + 1`` times (once per lease holder at most); an
    ``interrupted`` one at most once. A call with no result yet is not judged; an execution
    of a key no ``ToolCallStarted`` records is always a violation.
    """
    counts = Counter(executed)
    started: dict[str, Event] = {}
    results: dict[tuple[str, str, str], Event] = {}
    for event in events:
        if event.type == "ToolCallStarted":
            started.setdefault(event.data["idempotency_key"], event)
        elif event.type == "ToolCallCompleted":
            results.setdefault((event.run_id, event.stream, event.data["call_id"]), event)
    found = [f"tool call {key} executed {counts[key]} times but no ToolCallStarted records it"
             for key in counts if key not in started]
    for key, start in started.items():
        result = results.get((start.run_id, start.stream, start.data["call_id"]))
        if result is None:
            continue
        runs = counts[key]
        begun, ended = start.data["epoch"], result.data["epoch"]
        kind = result.data.get("error_kind")
        where = (f"run {start.run_id} {start.stream}: tool call {key} (started seq {start.seq} "
                 f"at epoch {begun}, result seq {result.seq} at epoch {ended}")
        if kind in (None, "exception"):
            allowed = ended - begun + 1
            if runs == 0:
                found.append(f"{where}) has a result but was never executed")
        else:  # interrupted, or its tool no longer exists: not run again after the start
            allowed = 1
            where += f", {kind}"
        if runs > allowed:
            why = ("its result was recorded under the epoch that started it, so nothing "
                   "re-ran it" if allowed == 1 else
                   f"at most one run per lease holder from epoch {begun} to {ended}")
            found.append(f"{where}) executed {runs} times; the log allows {allowed}: {why}")
    return found


# -- model calls made outside an announced attempt ---------------------------------------------

def read_call_log(path: Path) -> list[dict[str, Any]]:
    """The lines of a ``TOREN_SCRIPTED_CALL_LOG`` file (``pid``, ``model``, ``call``,
    ``messages``, ``at``: when the call started, in seconds since the epoch)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One announced model call (a ``ModelCallStarted``): the window in which the call it
    announces may start, and what that call's request looks like."""

    run_id: str
    stream: str
    step: int
    seq: int
    model: str | None
    #: Messages in the request (``None`` for a compaction call: its request is built apart).
    messages: int | None
    #: ``created_at`` of the ``ModelCallStarted`` (its transaction's start: before the commit
    #: the call waits for) and of the event that ends the attempt (the step's completion, a
    #: retry or the task's end: its transaction starts after the call returned); seconds.
    opens: float
    closes: float


def attempts(events: Sequence[Event]) -> list[Attempt]:
    """Every ``ModelCallStarted`` of every task stream as an ``Attempt``. The events must
    carry ``created_at``."""
    streams: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for event in sorted(events, key=lambda e: (e.run_id, e.stream, e.seq)):
        if event.stream != "run":
            streams[(event.run_id, event.stream)].append(event)
    found: list[Attempt] = []
    for (run_id, stream), items in streams.items():
        model: str | None = None
        messages = 0  # the length of the conversation the fold keeps (what a request sends)
        for i, event in enumerate(items):
            if event.created_at is None:
                raise ValueError(f"run {run_id} {stream} seq {event.seq} has no created_at: "
                                 "load the events with their created_at to check model calls")
            data = event.data
            if event.type == "TaskStarted":
                model = data["model"]
                messages += 0 if data.get("session") else 1
            elif event.type in ("UserMessage", "ToolCallCompleted") or (
                    event.type == "ModelCallCompleted" and data.get("purpose") != "compaction"):
                messages += 1
            elif event.type == "Compacted":
                messages = messages - data["replaced"] + 1
            elif event.type == "TaskCheckpoint" and "messages" in data:
                messages = len(data["messages"])  # the same count, unless the log starts here
            elif event.type == "ModelCallStarted":
                purpose = data.get("purpose")
                end = next((e for e in items[i + 1:] if e.type == "TaskFinished"
                            or (e.type in ("ModelCallCompleted", "RetryScheduled")
                                and e.data["step"] == data["step"]
                                and e.data.get("purpose") == purpose)), None)
                found.append(Attempt(
                    run_id, stream, data["step"], event.seq, model,
                    None if purpose == "compaction" else messages,
                    event.created_at.timestamp(),
                    math.inf if end is None or end.created_at is None
                    else end.created_at.timestamp()))
    return found


def model_call_violations(events: Sequence[Event], calls: Sequence[Mapping[str, Any]]
                          ) -> list[str]:
    """Model calls (``calls``: the offline model's call log) that no announced attempt in
    ``events`` explains: each call must start inside the window of a distinct attempt with the
    same model and request size. A call that starts after the completion of its step was
    committed (a step paid again although its answer was in the log), or before any worker
    announced it, finds none. Calls are matched to attempts earliest-closing first, which
    pairs as many as any matching can.

    The call log names no run or task, so the attempts of every run the log's process served
    must be in ``events``; a compaction call matches any compaction attempt of its model.
    """
    pool = attempts(events)
    exact: dict[tuple[str | None, int | None], list[Attempt]] = defaultdict(list)
    for attempt in pool:
        exact[(attempt.model, attempt.messages)].append(attempt)
    ordered = sorted(enumerate(calls, 1), key=lambda item: float(item[1]["at"]))
    unmatched = _match(ordered, exact, lambda call: (call["model"], call["messages"]))
    unmatched = _match(unmatched, exact, lambda call: (call["model"], None))
    found = []
    for line, call in unmatched:
        at = float(call["at"])
        done = [a for a in exact.get((call["model"], call["messages"]), []) if a.closes < at]
        latest = max(done, key=lambda a: a.closes, default=None)
        why = ("no attempt of that size was announced before it" if latest is None else
               f"the latest such step to finish, step {latest.step} of run {latest.run_id} "
               f"{latest.stream}, had its completion committed at {_clock(latest.closes)}")
        found.append(f"model call of call-log line {line} (pid {call.get('pid')}, "
                     f"{call['model']}, {call['messages']} messages, started at {_clock(at)}) "
                     f"was made outside every announced attempt: {why}")
    return found


def _match(calls: Sequence[tuple[int, Mapping[str, Any]]],
           pools: Mapping[tuple[str | None, int | None], Sequence[Attempt]],
           label: Callable[[Mapping[str, Any]], tuple[str | None, int | None]]
           ) -> list[tuple[int, Mapping[str, Any]]]:
    """Pair calls (sorted by start) with attempts whose window holds the start, each attempt
    once, earliest-closing first; the calls left over."""
    opening: dict[tuple[str | None, int | None], list[Attempt]] = {
        key: sorted(items, key=lambda a: a.opens) for key, items in pools.items()}
    cursor: Counter[tuple[str | None, int | None]] = Counter()
    open_now: dict[tuple[str | None, int | None], list[tuple[float, int, Attempt]]] = (
        defaultdict(list))
    left: list[tuple[int, Mapping[str, Any]]] = []
    for line, call in calls:
        key, at = label(call), float(call["at"])
        queue, heap = opening.get(key, []), open_now[key]
        while cursor[key] < len(queue) and queue[cursor[key]].opens <= at:
            attempt = queue[cursor[key]]
            heapq.heappush(heap, (attempt.closes, cursor[key], attempt))
            cursor[key] += 1
        while heap and heap[0][0] < at:
            heapq.heappop(heap)  # closed before this call: no later call can use it either
        if heap:
            heapq.heappop(heap)
        else:
            left.append((line, call))
    return left


def _clock(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="microseconds")


def types(events: Sequence[Event], stream: str = "task:main") -> list[str]:
    return [e.type for e in sorted(events, key=lambda e: e.seq) if e.stream == stream]


RuntimeFactory = Callable[..., Any]


@pytest.fixture
async def make_runtime(database_url: str, tmp_path: Path) -> AsyncIterator[RuntimeFactory]:
    """``await make_runtime(dirs=[...] | agents=[...], models={...}, workers=True, **settings)``
    -> a started ``Runtime`` on this test's database, stopped at teardown."""
    started: list[Runtime] = []

    async def make(*, dirs: Sequence[Path] | None = None,
                   agents: Sequence[AgentSpec] | None = None,
                   models: dict[str, Model] | None = None, workers: bool = True,
                   **overrides: Any) -> Runtime:
        settings = dataclasses.replace(
            Settings(database_url=database_url, home=tmp_path / "home", load_plugins=()),
            **(FAST | overrides))
        runtime = Runtime(dirs, settings=settings, plugins=plugin_host(models), agents=agents)
        await runtime.start(workers=workers)
        started.append(runtime)
        return runtime

    yield make
    for runtime in reversed(started):
        await runtime.stop()
