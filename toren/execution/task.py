"""The agentic task loop: model call -> tool calls -> results -> ..., durable at every step.

Rule: every recorded fact is flushed (appended, compare-and-swap, lease-checked) before any
side effect that depends on it. A model response is appended before its tool calls run; tool
results are appended before the next model call. Each flush is one transaction, so a step
(model call + tool calls) costs two commits and each commit also carries the marker of the next
effect (``ModelCallStarted`` rides with the tool results, ``ToolCallStarted`` with the response).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import inspect
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from toren.agents import AgentSpec, Limits, SubagentSpec
from toren.core import events as ev
from toren.core.catalog import decode_events
from toren.core.compaction import (
    boundary,
    compacted,
    estimate_tokens,
    needs_compaction,
    summary_request,
)
from toren.core.decisions import (
    CallModel,
    Done,
    EndTurn,
    Finish,
    RunTools,
    backoff_delay,
    clean_text,
    next_task_action,
    normalize_calls,
    truncate_output,
)
from toren.core.events import NewEvent
from toren.core.fold import (
    PendingToolCall,
    TaskCheckpoint,
    TaskState,
    apply_task_event,
    checkpoint_due,
    fold_task,
)
from toren.core.runs import RunUpdate
from toren.errors import ContextWindowExceeded, ProviderError, RunCancelled, TorenError
from toren.execution.context import ToolCallContext, _current, running_async_tool
from toren.execution.messages import run_tick, task_message
from toren.execution.ports import ExecutionPorts
from toren.execution.tool_threads import ToolNotStarted, ToolThreads
from toren.seams.model import Model, ModelRequest, ModelResponse, ToolCall
from toren.seams.shapes import Lease, OutgoingMessage, QueueMessage
from toren.seams.tools import Tool

log = logging.getLogger(__name__)
#: Models already warned about for having no known price (one warning per process).
_UNPRICED: set[str] = set()


def idempotency_key(run_id: str, task_id: str, step: int, index: int) -> str:
    """Stable across crashes and retries: derived only from where the call sits in the run."""
    return f"toren:{run_id}:{task_id}:{step}:{index}"


@dataclass(frozen=True)
class TaskSpec:
    """What a task runs as: the agent itself or one of its subagents."""

    name: str | None
    model: str
    prompt: str
    tools: dict[str, Tool]
    limits: Limits


def task_spec(agent: AgentSpec, subagent: str | None) -> TaskSpec:
    if subagent is None:
        return TaskSpec(None, agent.model, agent.prompt, agent.tools, agent.limits)
    sub: SubagentSpec | None = agent.subagents.get(subagent)
    if sub is None:
        raise TorenError(f"agent {agent.name!r} has no subagent {subagent!r} "
                         f"(subagents/{subagent}.md); it may have been removed")
    return TaskSpec(sub.name, sub.model, sub.prompt, sub.tools, sub.limits)


class TaskRunner:
    """Works one task for as long as this worker holds its lease and there is work to do."""

    def __init__(self, ports: ExecutionPorts, agent: AgentSpec, message: QueueMessage,
                 lease: Lease, state: TaskState) -> None:
        self.ports = ports
        self.store = ports.store
        self.settings = ports.settings
        self.agent = agent
        self.message = message
        self.lease = lease
        self.state = state
        self.run_id = lease.run_id
        self.task_id = message.payload["task_id"]
        self.subagent = (state.started.subagent if state.started is not None
                         else message.payload.get("subagent"))
        self.pending: list[NewEvent] = []
        #: A change to the run's row that goes with the next flush (e.g. clearing an error).
        self.pending_update: RunUpdate | None = None

    # -- recording -----------------------------------------------------------------------------

    def record(self, event: ev.EventData | TaskCheckpoint) -> None:
        """Fold an event into the in-memory state now; it is appended at the next flush."""
        self.pending.append(NewEvent.of(event))
        apply_task_event(self.state, event)

    async def flush(self, *, messages: Sequence[OutgoingMessage] = (),
                    run_update: RunUpdate | None = None, done: bool = False) -> None:
        """Append what was recorded; with ``done``, also ack the message and free the lease."""
        if not self.pending and not done:
            return
        if self.pending and checkpoint_due(self.state, self.settings.checkpoint_every):
            self.record(self.state.snapshot())
        first_seq = self.state.next_seq - len(self.pending)
        await self.store.append(
            self.agent.name, self.lease, first_seq, self.pending, ttl_s=self.settings.lease_ttl_s,
            messages=messages, run_update=run_update or self.pending_update,
            ack=self.message if done else None, release=done,
            progress=None if done else self.message)
        self.ports.appended(self.agent.name, self.lease.stream, first_seq, self.pending)
        self.pending = []
        self.pending_update = None
        self.ports.crash_point("after_append")

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            self.spec = task_spec(self.agent, self.subagent)
        except TorenError as exc:
            self.spec = TaskSpec(self.subagent, self.agent.model, "", {}, self.agent.limits)
            await self.finish("error", None, {"code": exc.code, "message": exc.message})
            return
        if self.state.started is None:
            await self.start()
        while True:
            action = next_task_action(self.state, self.spec.limits, self.lease.epoch)
            if isinstance(action, Done):
                await self.flush(done=True)
                return
            if isinstance(action, Finish):
                await self.finish(action.stop_reason, action.output, action.error)
                return
            if isinstance(action, EndTurn):
                await self.end_turn(action.stop_reason, action.output)
                return
            if isinstance(action, RunTools):
                await self.flush()
                await self.run_tools(action.calls)
                continue
            assert isinstance(action, CallModel)
            if not await self.call_model(action):
                return

    async def start(self) -> None:
        payload = self.message.payload
        digest = hashlib.sha256(self.spec.prompt.encode()).hexdigest()
        # kept before the TaskStarted that names it, so every prompt the log names is kept
        await self.ports.prompts.save_prompt(self.agent.name, digest, self.spec.prompt)
        self.record(ev.TaskStarted(
            task_id=self.task_id, subagent=self.spec.name, model=self.spec.model,
            input=payload.get("input"), limits=self.spec.limits.to_json(),
            tools=tuple(self.spec.tools),
            prompt_sha256=digest,
            epoch=self.lease.epoch, session=self.state.session))

    async def call_model(self, action: CallModel) -> bool:
        """Make one model call (compacting first if the context is too large); ``False`` when
        the task must stop here (finished, or a retry scheduled)."""
        model = self.ports.model(self.spec.model, self.agent.base_url)
        repeated = action.repeated
        if not self.state.compacted_since_call and needs_compaction(
                self.agent.compaction, model.context_window, self.spec.prompt,
                self.state.messages):
            if not await self.compact(action.step, model, "threshold", repeated):
                return False
            repeated = False
        while True:
            self.record(ev.ModelCallStarted(step=action.step, epoch=self.lease.epoch))
            if self.state.steps == 0:
                self.pending_update = RunUpdate(status="running")
            await self.flush()
            request = ModelRequest(
                model=self.spec.model, system=self.spec.prompt,
                messages=tuple(self.state.messages),
                tools=tuple(tool.spec for tool in self.spec.tools.values()))
            try:
                result = await self.invoke(model, request, action.step)
            except ContextWindowExceeded as exc:
                # compact and retry once; a second overflow right after compacting is final
                if self.state.compacted_since_call or boundary(
                        self.state.messages, self.agent.compaction.keep_recent_messages) is None:
                    await self.finish("error", None, {"code": exc.code, "message": exc.message})
                    return False
                if not await self.compact(action.step, model, "context_window_exceeded", False):
                    return False
                continue
            if result is None:
                return False
            self.ports.crash_point("after_model_response")
            response, latency_ms = result
            self.record_response(action.step, response, latency_ms, repeated, model)
            return True

    async def invoke(self, model: Model, request: ModelRequest, step: int
                     ) -> tuple[ModelResponse, float] | None:
        """Call the model; on failure end the task or schedule a retry and return ``None``.

        ``ContextWindowExceeded`` propagates: the caller decides whether to compact.
        """
        started = time.perf_counter()
        try:
            response = await model.complete(request)
        except ContextWindowExceeded:
            raise
        except ProviderError as exc:
            if exc.retryable:
                await self.schedule_retry(step, exc)
            else:
                await self.finish("error", None, {"code": exc.code, "message": exc.message})
            return None
        except Exception as exc:  # a provider plugin bug must not loop through redeliveries
            log.exception("model %s raised", self.spec.model)
            await self.finish("error", None, {
                "code": "provider_error",
                "message": f"model {self.spec.model} raised {type(exc).__name__}: {exc}"})
            return None
        return response, round((time.perf_counter() - started) * 1000, 3)

    async def compact(self, step: int, model: Model,
                      reason: Literal["threshold", "context_window_exceeded"],
                      repeated: bool) -> bool:
        """Summarise older turns with a recorded model call; ``False`` if the task stopped."""
        messages = self.state.messages
        cut = boundary(messages, self.agent.compaction.keep_recent_messages)
        if cut is None:
            return True
        self.record(ev.ModelCallStarted(step=step, epoch=self.lease.epoch, purpose="compaction"))
        await self.flush()
        before = estimate_tokens(self.spec.prompt, messages)
        try:
            result = await self.invoke(model, summary_request(self.spec.model, messages, cut),
                                       step)
        except ContextWindowExceeded as exc:
            await self.finish("error", None, {
                "code": exc.code,
                "message": f"the conversation is too large even to summarise: {exc.message}"})
            return False
        if result is None:
            return False
        self.ports.crash_point("mid_compaction")
        response, latency_ms = result
        self.record_response(step, response, latency_ms, repeated, model, purpose="compaction")
        self.record(ev.Compacted(
            step=step, summary=response.text, replaced=cut, reason=reason,
            tokens_before=before, epoch=self.lease.epoch,
            tokens_after=estimate_tokens(self.spec.prompt,
                                         compacted(messages, cut, response.text))))
        return True

    def cost(self, response: ModelResponse, model: Model) -> float | None:
        """The call's cost: the agent's ``pricing:`` for the model, else the provider's table,
        else what the provider reported; ``None`` (unknown, warned about once) otherwise."""
        pricing = self.agent.pricing.get(self.spec.model) or model.pricing
        if pricing is not None:
            return pricing.cost(response.usage)
        if response.cost_usd is None and self.spec.model not in _UNPRICED:
            _UNPRICED.add(self.spec.model)
            log.warning("no price is known for %s: its calls are recorded with an unknown cost; "
                        "set pricing: in agent.yaml to record it", self.spec.model)
        return response.cost_usd

    def record_response(self, step: int, response: ModelResponse, latency_ms: float,
                        repeated: bool, model: Model,
                        purpose: Literal["compaction"] | None = None) -> None:
        had_error = self.state.retry is not None
        tool_calls = normalize_calls(
            response.tool_calls,
            (c.id for m in self.state.messages if m.role == "assistant" for c in m.tool_calls),
            step)
        usage = response.usage
        self.record(ev.ModelCallCompleted(
            step=step, epoch=self.lease.epoch,
            model=response.model or self.spec.model, text=clean_text(response.text),
            tool_calls=() if purpose is not None else tuple(
                ev.RecordedToolCall(id=c.id, name=c.name, arguments=c.arguments,
                                    arguments_error=c.arguments_error) for c in tool_calls),
            stop_reason=response.stop_reason,
            usage=ev.TokenUsage(input_tokens=usage.input_tokens,
                                output_tokens=usage.output_tokens,
                                cache_read_tokens=usage.cache_read_tokens,
                                cache_write_tokens=usage.cache_write_tokens),
            cost_usd=self.cost(response, model), latency_ms=latency_ms, repeated=repeated,
            purpose=purpose,
            provider_data=response.provider_data if purpose is None else None))
        if had_error:
            self.pending_update = RunUpdate(error=None)  # recovered: the latest error clears
        if purpose is not None:
            return
        for index, call in enumerate(tool_calls):
            problem = self.check_call(call)
            if problem is not None:
                kind, text = problem
                self.record(self.tool_error(step, call, kind, text))
                continue
            self.record(ev.ToolCallStarted(
                step=step, call_id=call.id, name=call.name, arguments=call.arguments,
                idempotency_key=idempotency_key(self.run_id, self.task_id, step, index),
                epoch=self.lease.epoch))

    def tool_error(self, step: int, call: ToolCall, kind: ev.ToolErrorKind,
                   text: str) -> ev.ToolCallCompleted:
        """The result of a tool call that did not run: a structured error for the model."""
        return ev.ToolCallCompleted(
            step=step, call_id=call.id, name=call.name, output=text, is_error=True,
            error_kind=kind, truncated=False, original_bytes=len(text.encode()),
            duration_ms=0.0, epoch=self.lease.epoch)

    def check_call(self, call: ToolCall) -> tuple[ev.ToolErrorKind, str] | None:
        """A structured error for the model if the call names no tool or has bad arguments."""
        tool = self.spec.tools.get(call.name)
        if tool is None:
            available = ", ".join(self.spec.tools) or "none"
            return "unknown_tool", (f"Error: there is no tool named {call.name!r}. "
                                    f"Available tools: {available}.")
        if call.arguments_error is not None:
            return "invalid_arguments", (
                f"Error: the arguments for {call.name} could not be read: "
                f"{call.arguments_error}. Send a JSON object matching: "
                f"{json.dumps(tool.parameters, sort_keys=True)}")
        import jsonschema  # ~0.15 s to import: only validation needs it, not every toren command

        error = jsonschema.exceptions.best_match(tool.validator.iter_errors(call.arguments))
        if error is not None:
            where = ".".join(str(p) for p in error.absolute_path) or "arguments"
            return "invalid_arguments", (
                f"Error: invalid arguments for {call.name}: {where}: {error.message}. "
                f"Expected JSON Schema: {json.dumps(tool.parameters, sort_keys=True)}")
        return None

    async def run_tools(self, calls: Sequence[PendingToolCall]) -> None:
        """Run the calls at once and record their results; if the run is cancelled meanwhile,
        stop waiting (calls not started yet never start) and end the task's work at once."""
        cancelled = asyncio.Event()
        runs = [asyncio.create_task(self.run_tool(call, cancelled),
                                    name=f"toren-tool-{call.call.name}") for call in calls]
        watcher = asyncio.create_task(self.watch_cancel(cancelled), name="toren-cancel-watch")
        stop = asyncio.create_task(cancelled.wait())
        try:
            pending: set[asyncio.Task[Any]] = set(runs)
            while pending and not cancelled.is_set():
                _done, pending = await asyncio.wait(pending | {stop},
                                                    return_when=asyncio.FIRST_COMPLETED)
                pending.discard(stop)
        finally:
            for task in (watcher, stop, *runs):
                if not task.done():
                    task.cancel()
        if cancelled.is_set():
            await self.abandon(calls, runs)
            raise RunCancelled(f"run {self.run_id} was cancelled while its tools ran")
        self.ports.crash_point("after_tool")
        for run in runs:
            self.record(run.result())

    async def watch_cancel(self, cancelled: asyncio.Event) -> None:
        """Set ``cancelled`` when the run is cancelled (checked every third of the lease TTL,
        as often as leases are renewed)."""
        while True:
            await asyncio.sleep(self.settings.lease_ttl_s / 3)
            try:
                status = await self.store.run_status(self.agent.name, self.run_id)
            except TorenError as exc:  # the database blinked: the next look may see it
                log.debug("could not check whether run %s was cancelled: %s", self.run_id, exc)
                continue
            if status is None or status == "cancelled":
                cancelled.set()
                return

    async def abandon(self, calls: Sequence[PendingToolCall],
                      runs: Sequence[asyncio.Task[ev.ToolCallCompleted]]) -> None:
        """Record, for the cancelled run's audit trail, the results of calls that finished and
        that Toren stopped waiting for (the run refuses leased appends once cancelled)."""
        results: list[ev.ToolCallCompleted] = []
        for pending, run in zip(calls, runs, strict=True):
            if run.done() and not run.cancelled() and run.exception() is None:
                results.append(run.result())
                continue
            text = ("Error: the run was cancelled while this tool call waited or ran; Toren "
                    "stopped waiting for it. A call that had started may still take effect.")
            results.append(self.tool_error(pending.step, pending.call, "abandoned", text))
        await self.store.append_unleased(
            self.agent.name, self.run_id, self.lease.stream,
            [NewEvent.of(result) for result in results], only_if_active=False)

    async def run_tool(self, pending: PendingToolCall,
                       cancelled: asyncio.Event | None = None) -> ev.ToolCallCompleted:
        call = pending.call
        tool = self.spec.tools.get(call.name)
        if pending.epoch != self.lease.epoch and (tool is None or not tool.idempotent):
            return self.tool_error(pending.step, call, "interrupted", (
                "Error: this tool call was interrupted: the worker running it stopped before "
                "its result was recorded. It was not run again because the tool is not "
                "marked idempotent, so it may or may not have taken effect."))
        if tool is None:  # the tool was removed from the agent after the call was recorded
            return self.tool_error(pending.step, call, "unknown_tool",
                                   f"Error: there is no tool named {call.name!r} any more.")
        context = ToolCallContext(self.agent.name, self.run_id, self.task_id, pending.step,
                                  call.id, pending.idempotency_key,
                                  max_output_bytes=self.spec.limits.max_tool_output_bytes,
                                  env_names=tool.env_names,
                                  read_file=self.ports.files.read_file
                                  if self.ports.files is not None else None)
        started = time.perf_counter()
        timeout_s = self.spec.limits.tool_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                output, is_error = await invoke_tool(
                    tool, call.arguments, context, self.ports.tool_threads,
                    wanted=lambda: cancelled is None or not cancelled.is_set())
        except TimeoutError:
            return self.tool_error(pending.step, call, "timeout", (
                f"Error: {call.name} did not finish within {timeout_s:g} s "
                "(limits.toolTimeoutSeconds); Toren stopped waiting for it. It may still take "
                "effect."))
        duration_ms = round((time.perf_counter() - started) * 1000, 3)
        text, truncated, size = truncate_output(clean_text(output),
                                                self.spec.limits.max_tool_output_bytes)
        return ev.ToolCallCompleted(
            step=pending.step, call_id=call.id, name=call.name, output=text, is_error=is_error,
            error_kind="exception" if is_error else None, truncated=truncated,
            original_bytes=size, duration_ms=duration_ms, epoch=self.lease.epoch)

    async def schedule_retry(self, step: int, exc: ProviderError) -> None:
        attempt = (self.state.retry.attempt if self.state.retry is not None else 0) + 1
        error = {"code": exc.code, "message": exc.message, "attempt": attempt}
        if attempt > self.settings.retry_max_attempts:
            error["message"] = f"gave up after {attempt - 1} retries: {exc.message}"
            await self.finish("error", None, error)
            return
        delay = backoff_delay(attempt, base_s=self.settings.retry_base_s,
                              cap_s=self.settings.retry_max_delay_s, random_unit=random.random())
        if exc.retry_after_s:
            delay = max(delay, exc.retry_after_s)
        next_at = (datetime.now(UTC) + timedelta(seconds=delay)).isoformat()
        self.record(ev.RetryScheduled(
            step=step, attempt=attempt, error={"code": exc.code, "message": exc.message},
            delay_s=round(delay, 3), next_attempt_at=next_at, epoch=self.lease.epoch))
        payload = self.message.payload
        await self.flush(
            messages=[task_message(self.task_id, payload.get("subagent"), payload.get("input"),
                                   delay_s=delay)],
            run_update=RunUpdate(error=error | {"next_attempt_at": next_at}), done=True)

    async def end_turn(self, stop_reason: Literal["end_turn", "max_steps"],
                       output: str | None) -> None:
        """A session's turn is over: record it, hand the turn back to the user (the run's
        status becomes ``awaiting_input`` in the same commit) and free the task."""
        self.record(ev.TurnEnded(
            turn=self.state.turns, stop_reason=stop_reason, output=output,
            steps=self.state.steps - self.state.turn_first_step,
            cost_usd=round(self.state.cost_usd, 10), epoch=self.lease.epoch))
        await self.flush(run_update=RunUpdate(status="awaiting_input", output=output, error=None),
                         done=True)

    async def finish(self, stop_reason: ev.StopReason, output: str | None,
                     error: dict[str, Any] | None) -> None:
        self.record(ev.TaskFinished(
            task_id=self.task_id, status=ev.status_for(stop_reason), stop_reason=stop_reason,
            output=output, error=error, steps=self.state.steps,
            cost_usd=round(self.state.cost_usd, 10), epoch=self.lease.epoch))
        await self.flush(messages=[run_tick(f"task {self.task_id} finished")], done=True)


