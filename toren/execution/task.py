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
import dataclasses
import functools
import hashlib
import inspect
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Literal

import msgspec

from toren.agents import AgentSpec, Limits, SubagentSpec
from toren.agents.children import BACKGROUND_TOOL
from toren.core import events as ev
from toren.core.approvals import (
    EXPIRED_BY,
    ApprovalPolicy,
    ApprovalRecord,
    approval_id,
    arguments_digest,
    decision_text,
    reminder_text,
)
from toren.core.attachments import Attachment
from toren.core.catalog import decode_events
from toren.core.compaction import (
    boundary,
    compacted,
    estimate_tokens,
    needs_compaction,
    summary_request,
)
from toren.core.decisions import (
    AwaitApprovals,
    CallModel,
    CheckOutput,
    CheckPolicies,
    Done,
    EndTurn,
    Finish,
    RunTools,
    backoff_delay,
    clean_text,
    judge_output,
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
from toren.core.memory import system_prompt
from toren.core.output import OutputSchema
from toren.core.pricing import Pricing
from toren.core.runs import RunUpdate
from toren.errors import (
    ContextWindowExceeded,
    ProviderError,
    RunCancelled,
    RunVersionStale,
    TorenError,
)
from toren.execution.attachments import AttachmentReader, image_tokens, store_tool_files
from toren.execution.budget_guard import BudgetGuard, Reservation
from toren.execution.children import (
    advance_child_calls,
    child_call,
    tell_background_outcomes,
)
from toren.execution.context import (
    ToolCallContext,
    ToolWaitRequested,
    _current,
    running_async_tool,
)
from toren.execution.forking import forked_spec, new_task_fork
from toren.execution.memory import is_memory_call, load_memory, run_memory_calls
from toren.execution.messages import run_tick, task_message
from toren.execution.outages import append_through_outage
from toren.execution.ports import ExecutionPorts
from toren.execution.questions import advance_questions, is_question
from toren.execution.rate_guard import MAX_SLICE_S, RateGuard, RateHold
from toren.execution.tool_threads import ToolNotStarted, ToolThreads
from toren.execution.tool_waits import advance_tool_waits, last_signal, start_tool_waits
from toren.seams.model import Model, ModelRequest, ModelResponse, ToolCall, ToolSpec, Usage
from toren.seams.policies import (
    ModelResponseView,
    PolicyHooks,
    PolicyOutcome,
    ProposedToolCall,
    ToolCallResult,
    digest,
)
from toren.seams.shapes import (
    TEXT_DELTA_MAX_CHARS,
    Lease,
    OutgoingMessage,
    QueueMessage,
    TextDelta,
)
from toren.seams.tool_sources import ToolSourceEntry, ToolSourceUnavailable, source_tools
from toren.seams.tools import Tool, ToolFile, ToolResult

log = logging.getLogger(__name__)
#: Models already warned about for having no known price (one warning per process).
_UNPRICED: set[str] = set()
#: ``invoke``'s answer when the call failed and a model of ``fallbacks:`` takes over.
FELL_BACK: Literal["fell_back"] = "fell_back"


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
    #: Tools that need a person's approval before each call, by name.
    approvals: dict[str, ApprovalPolicy] = dataclasses.field(default_factory=dict)
    #: Tool-source entries (``mcpServers:``) whose tools join ``tools`` as the task starts.
    sources: tuple[ToolSourceEntry, ...] = ()
    #: ``output:``: the JSON Schema the task's final answer must match.
    output: OutputSchema | None = None

    @functools.cached_property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """The tools as every model call of the task offers them (built once per task: a
        tuple of one spec per tool was rebuilt for each call)."""
        return tuple(tool.spec for tool in self.tools.values())


def task_spec(agent: AgentSpec, subagent: str | None) -> TaskSpec:
    if subagent is None:
        return TaskSpec(None, agent.model, agent.prompt, agent.tools, agent.limits,
                        agent.approvals, agent.tool_sources, agent.output)
    sub: SubagentSpec | None = agent.subagents.get(subagent)
    if sub is None:
        raise TorenError(f"agent {agent.name!r} has no subagent {subagent!r} "
                         f"(subagents/{subagent}.md); it may have been removed")
    return TaskSpec(sub.name, sub.model, sub.prompt, sub.tools, sub.limits, agent.approvals,
                    sub.tool_sources, sub.output)


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
        self.budget = BudgetGuard(ports.budgets, agent, self.run_id, lease.stream)
        self.rate = RateGuard(ports.rate_limits, agent, self.run_id, lease.stream,
                              self.run_cancelled,
                              slice_s=min(MAX_SLICE_S, self.settings.lease_ttl_s / 3))
        #: The ids of the tool calls recorded in this task (from its messages when first
        #: needed, then as calls are recorded): a new call's id is made unique against them.
        #: After a compaction it still holds the ids of the calls summarised away, which only
        #: makes a repeated id rarer.
        self.call_ids: set[str] | None = None
        #: The spec's own tools, before its tool sources' were added (``add_source_tools``).
        self.static_tools: dict[str, Tool] | None = None
        self.attachments = AttachmentReader(ports.files)

    @property
    def priority(self) -> int:
        """The run's priority (-100..100, higher first; docs/guides/flow-control.md), as the
        message being worked carries it: what waiters on a shared resource (the provider rate
        limiter) order this task's calls by."""
        return self.message.priority

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
        await append_through_outage(
            functools.partial(
                self.store.append, self.agent.name, self.lease, first_seq, self.pending,
                ttl_s=self.settings.lease_ttl_s, messages=messages,
                run_update=run_update or self.pending_update, ack=self.message if done else None,
                release=done, progress=None if done else self.message),
            within_s=self.settings.lease_ttl_s, first_delay_s=self.settings.poll_interval_s,
            what=f"an append to {self.lease.stream} of run {self.run_id}")
        self.ports.appended(self.agent.name, self.lease.stream, first_seq, self.pending)
        self.pending = []
        self.pending_update = None
        self.ports.crash_point("after_append")
        if self.budget.unsettled:  # most appends settle nothing: no coroutine to run
            await self.budget.write()
        if self.rate.unsettled:
            await self.rate.write()

    async def run_cancelled(self) -> bool:
        """Whether the run was cancelled (or is gone); ``False`` when the store cannot say."""
        try:
            status = await self.store.run_status(self.agent.name, self.run_id)
        except TorenError as exc:
            log.debug("could not check whether run %s was cancelled: %s", self.run_id, exc)
            return False
        return status is None or status == "cancelled"

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            self.spec = task_spec(self.agent, self.subagent)
        except TorenError as exc:
            self.spec = TaskSpec(self.subagent, self.agent.model, "", {}, self.agent.limits)
            await self.finish("error", None, {"code": exc.code, "message": exc.message})
            return
        if not self.state.session and BACKGROUND_TOOL in self.spec.tools:
            # background runs report to a session; a one-shot run has no one to tell
            self.spec = replace(self.spec, tools={name: tool for name, tool in
                                                  self.spec.tools.items()
                                                  if name != BACKGROUND_TOOL})
        fork = self.state.fork or (new_task_fork(self.message.payload)
                                   if self.state.started is None else None)
        if fork is not None:  # a fork's live steps use its model and prompt
            try:
                self.spec = await forked_spec(self.spec, fork, self.ports.prompts,
                                              self.agent.name)
            except TorenError as exc:
                await self.finish("error", None, {"code": exc.code, "message": exc.message})
                return
            if self.state.fork is None:
                self.record(fork)  # a task the fork started afresh: before its TaskStarted
        if self.spec.sources and not await self.add_source_tools():
            return
        if self.state.started is None:
            await self.start()
        else:
            await self.note_prompt_change()
        if (self.agent.memory is not None and self.state.memory is None
                and self.state.finished is None):
            await load_memory(self)  # the run's subject and pinned memories (memory:)
        if self.state.started is not None and self.state.started.output is not None:
            # the workflow gave this task its own output schema (ctx.task(..., output=...))
            self.spec = replace(self.spec, output=OutputSchema(
                self.state.started.output, f"workflow.py (task {self.task_id})"))
        while True:
            action = next_task_action(self.state, self.spec.limits, self.lease.epoch,
                                      None if self.state.session else self.spec.output)
            # match, not a chain of isinstance calls: one per kind tried, twice a step
            match action:
                case CallModel():
                    if not await self.version_still_current():
                        return
                    if self.spec.sources and not await self.add_source_tools():
                        return  # each call offers the sources' tools as they are now
                    if not await self.call_model(action):
                        return
                case RunTools():
                    await self.flush()
                    if not await self.run_tools(action.calls):
                        return  # parked until the peer runs it asked end, or an answer
                case CheckOutput():
                    judged = await self.check_output(action)
                    if judged is None:
                        continue  # a repair turn: the model answers again
                    await self.finish(judged.stop_reason, judged.output, judged.error)
                    return
                case Done():
                    told = (await tell_background_outcomes(self)
                            if self.state.awaiting_input and self.state.finished is None else [])
                    await self.flush(done=True)
                    await self.notify_session(told)
                    return
                case Finish():
                    await self.finish(action.stop_reason, action.output, action.error)
                    return
                case EndTurn():
                    await self.end_turn(action.stop_reason, action.output)
                    return
                case AwaitApprovals():
                    if not await self.await_approvals(action.requests):
                        return
                case CheckPolicies():
                    if not await self.check_policies(action.step):
                        return
                case _:
                    raise AssertionError(f"unknown task action {action!r}")

    async def check_output(self, action: CheckOutput) -> Finish | None:
        """Check the final answer against ``output:``: the ``Finish`` that ends the task, or
        ``None`` after recording a repair turn (``OutputRejected``). The answer is appended
        first, so a worker stopped here resumes by checking it, never by asking again."""
        assert self.spec.output is not None
        await self.flush()
        self.ports.crash_point("before_output_check")
        judged = judge_output(self.state, self.spec.output, action, self.lease.epoch)
        if isinstance(judged, Finish):
            return judged
        log.info("run %s task %s: the answer of step %d does not match %s (%s); repair turn "
                 "%d", self.run_id, self.task_id, action.step, self.spec.output.source,
                 judged.problem, judged.attempt)
        self.record(judged)
        return None

    async def add_source_tools(self) -> bool:
        """Add the tools the spec's tool sources (MCP servers) offer now (the spec is replaced
        only when they changed); ``False`` when they cannot be had: the task retries later with
        backoff, the error shown on the run."""
        if self.static_tools is None:
            self.static_tools = self.spec.tools
        try:
            found = await source_tools(self.spec.sources, source=f"agent {self.agent.name}:")
        except TorenError as exc:
            if self.state.started is None:
                await self.start()
            await self.schedule_retry(self.state.steps + 1, ToolSourceUnavailable(exc.message))
            return False
        tools = {**found, **self.static_tools}
        if tools.keys() != self.spec.tools.keys() or any(
                tool is not self.spec.tools[name] for name, tool in tools.items()):
            self.spec = replace(self.spec, tools=tools)
        return True

    async def version_still_current(self) -> bool:
        """``False`` (after handing the message back) when the run moved to another version
        of its agent: the next handler takes the step on that version's definition."""
        check = self.ports.version_current
        if check is None or await check(self.agent, self.run_id):
            return True
        payload = self.message.payload
        await self.flush(messages=[task_message(self.task_id, payload.get("subagent"),
                                                payload.get("input"))], done=True)
        return False

    async def note_prompt_change(self) -> None:
        """Record (once) that the task continues with another prompt than the state names:
        its run was moved to another version of the agent. The prompt is kept first, as
        ``start`` keeps it, so every prompt the log names can be read back."""
        started, version = self.state.started, self.agent.version
        digest = hashlib.sha256(self.spec.prompt.encode()).hexdigest()
        if started is None or version is None or digest == started.prompt_sha256:
            return
        await self.ports.prompts.save_prompt(self.agent.name, digest, self.spec.prompt)
        self.record(ev.TaskPromptChanged(prompt_sha256=digest, version=version.hash,
                                         human_version=version.human, epoch=self.lease.epoch))

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
            epoch=self.lease.epoch, session=self.state.session,
            output=payload.get("output"),
            attachments=msgspec.convert(payload.get("attachments") or (),
                                        tuple[Attachment, ...])))

    @property
    def model_id(self) -> str:
        """The model this task calls: its own, or the fallback that took over."""
        return self.state.model or self.spec.model

    def next_fallback(self) -> str | None:
        """The model of ``fallbacks:`` after the one in use, if any."""
        chain = tuple(dict.fromkeys((self.spec.model, *self.agent.fallbacks)))
        if self.model_id not in chain:
            return None
        index = chain.index(self.model_id) + 1
        return chain[index] if index < len(chain) else None

    async def call_model(self, action: CallModel) -> bool:
        """Make one model call (compacting first if the context is too large); ``False`` when
        the task must stop here (finished, or a retry scheduled)."""
        model = self.ports.model(self.model_id, self.agent.base_url)
        repeated = action.repeated
        system = system_prompt(self.spec.prompt, self.state.memory.pinned
                               if self.state.memory is not None else None)
        if not self.state.compacted_since_call and needs_compaction(
                self.agent.compaction, model.context_window, system, self.state.messages):
            if not await self.compact(action.step, model, "threshold", repeated):
                return False
            repeated = False
        while True:
            model = self.ports.model(self.model_id, self.agent.base_url)
            request = await self.attachments.shown(ModelRequest(
                model=self.model_id, system=system,
                messages=tuple(self.state.messages),
                tools=self.spec.tool_specs, prompt_caching=self.agent.prompt_caching,
                output_schema=self.spec.output.schema if self.spec.output is not None
                and not self.state.session else None), model, self.agent.attachments)
            hold = await self.rate.acquire(model, self.model_id, request, self.lease.epoch,
                                           self.priority)
            reservation = await self.reserve(action.step, None, model, request)
            if reservation is False:
                self.rate.not_made(hold)
                await self.rate.write()
                return False
            self.record(ev.ModelCallStarted(step=action.step, epoch=self.lease.epoch,
                                            **(hold.started_fields() if hold else {})))
            fork = self.state.fork
            if self.state.steps == (fork.at_step if fork is not None else 0):  # the first call
                self.pending_update = RunUpdate(status="running")
            await self.flush()
            try:
                result = await self.invoke(model, request, action.step, reservation,
                                           fallback=True, live=True, hold=hold)
            except ContextWindowExceeded as exc:
                self.settle(reservation, None)
                if self.fall_back(action.step, exc):
                    continue
                # compact and retry once; a second overflow right after compacting is final
                if self.state.compacted_since_call or boundary(
                        self.state.messages, self.agent.compaction.keep_recent_messages) is None:
                    await self.finish("error", None, {"code": exc.code, "message": exc.message})
                    return False
                if not await self.compact(action.step, model, "context_window_exceeded", False):
                    return False
                continue
            if result == FELL_BACK:
                continue
            if result is None:
                return False
            self.ports.crash_point("after_model_response")
            response, latency_ms = result
            self.record_response(action.step, response, latency_ms, repeated, model,
                                 reservation=reservation,
                                 image_tokens=image_tokens(request, model))
            return True

    async def reserve(self, step: int, purpose: Literal["compaction"] | None, model: Model,
                      request: ModelRequest) -> Reservation | Literal[False] | None:
        """Reserve the call's worst case in the budget ledger; ``False`` if the task stopped
        (the reservation did not fit), ``None`` when the agent has no budget."""
        reserved = await self.budget.reserve(
            step=step, purpose=purpose, model=model, model_id=self.model_id,
            pricing=self.pricing(model),
            request=request, epoch=self.lease.epoch)
        if reserved.refusal is not None:
            partial = self.state.last_assistant.text if self.state.last_assistant else None
            await self.finish("budget_exhausted", partial, reserved.refusal)
            return False
        for event in reserved.events:
            self.record(event)
        return reserved.reservation

    def settle(self, reservation: Reservation | None, cost_usd: float | None) -> None:
        """Record the end of a reserved call: its cost, or ``None`` (not billed)."""
        settled = self.budget.settlement(reservation, cost_usd, self.lease.epoch)
        if settled is not None:
            self.record(settled)

    def fall_back(self, step: int, exc: ProviderError) -> bool:
        """Hand the call to the next model of ``fallbacks:`` if the failure warrants it:
        a non-retryable error or an overloaded model at once, other retryable errors once
        their retries are exhausted. Records ``ModelFellBack`` (the fold switches models)."""
        target = self.next_fallback()
        if target is None:
            return False
        reason = exc.reason
        if exc.retryable and reason != "overloaded":
            attempt = (self.state.retry.attempt if self.state.retry is not None else 0) + 1
            if attempt <= self.settings.retry_max_attempts:
                return False
            reason = "retries_exhausted"
        log.warning("%s failed (%s); falling back to %s", self.model_id, reason, target)
        self.record(ev.ModelFellBack(
            step=step, from_model=self.model_id, to_model=target, reason=reason,
            error={"code": exc.code, "message": exc.message, "reason": exc.reason},
            epoch=self.lease.epoch))
        return True

    async def invoke(self, model: Model, request: ModelRequest, step: int,
                     reservation: Reservation | None = None, *, fallback: bool = False,
                     live: bool = False, hold: RateHold | None = None
                     ) -> tuple[ModelResponse, float] | Literal["fell_back"] | None:
        """Call the model; on failure fall back (``FELL_BACK``, with ``fallback``), or end the
        task or schedule a retry and return ``None``. With ``live``, its text goes to live
        watchers as it is generated (``Model.stream``).

        ``ContextWindowExceeded`` propagates: the caller decides whether to compact.
        ``hold`` (the call's rate-limit reservation) is settled with what the call used.
        """
        started = time.perf_counter()
        sent_at = time.monotonic()
        try:
            if live:
                response = await model.stream(request, self.text_sink(step))
            else:
                response = await model.complete(request)
        except ContextWindowExceeded:
            self.rate.unanswered(hold, reached=False, sent_at=sent_at)
            raise
        except ProviderError as exc:
            await self.rate.failed(hold, exc, sent_at)
            # answered with an error: not billed; no answer (timeout): it may have been
            self.settle(reservation, None if exc.status is not None else
                        reservation.amount_usd if reservation is not None else None)
            if fallback and self.fall_back(step, exc):
                return FELL_BACK
            if exc.retryable:
                await self.schedule_retry(step, exc)
            else:
                await self.finish("error", None, {"code": exc.code, "message": exc.message})
            return None
        except Exception as exc:  # a provider plugin bug must not loop through redeliveries
            self.rate.unanswered(hold, reached=True, sent_at=sent_at)
            log.exception("model %s raised", self.model_id)
            self.settle(reservation, reservation.amount_usd if reservation else None)
            await self.finish("error", None, {
                "code": "provider_error",
                "message": f"model {self.model_id} raised {type(exc).__name__}: {exc}"})
            return None
        self.rate.answered(hold, response.usage, sent_at)
        return response, round((time.perf_counter() - started) * 1000, 3)

    def text_sink(self, step: int) -> Callable[[str], None]:
        """What ``Model.stream`` tells the pieces of this step's text: numbered, to the host's
        live fan-out (``ExecutionPorts.text_delta``), never to the log."""
        index = 0
        deliver = self.ports.text_delta

        def publish(text: str) -> None:
            nonlocal index
            if not text:
                return
            if not text[TEXT_DELTA_MAX_CHARS:]:  # most pieces, a word or so: one delta
                deliver(TextDelta(self.run_id, self.task_id, step, index, text))
                index += 1
                return
            for start in range(0, len(text), TEXT_DELTA_MAX_CHARS):
                deliver(TextDelta(self.run_id, self.task_id, step, index,
                                  text[start:start + TEXT_DELTA_MAX_CHARS]))
                index += 1

        return publish

    async def compact(self, step: int, model: Model,
                      reason: Literal["threshold", "context_window_exceeded"],
                      repeated: bool) -> bool:
        """Summarise older turns with a recorded model call; ``False`` if the task stopped."""
        messages = self.state.messages
        cut = boundary(messages, self.agent.compaction.keep_recent_messages)
        if cut is None:
            return True
        request = await self.attachments.shown(summary_request(self.model_id, messages, cut),
                                               model, self.agent.attachments)
        hold = await self.rate.acquire(model, self.model_id, request, self.lease.epoch,
                                       self.priority)
        reservation = await self.reserve(step, "compaction", model, request)
        if reservation is False:
            self.rate.not_made(hold)
            await self.rate.write()
            return False
        self.record(ev.ModelCallStarted(step=step, epoch=self.lease.epoch, purpose="compaction",
                                        **(hold.started_fields() if hold else {})))
        await self.flush()
        before = estimate_tokens(self.spec.prompt, messages)
        try:
            result = await self.invoke(model, request, step, reservation, hold=hold)
        except ContextWindowExceeded as exc:
            self.settle(reservation, None)
            await self.finish("error", None, {
                "code": exc.code,
                "message": f"the conversation is too large even to summarise: {exc.message}"})
            return False
        if result is None or result == FELL_BACK:
            return False
        self.ports.crash_point("mid_compaction")
        response, latency_ms = result
        self.record_response(step, response, latency_ms, repeated, model, purpose="compaction",
                             reservation=reservation, image_tokens=image_tokens(request, model))
        self.record(ev.Compacted(
            step=step, summary=response.text, replaced=cut, reason=reason,
            tokens_before=before, epoch=self.lease.epoch,
            tokens_after=estimate_tokens(self.spec.prompt,
                                         compacted(messages, cut, response.text))))
        return True

    def pricing(self, model: Model) -> Pricing | None:
        """The price of the model in use: the agent's ``pricing:`` for it, else the
        provider's table."""
        return self.agent.pricing.get(self.model_id) or model.pricing

    def cost(self, response: ModelResponse, model: Model) -> float | None:
        """The call's cost: the agent's ``pricing:`` for the model, else the provider's table,
        else what the provider reported; ``None`` (unknown, warned about once) otherwise."""
        pricing = self.pricing(model)
        if pricing is not None:
            return pricing.cost(response.usage)
        if response.cost_usd is None and self.model_id not in _UNPRICED:
            _UNPRICED.add(self.model_id)
            log.warning("no price is known for %s: its calls are recorded with an unknown cost; "
                        "set pricing: in agent.yaml to record it", self.model_id)
        return response.cost_usd

    def record_response(self, step: int, response: ModelResponse, latency_ms: float,
                        repeated: bool, model: Model,
                        purpose: Literal["compaction"] | None = None,
                        reservation: Reservation | None = None, image_tokens: int = 0) -> None:
        """Record the model's answer (``image_tokens``: what the request's attachments took,
        by the model's formula, unless the provider counted them) and the tool calls and
        approvals it asks for."""
        had_error = self.state.retry is not None
        if self.call_ids is None:
            self.call_ids = {c.id for m in self.state.messages if m.role == "assistant"
                             for c in m.tool_calls}
        tool_calls = normalize_calls(response.tool_calls, self.call_ids, step)
        if purpose is None:
            self.call_ids.update(c.id for c in tool_calls)
        usage = response.usage
        cost_usd = self.cost(response, model)
        pricing = self.pricing(model) or response.pricing
        policed = purpose is None and self.policed
        self.record(ev.ModelCallCompleted(
            step=step, epoch=self.lease.epoch, policies=policed,
            model=response.model or self.model_id, text=clean_text(response.text),
            tool_calls=() if purpose is not None else tuple(
                ev.RecordedToolCall(id=c.id, name=c.name, arguments=c.arguments,
                                    arguments_error=c.arguments_error) for c in tool_calls),
            stop_reason=response.stop_reason,
            usage=ev.TokenUsage(input_tokens=usage.input_tokens,
                                output_tokens=usage.output_tokens,
                                cache_read_tokens=usage.cache_read_tokens,
                                cache_write_tokens=usage.cache_write_tokens),
            cost_usd=cost_usd, latency_ms=latency_ms, repeated=repeated,
            purpose=purpose,
            provider_data=response.provider_data if purpose is None else None,
            pricing=None if pricing is None or cost_usd is None else ev.CallPricing(
                input_per_mtok=pricing.input_per_mtok, output_per_mtok=pricing.output_per_mtok,
                cache_read_per_mtok=pricing.cache_read,
                cache_write_per_mtok=pricing.cache_write),
            image_tokens=images_of(usage, image_tokens)))
        # unknown cost with a reservation: charge the worst case reserved (budgets need prices)
        self.settle(reservation, cost_usd if cost_usd is not None
                    else reservation.amount_usd if reservation is not None else None)
        if had_error:
            self.pending_update = RunUpdate(error=None)  # recovered: the latest error clears
        if purpose is not None or policed:
            return  # policed: the policies decide its calls once it is in the log
        self.dispose_calls(step, tool_calls)

    def dispose_calls(self, step: int, tool_calls: Sequence[ToolCall],
                      decided: dict[str, PolicyOutcome] | None = None) -> None:
        """Record what becomes of each call of a response: an error for a call that names no
        tool or has bad arguments, else the policies' decision (``decided``, by call id) and
        then its refusal, its approval request, or its start."""
        for index, call in enumerate(tool_calls):
            problem = self.check_call(call)
            if problem is not None:
                kind, text = problem
                self.record(self.tool_error(step, call, kind, text))
                continue
            key = idempotency_key(self.run_id, self.task_id, step, index)
            policy = self.spec.approvals.get(call.name)
            outcome = (decided or {}).get(call.id)
            arguments = call.arguments
            if outcome is not None:
                self.record(self.policy_event(step, "before_tool_call", outcome, call.arguments,
                                              outcome.arguments, call=call))
                if outcome.action == "deny":
                    self.record(self.tool_error(step, call, "policy_denied", (
                        f"Error: this call was not run: policy {outcome.plugin} denied it: "
                        f"{outcome.reason}")))
                    continue
                arguments = dict(outcome.arguments or call.arguments)
                if outcome.action == "require_approval" and policy is None:
                    policy = ApprovalPolicy()
            if policy is not None:  # recorded instead of started: a person decides first
                reason = (f"policy {outcome.plugin}: {outcome.reason}" if outcome is not None
                          and outcome.action == "require_approval" else None)
                self.request_approval(step, replace(call, arguments=arguments), key, policy,
                                      reason)
                continue
            self.record(ev.ToolCallStarted(
                step=step, call_id=call.id, name=call.name, arguments=arguments,
                idempotency_key=key, epoch=self.lease.epoch))

    def request_approval(self, step: int, call: ToolCall, key: str, policy: ApprovalPolicy,
                         reason: str | None = None) -> ev.ApprovalRequested:
        """Record that ``call`` (model step ``step``, idempotency key ``key``) waits for a
        person under ``policy`` instead of starting; return the request recorded.

        Called by ``record_response`` for a tool that agent.yaml's ``approvals:`` names (or
        ``requires_approval=True``), and by anything else in the task loop that decides a call
        needs a person (a policy hook; ``reason`` says why, recorded with the request). The task
        parks at its next ``AwaitApprovals`` once the step's other calls ran."""
        request = ev.ApprovalRequested(
            step=step, approval_id=approval_id(key), call_id=call.id, name=call.name,
            arguments=call.arguments, idempotency_key=key, approvers=policy.approvers,
            expires_after_s=policy.expires_after_s, epoch=self.lease.epoch,
            digest=arguments_digest(call.arguments), reason=reason,
            on_expiry="escalate" if policy.on_expiry == "escalate" else "deny",
            escalate_to=policy.escalate_to, remind_after_s=policy.remind_after_s)
        self.record(request)
        return request

    # -- policies ------------------------------------------------------------------------------

    @property
    def policed(self) -> bool:
        """Whether the agent lists policy plugins (``policies:``) that this process can ask."""
        return bool(self.agent.policies) and self.ports.policies is not None

    def policy_event(self, step: int, hook: ev.PolicyHook, outcome: PolicyOutcome,
                     before: Any, after: Any, *, call: ToolCall | None = None,
                     text: str | None = None) -> ev.PolicyDecided:
        """The ``PolicyDecided`` recording ``outcome`` (digests of what the hooks saw and
        left, never the values themselves)."""
        return ev.PolicyDecided(
            step=step, hook=hook, decision=outcome.action,
            verdicts=tuple(ev.PolicyVerdict(plugin=v.plugin, decision=v.action,
                                            reason=v.reason, failed=v.failed)
                           for v in outcome.verdicts),
            digest_before=digest(before), digest_after=digest(after),
            plugin=outcome.plugin, reason=outcome.reason, epoch=self.lease.epoch,
            call_id=call.id if call is not None else None,
            name=call.name if call is not None else None, text=text)

    async def check_policies(self, step: int) -> bool:
        """Ask the agent's policies about the response of ``step`` (``after_model_response``)
        and each of its valid tool calls (``before_tool_call``), and record their decisions
        with the calls' fates in one append; ``False`` when a policy blocked the response
        (the task has ended). The response was appended first, so a worker stopped while the
        hooks ran resumes by asking them again, never by calling the model again; once the
        decisions are appended no hook is asked about this step again."""
        hooks, refs = self.ports.policies, self.agent.policies
        if hooks is None:  # ports made without plugins: every listed policy fails closed
            hooks, refs = PolicyHooks(_NoHooks()), refs
        await self.flush()  # nothing acts on a response that is not in the log
        message = self.state.last_assistant
        assert message is not None
        outcome = await hooks.ask_after_model_response(refs, ModelResponseView(
            self.agent.name, self.run_id, self.task_id, step, message.text,
            message.tool_calls))
        self.record(self.policy_event(step, "after_model_response", outcome, message.text,
                                      outcome.text,
                                      text=outcome.text if outcome.action == "redact" else None))
        if outcome.action == "block":
            await self.finish("error", None, {
                "code": "policy_blocked",
                "message": f"policy {outcome.plugin} blocked the model's response: "
                           f"{outcome.reason}"})
            return False
        decided: dict[str, PolicyOutcome] = {}
        for index, call in enumerate(message.tool_calls):
            if self.check_call(call) is not None:
                continue  # refused as it is: no policy is asked about an invalid call
            asked = await hooks.ask_before_tool_call(refs, ProposedToolCall(
                self.agent.name, self.run_id, self.task_id, step, call.id, call.name,
                dict(call.arguments), idempotency_key(self.run_id, self.task_id, step, index)))
            decided[call.id] = self.checked_rewrite(call, asked)
        self.dispose_calls(step, message.tool_calls, decided)
        await self.flush()
        self.ports.crash_point("after_policy_decided")
        return True

    def checked_rewrite(self, call: ToolCall, outcome: PolicyOutcome) -> PolicyOutcome:
        """``outcome``, or a denial naming the plugin when the arguments the policies left
        do not match the tool's schema (a policy must not make a call the model could not)."""
        if outcome.action == "deny" or outcome.arguments in (None, call.arguments):
            return outcome
        problem = self.check_call(replace(call, arguments=dict(outcome.arguments or {})))
        if problem is None:
            return outcome
        rewriter = next((v.plugin for v in outcome.verdicts if v.action == "rewrite"),
                        outcome.plugin)
        return replace(outcome, action="deny", plugin=rewriter, reason=(
            f"it rewrote the arguments into ones the tool refuses ({problem[1]})"))

    async def police_result(self, pending: PendingToolCall,
                            result: ev.ToolCallCompleted
                            ) -> tuple[ev.PolicyDecided | None, ev.ToolCallCompleted]:
        """A tool's result as the policies leave it (``after_tool_call``), with the
        ``PolicyDecided`` to append just before it (``None`` for an agent without policies),
        and the note of a rewritten call."""
        decided = None
        if self.policed:
            hooks = self.ports.policies
            assert hooks is not None  # policed says so
            call = pending.call
            outcome = await hooks.ask_after_tool_call(self.agent.policies, ToolCallResult(
                self.agent.name, self.run_id, self.task_id, pending.step, call.id, call.name,
                dict(call.arguments), result.output, result.is_error))
            decided = self.policy_event(pending.step, "after_tool_call", outcome,
                                        result.output, outcome.text, call=call)
            if outcome.action == "redact" and outcome.text is not None:
                result = msgspec.structs.replace(result, output=outcome.text)
        note = self.state.rewritten.get(result.call_id)
        if note is not None:
            arguments = json.dumps(pending.call.arguments, sort_keys=True, ensure_ascii=False)
            output = f"{note} It ran with: {arguments}\n\n{result.output}"
            result = msgspec.structs.replace(result, output=output)
        return decided, result

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
        if tool.plainly_valid(call.arguments):
            return None
        import jsonschema  # ~0.15 s to import: only validation needs it, not every toren command

        error = jsonschema.exceptions.best_match(tool.validator.iter_errors(call.arguments))
        if error is not None:
            where = ".".join(str(p) for p in error.absolute_path) or "arguments"
            return "invalid_arguments", (
                f"Error: invalid arguments for {call.name}: {where}: {error.message}. "
                f"Expected JSON Schema: {json.dumps(tool.parameters, sort_keys=True)}")
        return None

    async def run_tools(self, calls: Sequence[PendingToolCall]) -> bool:
        """Run the calls and record their results; ``False`` when the task parked to wait for
        peer runs (``toren.execution.children``) or an answer (``toren.execution.questions``)."""
        children = [c for c in calls if child_call(self.agent, c.call.name) is not None]
        questions = [c for c in calls if is_question(self.agent, c.call.name)]
        memory = [c for c in calls if is_memory_call(self.agent, c.call.name)]
        plain = [c for c in calls if child_call(self.agent, c.call.name) is None
                 and not is_question(self.agent, c.call.name)
                 and not is_memory_call(self.agent, c.call.name)]
        if memory:  # remember, recall, ...: written once per call (toren.execution.memory)
            await run_memory_calls(self, memory)
        payload = self.message.payload
        wake = task_message(self.task_id, payload.get("subagent"), payload.get("input"))
        # a call parked in wait_for_signal runs again only once its wait has ended
        runnable = [c for c in plain if c.call.id not in self.state.tool_waits]
        started: frozenset[str] = frozenset()
        if runnable:
            requests = await self.run_plain_tools(runnable)
            if requests:  # toren.wait_for_signal: see toren.execution.tool_waits
                await start_tool_waits(self, requests, wake)
                started = frozenset(pending.call.id for pending, _ in requests)
        if children and not await advance_child_calls(self, children):
            return False
        if questions and not await advance_questions(self, questions, wake):
            return False  # ask_user: parks until a person answers (toren.execution.questions)
        waiting = [c for c in plain if c.call.id in self.state.tool_waits]
        if waiting:
            return await advance_tool_waits(self, self.read_stream, waiting, wake,
                                            crash_point=self.ports.crash_point,
                                            just_started=started)
        return True

    async def read_stream(self, agent: str, run_id: str, stream: str) -> Sequence[ev.Event]:
        """One stream of a run, for tool waits (the run's signals)."""
        if self.ports.read_stream is None:
            raise TorenError("this host reads no run streams, so a tool cannot wait for a "
                             "signal here")
        return await self.ports.read_stream(agent, run_id, stream)

    async def notify_session(self, notices: Sequence[str]) -> None:
        """Hand committed background-run notices to the channels (best effort: the
        transcript already holds them)."""
        for text in notices:
            try:
                await self.ports.session_notice(self.agent.name, self.run_id, text)
            except Exception:
                log.exception("a channel failed to take the notice for session %s",
                              self.run_id)

    async def run_plain_tools(self, calls: Sequence[PendingToolCall]
                              ) -> list[tuple[PendingToolCall, ToolWaitRequested]]:
        """Run the calls at once and record their results; if the run is cancelled meanwhile,
        stop waiting (calls not started yet never start) and end the task's work at once.
        Returns the calls that asked to wait for a signal (``wait_for_signal``), which have
        no result yet.

        The calls are awaited through one future that their tasks' done callbacks settle, and
        the cancellation watcher (``watch_cancel``) is started by a timer only once the calls
        have run a third of the lease TTL: the usual tool step, far shorter, makes no task
        besides its calls' (a watcher task and a waiter task per step, and ``asyncio.wait``
        over them, were a measurable share of a tool step's CPU)."""
        loop = asyncio.get_running_loop()
        cancelled = asyncio.Event()
        settled: asyncio.Future[None] = loop.create_future()
        left = len(calls)

        def stop_waiting() -> None:
            if not settled.done():
                settled.set_result(None)

        def one_done(_run: asyncio.Task[ev.ToolCallCompleted | ToolWaitRequested]) -> None:
            nonlocal left
            left -= 1
            if left == 0:
                stop_waiting()

        runs: list[asyncio.Task[ev.ToolCallCompleted | ToolWaitRequested]] = [
            asyncio.create_task(self.run_tool(call, cancelled),
                                    name=f"toren-tool-{call.call.name}") for call in calls]
        for run in runs:
            run.add_done_callback(one_done)
        watcher: asyncio.Task[None] | None = None

        def start_watcher() -> None:
            nonlocal watcher
            watcher = asyncio.create_task(self.watch_cancel(cancelled, stop_waiting),
                                          name="toren-cancel-watch")

        timer = loop.call_later(self.settings.lease_ttl_s / 3, start_watcher)
        try:
            if runs:
                await settled
        finally:
            timer.cancel()
            for task in (watcher, *runs):
                if task is not None and not task.done():
                    task.cancel()
        if cancelled.is_set():
            await self.abandon(calls, runs)
            raise RunCancelled(f"run {self.run_id} was cancelled while its tools ran")
        self.ports.crash_point("after_tool")
        requests: list[tuple[PendingToolCall, ToolWaitRequested]] = []
        for pending, run in zip(calls, runs, strict=True):
            outcome = run.result()
            if isinstance(outcome, ToolWaitRequested):
                requests.append((pending, outcome))
                continue
            decided, result = await self.police_result(pending, outcome)
            if decided is not None:
                self.record(decided)
            self.record(result)
        return requests

    async def watch_cancel(self, cancelled: asyncio.Event,
                           stop_waiting: Callable[[], None]) -> None:
        """Set ``cancelled`` (and call ``stop_waiting``) when the run is cancelled: looked up
        now and then every third of the lease TTL, as often as leases are renewed (started
        when the tools have run a third of it)."""
        while True:
            if await self.run_cancelled():  # the database blinked: the next look may see it
                cancelled.set()
                stop_waiting()
                return
            await asyncio.sleep(self.settings.lease_ttl_s / 3)

    async def abandon(self, calls: Sequence[PendingToolCall],
                      runs: Sequence[asyncio.Task[ev.ToolCallCompleted | ToolWaitRequested]]
                      ) -> None:
        """Record, for the cancelled run's audit trail, the results of calls that finished and
        that Toren stopped waiting for (the run refuses leased appends once cancelled)."""
        results: list[ev.PolicyDecided | ev.ToolCallCompleted] = []
        for pending, run in zip(calls, runs, strict=True):
            outcome = (run.result() if run.done() and not run.cancelled()
                       and run.exception() is None else None)
            if isinstance(outcome, ev.ToolCallCompleted):
                # what the policies would not let the log hold stays out of it here too
                decided, result = await self.police_result(pending, outcome)
                results += [decided, result] if decided is not None else [result]
                continue
            text = ("Error: the run was cancelled while this tool call waited or ran; Toren "
                    "stopped waiting for it. A call that had started may still take effect.")
            results.append(self.tool_error(pending.step, pending.call, "abandoned", text))
        await self.store.append_unleased(
            self.agent.name, self.run_id, self.lease.stream,
            [NewEvent.of(result) for result in results], only_if_active=False)

    async def run_tool(self, pending: PendingToolCall, cancelled: asyncio.Event | None = None
                       ) -> ev.ToolCallCompleted | ToolWaitRequested:
        """Run one call: its result, or the wait it asked for (``wait_for_signal``)."""
        call = pending.call
        tool = self.spec.tools.get(call.name)
        # a call whose wait ended runs again by design (docs/guides/signals.md), on any lease
        waited = tuple(self.state.tool_wait_ends.get(call.id, ()))
        if pending.epoch != self.lease.epoch and not waited and (
                tool is None or not tool.idempotent):
            return self.tool_error(pending.step, call, "interrupted", (
                "Error: this tool call was interrupted: the worker running it stopped before "
                "its result was recorded. It was not run again because the tool is not "
                "marked idempotent, so it may or may not have taken effect."))
        if tool is None:  # the tool was removed from the agent after the call was recorded
            return self.tool_error(pending.step, call, "unknown_tool",
                                   f"Error: there is no tool named {call.name!r} any more.")
        context = ToolCallContext(self.agent.name, self.run_id, self.task_id, pending.step,
                                  call.id, pending.idempotency_key, epoch=self.lease.epoch,
                                  state=self.ports.tool_state,
                                  agent_config=self.agent.tool_config,
                                  max_output_bytes=self.spec.limits.max_tool_output_bytes,
                                  env_names=tool.env_names,
                                  read_file=self.ports.files.read_file
                                  if self.ports.files is not None else None,
                                  signal_waits=waited)
        started = time.perf_counter()
        timeout_s = self.spec.limits.tool_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                output, is_error, files = await invoke_tool(
                    tool, call.arguments, context, self.ports.tool_threads,
                    wanted=lambda: cancelled is None or not cancelled.is_set())
        except ToolWaitRequested as request:
            if self.ports.read_stream is None:
                return self.tool_error(pending.step, call, "refused", (
                    f"Error: {call.name} waited for a signal, and this host keeps no signals "
                    "a tool could wait for."))
            # the wait began now: a signal sent while other calls of the step still run is
            # one it waits for
            request.after = await last_signal(self.read_stream, self.agent.name, self.run_id)
            return request
        except TimeoutError:
            return self.tool_error(pending.step, call, "timeout", (
                f"Error: {call.name} did not finish within {timeout_s:g} s "
                "(limits.toolTimeoutSeconds); Toren stopped waiting for it. It may still take "
                "effect."))
        duration_ms = round((time.perf_counter() - started) * 1000, 3)
        attachments, note = await store_tool_files(
            self.ports.files, files, agent=self.agent.name, run_id=self.run_id, tool=call.name,
            max_bytes=self.settings.max_file_bytes,
            max_stored_bytes=self.settings.max_total_file_bytes)
        text, truncated, size = truncate_output(clean_text(output),
                                                self.spec.limits.max_tool_output_bytes)
        return ev.ToolCallCompleted(
            step=pending.step, call_id=call.id, name=call.name,
            output=self.state.approval_notes.get(call.id, "") + text + note,
            is_error=is_error, error_kind="exception" if is_error else None,
            truncated=truncated, original_bytes=size, duration_ms=duration_ms,
            epoch=self.lease.epoch, attachments=attachments)

    async def await_approvals(self, requests: Sequence[ev.ApprovalRequested]) -> bool:
        """Take in the decisions made on ``requests`` (``True``: go on), or park the task as
        ``awaiting_approval`` and free it (``False``): no lease, no message, no connection is
        held while a person decides. A decision queues the task's message again; so does the
        earliest expiry or reminder, which this then handles (escalate or expire; remind)."""
        await self.flush()  # the requests are in the log before their approvals exist
        payload = self.message.payload
        wake = task_message(self.task_id, payload.get("subagent"), payload.get("input"))
        approvals = self.ports.approvals
        parameters = {r.name: self.spec.tools[r.name].parameters for r in requests
                      if r.name in self.spec.tools}
        records = await approvals.open_approvals(self.agent.name, self.run_id, self.task_id,
                                                 requests, wake, parameters=parameters)
        for index, record in enumerate(records):
            if record.pending and record.extra.get("due"):  # nobody decided before its expiry
                if record.escalates:
                    moved = await approvals.escalate_approval(record.id)
                    if moved is not None:
                        records[index] = moved
                    continue
                decided = await approvals.decide_approval(
                    record.id, "expired", EXPIRED_BY, "nobody decided before its expiry")
                if decided is not None:
                    records[index] = decided[0]
        by_id = {record.id: record for record in records}
        decided_now = [(request, by_id[request.approval_id]) for request in requests
                       if request.approval_id in by_id and not by_id[request.approval_id].pending]
        if decided_now:
            self.ports.crash_point("after_approval")
            for request, record in decided_now:
                self.record_decision(request, record)
            self.pending_update = RunUpdate(status="running")
            return True
        notices = self.record_escalations(requests, by_id)
        for record in records:
            if record.extra.get("remind_due") and await approvals.mark_reminded(record.id):
                notices.append(reminder_text(record.tool, record.id, record.approvers))
        wakes = [r.expires_at for r in records if r.expires_at is not None]
        wakes += [r.remind_at for r in records if r.remind_at is not None
                  and (r.reminded_at is None or r.reminded_at < r.remind_at)
                  and not r.extra.get("remind_due")]
        messages = []
        if wakes:  # a nudge at the earliest expiry or reminder, which then handles it
            delay = (min(wakes) - self.ports.clock()).total_seconds()
            messages.append(task_message(self.task_id, payload.get("subagent"),
                                         payload.get("input"), delay_s=max(delay, 0.0) + 0.05))
        await self.flush(messages=messages, run_update=RunUpdate(status="awaiting_approval"),
                         done=True)
        await self.notify_session(notices)
        return False

    def record_escalations(self, requests: Sequence[ev.ApprovalRequested],
                           by_id: dict[str, ApprovalRecord]) -> list[str]:
        """Record ``ApprovalEscalated`` for each approval the store moved to its second
        approvers that the log does not show yet (also after a crash between the two); return
        the notices for the session's channel."""
        notices = []
        for request in requests:
            record = by_id.get(request.approval_id)
            if (record is None or record.escalation_level == 0
                    or record.id in self.state.escalated_approvals):
                continue
            self.record(ev.ApprovalEscalated(
                approval_id=record.id, call_id=request.call_id, approvers=record.approvers,
                expires_at=record.expires_at.isoformat() if record.expires_at else None,
                epoch=self.lease.epoch))
            notices.append(reminder_text(record.tool, record.id, record.approvers,
                                         escalated=True))
        return notices

    def record_decision(self, request: ev.ApprovalRequested, record: ApprovalRecord) -> None:
        """Copy a decision into the log and act on it: an approved call starts, an edited one
        starts with its new arguments, an answered one gets the person's answer as its result
        (the tool never runs), any other gets an error result saying why it did not run."""
        outcome = (record.status if record.status in ("approved", "denied", "edited", "answered")
                   else "expired")
        decided_at = (record.decided_at or self.ports.clock()).isoformat()
        edited = record.edited_arguments if outcome == "edited" else None
        self.record(ev.ApprovalDecided(
            approval_id=request.approval_id, call_id=request.call_id,
            outcome=outcome,  # type: ignore[arg-type]
            decided_by=record.decided_by or "toren", decided_at=decided_at,
            reason=record.reason, epoch=self.lease.epoch, digest=record.digest,
            scope="run" if record.scope == "run" else "call", arguments=edited,
            edited_digest=arguments_digest(edited) if edited is not None else None,
            answer=record.answer if outcome == "answered" else None,
            granted_by=record.granted_by))
        call = ToolCall(id=request.call_id, name=request.name,
                        arguments=edited if edited is not None else request.arguments)
        if outcome in ("approved", "edited"):
            problem = self.check_call(call) if edited is not None else None
            if problem is not None:  # the tool's schema changed since the edit was checked
                self.record(self.tool_error(request.step, call, *problem))
                return
            self.record(ev.ToolCallStarted(
                step=request.step, call_id=request.call_id, name=request.name,
                arguments=call.arguments, idempotency_key=request.idempotency_key,
                epoch=self.lease.epoch))
            return
        if outcome == "answered":
            text, truncated, size = truncate_output(clean_text(record.answer or ""),
                                                    self.spec.limits.max_tool_output_bytes)
            self.record(ev.ToolCallCompleted(
                step=request.step, call_id=request.call_id, name=request.name, output=text,
                is_error=False, error_kind=None, truncated=truncated, original_bytes=size,
                duration_ms=0.0, epoch=self.lease.epoch))
            return
        kind: ev.ToolErrorKind = "approval_denied" if outcome == "denied" else "approval_expired"
        text = decision_text(request.name, record.status, record.decided_by or "toren",
                             record.reason)
        self.record(self.tool_error(request.step, call, kind, text))

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
        next_at = (self.ports.clock() + timedelta(seconds=delay)).isoformat()
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
        told = await tell_background_outcomes(self)  # those that ended during the turn
        await self.flush(run_update=RunUpdate(status="awaiting_input", output=output, error=None),
                         done=True)
        await self.notify_session(told)

    async def finish(self, stop_reason: ev.StopReason, output: Any,
                     error: dict[str, Any] | None) -> None:
        self.record(ev.TaskFinished(
            task_id=self.task_id, status=ev.status_for(stop_reason), stop_reason=stop_reason,
            output=output, error=error, steps=self.state.steps,
            cost_usd=round(self.state.cost_usd, 10), epoch=self.lease.epoch))
        await self.flush(messages=[run_tick(f"task {self.task_id} finished")], done=True)


