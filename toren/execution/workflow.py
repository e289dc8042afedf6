"""Workflows: deterministic Python that dispatches waves of agentic tasks.

A crew's ``workflow.py`` defines ``async def workflow(ctx)``. The orchestrator re-executes it
from the top on every tick of the run, holding the run's lease. Everything the code did before
returns instantly from the run's log (waves and their results, ``now()``, ``uuid()``, timers,
log lines); the first thing that has not happened yet is recorded and the execution suspends
until it has (a wave's tasks finish, a timer fires). Code that asks for something different from
what the log recorded at the same point is a ``NonDeterminismError``, never a silent divergence.
"""

from __future__ import annotations

import json
import uuid as uuid_module
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from toren.agents import AgentSpec
from toren.core import events as ev
from toren.core.decisions import clean_json
from toren.core.events import NewEvent
from toren.core.fold import RunState, apply_run_event
from toren.core.output import schema_problem
from toren.errors import NonDeterminismError, SignalTimeout, TorenError
from toren.execution.messages import signal_timeout_message, task_message, timer_message
from toren.execution.signals import Signal, check_signal_name
from toren.seams.shapes import OutgoingMessage

WorkflowFunction = Callable[["WorkflowContext"], Awaitable[Any]]


class Suspend(BaseException):
    """Raised inside ``ctx`` to stop this execution until something recorded has happened.

    A ``BaseException`` so that workflow code catching ``Exception`` cannot swallow it.
    """


class StopRun(TorenError):
    """A run-level cap stops the run before the next wave."""

    def __init__(self, stop_reason: ev.StopReason, message: str) -> None:
        super().__init__(message)
        self.stop_reason = stop_reason


@dataclass(frozen=True)
class TaskResult:
    """The outcome of one task of a wave, in the order the wave listed it."""

    task_id: str
    subagent: str | None
    status: str
    stop_reason: str
    #: The task's final answer: its text, or, when the subagent declares ``output:``, the
    #: JSON value the answer validated to (an object).
    output: Any
    error: dict[str, Any] | None
    cost_usd: float

    @property
    def ok(self) -> bool:
        return self.status == "completed"


@dataclass
class WorkflowOutcome:
    """What one execution did: events and messages to append, and how it ended (if it did)."""

    events: list[NewEvent] = field(default_factory=list)
    messages: list[OutgoingMessage] = field(default_factory=list)
    finished: ev.RunFinished | None = None