async def invoke_tool(tool: Tool, arguments: dict[str, Any], context: ToolCallContext,
                      threads: ToolThreads, *,
                      wanted: Callable[[], bool] = lambda: True) -> tuple[str, bool]:
    """Run a tool (sync tools in one of the worker's tool threads); exceptions become error
    text for the model. ``ToolNotStarted`` when a sync call is no longer ``wanted`` once a
    thread is free."""
    token = _current.set(context)
    try:
        if inspect.iscoroutinefunction(tool.function):
            with running_async_tool(tool, context):
                result = await tool.function(**arguments)
        else:
            ctx = contextvars.copy_context()
            result = await threads.run(functools.partial(ctx.run, tool.function, **arguments),
                                       name=tool.name, wanted=wanted)
    except ToolNotStarted:
        raise
    except Exception as exc:
        return f"Error: {type(exc).__name__}: {exc}", True
    finally:
        _current.reset(token)
    if isinstance(result, str):
        return result, False
    return json.dumps(result, default=str, ensure_ascii=False), False


async def work_task(ports: ExecutionPorts, agent: AgentSpec, message: QueueMessage) -> None:
    """Handle a ``task`` message: take the task's lease, fold its log, continue it."""
    assert message.run_id is not None
    found = await ports.acquire(message, ev.task_stream(message.payload["task_id"]), False)
    if found is None:
        return
    lease, events = found
    state = fold_task(decode_events(events))
    await TaskRunner(ports, agent, message, lease, state).run()