class _NoHooks:
    """pluggy's hook relay with no implementations (a process that loaded no plugins)."""

    class _Caller:
        def get_hookimpls(self) -> list[Any]:
            return []

    def __getattr__(self, name: str) -> Any:
        return self._Caller()


def images_of(usage: Usage, estimated: int) -> int:
    """A call's image tokens: the provider's count, else the estimate, never more than the
    input tokens the provider reported (when it reported any)."""
    counted = usage.image_tokens or estimated
    return min(counted, usage.input_tokens) if usage.input_tokens else counted


async def invoke_tool(tool: Tool, arguments: dict[str, Any], context: ToolCallContext,
                      threads: ToolThreads, *,
                      wanted: Callable[[], bool] = lambda: True
                      ) -> tuple[str, bool, tuple[ToolFile, ...]]:
    """Run a tool (sync tools in one of the worker's tool threads): its text, whether it
    failed, and the files it returned (``ToolResult``); exceptions become error text for the
    model. ``ToolNotStarted`` when a sync call is no longer ``wanted`` once a thread is
    free."""
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
        return f"Error: {type(exc).__name__}: {exc}", True, ()
    finally:
        _current.reset(token)
    if isinstance(result, ToolResult):
        return str(result.text), bool(result.is_error), tuple(result.files)
    if isinstance(result, str):
        return result, False, ()
    return json.dumps(result, default=str, ensure_ascii=False), False, ()


async def work_task(ports: ExecutionPorts, agent: AgentSpec, message: QueueMessage) -> None:
    """Handle a ``task`` message: take the task's lease, fold its log, continue it."""
    assert message.run_id is not None
    found = await ports.acquire(message, ev.task_stream(message.payload["task_id"]), False)
    if found is None:
        return
    lease, events = found
    if ports.version_under_lease is not None and not ports.version_under_lease(agent, lease):
        raise RunVersionStale(f"run {message.run_id} is not on the version of {agent.name} "
                              "this task was handed")
    state = fold_task(decode_events(events))
    await TaskRunner(ports, agent, message, lease, state).run()