def _spec(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return {"subagent": item["subagent"], "input": item.get("input"),
                "output": item.get("output")}
    subagent, task_input, *rest = item
    return {"subagent": subagent, "input": task_input, "output": rest[0] if rest else None}


def _describe_difference(wave: int, recorded: list[dict[str, Any]],
                         asked: list[dict[str, Any]]) -> str:
    if len(recorded) != len(asked):
        return (f"wave {wave} was recorded with {len(recorded)} task(s), but the workflow now "
                f"asks for {len(asked)}")
    for index, (old, new) in enumerate(zip(recorded, asked, strict=True)):
        for key in ("subagent", "input", "output"):
            if old[key] != new[key]:
                return (f"wave {wave}, task {index}: {key} was {json.dumps(old[key])[:200]} "
                        f"when recorded, the workflow now asks for "
                        f"{json.dumps(new[key])[:200]}")
    return f"wave {wave} differs from the recorded one"


class WorkflowContext:
    """What ``workflow(ctx)`` gets: the run's input and durable operations."""

    def __init__(self, state: RunState, run_id: str, agent: AgentSpec,
                 outcome: WorkflowOutcome, *, clock: Callable[[], datetime],
                 new_uuid: Callable[[], str]) -> None:
        self._state = state
        self._agent = agent
        self._outcome = outcome
        self._clock = clock
        self._new_uuid = new_uuid
        self._waves = 0
        self._values = 0
        self._timers = 0
        self._logs = 0
        self._waits = 0
        self._reads = 0
        #: The run's input, as given to ``toren run`` / ``start_run``.
        self.input: Any = state.input
        #: The run's id.
        self.run_id = run_id

    def _record(self, event: ev.EventData) -> None:
        self._outcome.events.append(NewEvent.of(event))
        apply_run_event(self._state, event)

    async def wave(self, tasks: Iterable[Any]) -> list[TaskResult]:
        """Run tasks in parallel (on any worker of the fleet); their results, in order.

        Each task is ``(subagent, input)``, ``(subagent, input, output)`` or ``{"subagent":
        ..., "input": ..., "output": ...}``; ``output``, a JSON Schema, is what the task's final
        answer must match (its result's ``output`` is then the parsed object), in place of the
        subagent's own ``output:``. A failed task is in the results with its status and error:
        the workflow decides what follows.
        """
        self._waves += 1
        number = self._waves
        asked = [_spec(item) for item in tasks]
        for index, spec in enumerate(asked):
            if spec["subagent"] not in self._agent.subagents:
                known = ", ".join(self._agent.subagents) or "none"
                raise TorenError(f"wave {number} asks for subagent {spec['subagent']!r}, which "
                                 f"{self._agent.name} does not have (subagents/*.md: {known})")
            problem = None if spec["output"] is None else schema_problem(spec["output"])
            if problem is not None:
                raise TorenError(f"wave {number}, task {index} ({spec['subagent']}): its output "
                                 f"schema is not usable: {problem}{_caller_line()}")
        recorded = self._state.waves.get(number)
        if recorded is None:
            self._start_wave(number, asked)
            raise Suspend
        recorded_specs = [{"subagent": t.subagent, "input": t.input, "output": t.output}
                          for t in recorded.tasks]
        if recorded_specs != asked:
            raise NonDeterminismError(_describe_difference(number, recorded_specs, asked)
                                      + _caller_line())
        ids = [t.task_id for t in recorded.tasks]
        if not all(task_id in self._state.absorbed for task_id in ids):
            raise Suspend
        return [self._result(task_id) for task_id in ids]

    async def task(self, subagent: str, input: Any,
                   output: dict[str, Any] | None = None) -> TaskResult:
        """Run one task and return its result (a wave of one); ``output``: a JSON Schema its
        final answer must match (see ``wave``)."""
        (result,) = await self.wave([(subagent, input, output)])
        return result

    def _start_wave(self, number: int, asked: Sequence[dict[str, Any]]) -> None:
        limits = self._agent.limits
        if limits.max_waves is not None and number > limits.max_waves:
            raise StopRun("max_waves", f"the wave cap (limits.maxWaves = {limits.max_waves}) "
                                       f"was reached before wave {number}")
        spent = sum(t.cost_usd or 0.0 for t in self._state.absorbed.values())
        if limits.max_budget_usd is not None and spent >= limits.max_budget_usd:
            raise StopRun("budget_exhausted",
                          f"the run's budget (limits.maxBudgetUsd = {limits.max_budget_usd}) "
                          f"was spent (${spent:.4f}) before wave {number}")
        for task_id, absorbed in self._state.absorbed.items():
            # the ledger refused a task's next call: no room left for another wave's calls
            if absorbed.stop_reason == "budget_exhausted" and (absorbed.error or {}).get(
                    "code") == "budget_exhausted":
                scope = (absorbed.error or {}).get("scope", "run")
                which = "limits.dailyBudgetUsd" if scope == "daily" else "limits.maxBudgetUsd"
                raise StopRun("budget_exhausted",
                              f"the budget ({which}) had no room for a model call of task "
                              f"{task_id} before wave {number}")

        tasks = tuple(ev.WaveTask(task_id=f"w{number}-{index}", subagent=spec["subagent"],
                                  input=spec["input"], output=spec["output"])
                      for index, spec in enumerate(asked))
        self._record(ev.WaveStarted(wave=number, tasks=tasks))
        for task in tasks:
            self._record(ev.TaskScheduled(task_id=task.task_id, subagent=task.subagent,
                                          input=task.input, wave=number, output=task.output))
            self._outcome.messages.append(task_message(task.task_id, task.subagent, task.input,
                                                       output=task.output))

    def _result(self, task_id: str) -> TaskResult:
        absorbed = self._state.absorbed[task_id]
        return TaskResult(task_id=task_id, subagent=self._state.scheduled[task_id].subagent,
                          status=absorbed.status, stop_reason=absorbed.stop_reason,
                          output=absorbed.output, error=absorbed.error,
                          cost_usd=absorbed.cost_usd or 0.0)

    def _value(self, kind: Literal["now", "uuid"], make: Callable[[], Any]) -> Any:
        index = self._values
        self._values += 1
        if index < len(self._state.values):
            recorded = self._state.values[index]
            if recorded.kind != kind:
                raise NonDeterminismError(
                    f"recorded value {index} was ctx.{recorded.kind}(), the workflow now "
                    f"calls ctx.{kind}() at that point{_caller_line()}")
            return recorded.value
        value = make()
        self._record(ev.ValueRecorded(n=index, kind=kind, value=value))
        return value

    def now(self) -> datetime:
        """The current time by the database's clock (as the worker estimates it: a worker
        whose own clock is off reads the same time as the others), recorded: every
        re-execution sees the same value."""
        return datetime.fromisoformat(self._value("now", lambda: self._clock().isoformat()))

    def uuid(self) -> str:
        """A new UUID, recorded: every re-execution sees the same value."""
        return str(self._value("uuid", self._new_uuid))

    async def sleep(self, seconds: float) -> None:
        """A durable timer: the run waits without holding a worker, through restarts."""
        self._timers += 1
        number = self._timers
        started = self._state.timers.get(number)
        if started is None:
            fire_at = datetime.fromtimestamp(self._clock().timestamp() + seconds, UTC)
            self._record(ev.TimerStarted(timer=number, seconds=seconds,
                                         fire_at=fire_at.isoformat()))
            self._outcome.messages.append(timer_message(number, seconds))
            raise Suspend
        if started.seconds != seconds:
            raise NonDeterminismError(f"timer {number} was recorded as sleep({started.seconds}),"
                                      f" the workflow now calls sleep({seconds})"
                                      f"{_caller_line()}")
        if number not in self._state.timers_fired:
            raise Suspend

    # a durable timeout (recorded in the log), which asyncio.timeout cannot be
    async def wait_for_signal(self, name: str, *,
                              timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """Wait for a signal named ``name`` sent to this run; return its payload.

        Takes the oldest signal of that name that no earlier wait took, including one sent
        before the wait started (signals are kept in the run's log, never dropped); each
        signal is taken by one wait only. Without one, the run waits holding no worker,
        through restarts, until a signal arrives (``toren jobs signal``,
        ``POST /runs/{id}/signals/{name}``, ``Client.signal``, ``Runtime.send_signal``).
        With ``timeout`` (seconds), raises ``SignalTimeout`` when it passes first; which of
        the two happened is recorded, so every re-execution sees the same.
        """
        check_signal_name(name)
        if timeout is not None and not (isinstance(timeout, int | float) and timeout >= 0):
            raise TorenError(f"ctx.wait_for_signal({name!r}): timeout must be a number of "
                             f"seconds >= 0 or None, not {timeout!r}{_caller_line()}")
        self._waits += 1
        number = self._waits
        consumed = self._state.signals_consumed.get(number)
        started = self._state.signal_waits.get(number)
        recorded_name = (consumed.name if consumed is not None
                         else started.name if started is not None else name)
        if recorded_name != name or (started is not None and started.timeout_s != timeout):
            before = (started.timeout_s if started is not None else None)
            raise NonDeterminismError(
                f"signal wait {number} was recorded as wait_for_signal({recorded_name!r}"
                f"{'' if before is None else f', timeout={before}'}), the workflow now calls "
                f"wait_for_signal({name!r}{'' if timeout is None else f', timeout={timeout}'})"
                f"{_caller_line()}")
        if consumed is not None:
            return consumed.payload
        if number in self._state.signal_waits_timed_out:
            raise SignalTimeout(f"no signal {name!r} arrived within {timeout:g}s (signal wait "
                                f"{number}){_caller_line()}", name=name, timeout_s=timeout)
        found = self._state.unconsumed_signal(name)
        if found is not None:
            signal_number, signal = found
            self._record(ev.SignalConsumed(wait=number, name=name, signal=signal_number,
                                           payload=signal.payload))
            return signal.payload
        if started is None:
            fire_at = (None if timeout is None else
                       datetime.fromtimestamp(self._clock().timestamp() + timeout, UTC))
            self._record(ev.SignalWaitStarted(
                wait=number, name=name, timeout_s=None if timeout is None else float(timeout),
                fire_at=fire_at.isoformat() if fire_at is not None else None))
            if timeout is not None:
                self._outcome.messages.append(signal_timeout_message(number, timeout))
        raise Suspend

    def signals(self, name: str) -> list[Signal]:
        """Every signal named ``name`` sent to this run so far, oldest first (taken by a wait or
        not): a snapshot, recorded, so every re-execution gets the same list at this point.

        For "collect what has arrived" (votes, files, progress reports); to wait for the next
        one, call ``wait_for_signal``. Reading does not take a signal from the waits.
        """
        check_signal_name(name)
        index = self._reads
        self._reads += 1
        if index < len(self._state.signal_reads):
            recorded = self._state.signal_reads[index]
            if recorded.name != name:
                raise NonDeterminismError(
                    f"signal read {index} was recorded as ctx.signals({recorded.name!r}), the "
                    f"workflow now calls ctx.signals({name!r}){_caller_line()}")
            through = recorded.through
        else:
            through = max(self._state.received, default=0)
            self._record(ev.SignalsRead(n=index, name=name, through=through))
        return [Signal(name=name, payload=signal.payload, number=number,
                       sent_at=signal.sent_at)
                for number, signal in sorted(self._state.received.items())
                if number <= through and signal.name == name]

    def log(self, message: str, **fields: Any) -> None:
        """A line in the run's log (recorded once, however often the code re-executes)."""
        index = self._logs
        self._logs += 1
        if index >= self._state.logs:
            self._record(ev.WorkflowLogged(
                n=index, message=message, fields=json.loads(json.dumps(fields, default=str))))


async def execute(function: WorkflowFunction, state: RunState, run_id: str, agent: AgentSpec,
                  *, clock: Callable[[], datetime] | None = None,
                  new_uuid: Callable[[], str] | None = None) -> WorkflowOutcome:
    """Run the workflow once from the top against ``state``; what it did and how it ended."""
    outcome = WorkflowOutcome()
    context = WorkflowContext(state, run_id, agent, outcome,
                              clock=clock or (lambda: datetime.now(UTC)),
                              new_uuid=new_uuid or (lambda: str(uuid_module.uuid4())))
    try:
        output = await function(context)
    except Suspend:
        return outcome
    except NonDeterminismError as exc:
        outcome.finished = _ended("failed", "error", None, exc.code, exc.message)
    except StopRun as exc:
        outcome.finished = _ended("stopped", exc.stop_reason, None, exc.stop_reason,
                                  exc.message)
    except TorenError as exc:
        outcome.finished = _ended("failed", "error", None, "workflow_error", exc.message)
    except Exception as exc:
        where = _user_line(exc)
        outcome.finished = _ended("failed", "error", None, "workflow_error",
                                  f"workflow.py{where} raised {type(exc).__name__}: {exc}")
    else:
        unreplayed = _unreplayed(context, state)
        if unreplayed is not None:
            outcome.finished = _ended("failed", "error", None, NonDeterminismError.code,
                                      unreplayed)
            return outcome
        outcome.finished = (_stopped_by_budget(state, json_output(output))
                            or ev.RunFinished(status="completed", stop_reason="end_turn",
                                              error=None, output=json_output(output)))
    return outcome


def _stopped_by_budget(state: RunState, output: Any) -> ev.RunFinished | None:
    """How a workflow that returned ends when the budget stopped every one of its tasks:
    ``stopped (budget_exhausted)``, keeping what it returned (built from partial answers), so
    the run's status and why say the budget stopped it; ``None`` otherwise (a workflow that
    got at least one task's full answer completed)."""
    tasks = state.absorbed
    if not tasks or any(task.stop_reason != "budget_exhausted" for task in tasks.values()):
        return None
    scopes = {(task.error or {}).get("scope", "run") for task in tasks.values()}
    which = " and ".join(f"limits.{'dailyBudgetUsd' if scope == 'daily' else 'maxBudgetUsd'}"
                         for scope in sorted(scopes))
    spent = sum(task.cost_usd or 0.0 for task in tasks.values())
    count = "its only task" if len(tasks) == 1 else f"all {len(tasks)} of its tasks"
    return _ended("stopped", "budget_exhausted", output, "budget_exhausted",
                  f"the budget ({which}) stopped {count} (${spent:.4f} spent); the workflow's "
                  "output is built from their partial answers")


def json_output(value: Any) -> Any:
    """A workflow's return value as the run's output: text or ``None`` as it is, any other
    value as JSON (a ``datetime`` or other non-JSON value becomes its text)."""
    if value is None or isinstance(value, str):
        return clean_json(value)
    try:
        return clean_json(json.loads(json.dumps(value, default=str, allow_nan=False)))
    except ValueError:  # NaN or infinity, which JSON cannot hold
        return clean_json(str(value))


def _ended(status: ev.TaskStatus, stop_reason: ev.StopReason, output: Any, code: str,
           message: str) -> ev.RunFinished:
    return ev.RunFinished(status=status, stop_reason=stop_reason, output=output,
                          error={"code": code, "message": message})


def _user_line(exc: BaseException) -> str:
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename.endswith("workflow.py") and "/toren/" not in f.filename]
    return f":{frames[-1].lineno}" if frames else ""


def _unreplayed(context: WorkflowContext, state: RunState) -> str | None:
    """What the log recorded that a workflow which returned never asked for again (code that
    changed mid-run and now ends earlier, or skips a wave, timer or value), or ``None``."""
    asked_waves = context._waves
    if len(state.waves) > asked_waves:
        wave = state.waves[asked_waves + 1]
        names = ", ".join(str(task.subagent) for task in wave.tasks)
        return (f"the workflow returned after {asked_waves} wave(s), but wave {wave.wave} "
                f"({names}) was recorded: workflow.py no longer asks for it")
    if len(state.timers) > context._timers:
        return (f"the workflow returned without sleeping at timer {context._timers + 1}, "
                "which was recorded: workflow.py no longer calls that ctx.sleep()")
    if len(state.signal_waits) + len(state.signals_consumed) > 0 and max(
            [*state.signal_waits, *state.signals_consumed]) > context._waits:
        return (f"the workflow returned without waiting at signal wait {context._waits + 1}, "
                "which was recorded: workflow.py no longer calls that ctx.wait_for_signal()")
    if len(state.signal_reads) > context._reads:
        return (f"the workflow returned without reading signals at read {context._reads}, "
                "which was recorded: workflow.py no longer calls that ctx.signals()")
    if len(state.values) > context._values:
        recorded = state.values[context._values]
        return (f"the workflow returned without asking for value {recorded.n} "
                f"(ctx.{recorded.kind}()), which was recorded: workflow.py no longer calls it")
    return None


def _caller_line() -> str:
    """`` (workflow.py:LINE)``: the line of workflow code that made the ``ctx`` call in
    progress, to name the step that diverged; empty when no such frame is on the stack."""
    import sys

    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.endswith("workflow.py") and "/toren/" not in name.replace("\\", "/"):
            return f" (workflow.py:{frame.f_lineno})"
        frame = frame.f_back  # type: ignore[assignment]
    return ""
