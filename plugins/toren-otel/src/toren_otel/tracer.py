"""``OtelTracer``: Toren's tracer seam (``toren.seams.telemetry.Tracer``) on the OpenTelemetry
SDK, exporting over OTLP/HTTP as the standard ``OTEL_*`` variables say.

Spans: ``toren.run`` (the root, one per run), ``toren.task``/``toren.run_tick`` (one per
queue message a worker works), ``chat <model>`` (each model call, GenAI semantic
conventions), ``execute_tool <name>`` (each tool call), ``toren.queue_wait`` and
``toren.lease_takeover``. The trace id is the run id and the root's span id is derived from
it, so every process that works a run joins the same trace with no context in the queue.

Every span Toren makes is known whole when it is made (model and tool calls come from
committed events with their latency; a message's span ends with its block), so spans are built
as finished ``ReadableSpan`` objects and handed to the span processor directly, not through
the SDK's live ``Span`` (its per-attribute validation, locks and per-span sampling were most
of the tracer's cost: bench/tracing_overhead.py). The sampler (``OTEL_TRACES_SAMPLER``) decides
once per message; the spans made inside a message follow that decision, and a sampled-out
message builds no attributes at all.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import random
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

import toren
from toren.plugin import Settings
from toren.plugin.drivers import NewEvent, QueueMessage, Tracer, trace_ids, traceparent_ids

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.0,<2"

log = logging.getLogger(__name__)

_MODEL_CALL_COMPLETED = "ModelCallCompleted"
_TOOL_CALL_COMPLETED = "ToolCallCompleted"
_RETRY_SCHEDULED = "RetryScheduled"
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status(StatusCode.UNSET)


@dataclass
class _Open:
    """The span of the queue message in hand (``OtelTracer.handling``): what the spans made
    inside it parent to, and the events added to it before it ends."""

    context: SpanContext
    #: The run's root span (the message span's parent).
    root: SpanContext
    sampled: bool
    events: list[Event] = field(default_factory=list)


#: The message span of this coroutine (and the tasks it starts), if any.
_CURRENT: contextvars.ContextVar[_Open | None] = contextvars.ContextVar(
    "toren_otel_current", default=None)


def _run_root(run_id: str) -> SpanContext:
    """The context of the run's root span (remote: another process may end it)."""
    trace_id, span_id = trace_ids(run_id)
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=_SAMPLED)


def _ns(seconds_ago: float) -> int:
    return time.time_ns() - int(seconds_ago * 1e9)


def _span_id() -> int:
    return random.getrandbits(64) or 1


class OtelTracer(Tracer):
    """The ``otel`` tracer driver (``TOREN_TRACER=otel``, chosen by default when
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set).

    Spans go through a ``BatchSpanProcessor`` to the OTLP/HTTP exporter (the SDK's, with
    Toren's own encoding of a batch: ``toren_otel.exporter``; configured by the
    standard variables: endpoint, headers, timeout; ``OTEL_SERVICE_NAME`` names the service,
    ``toren`` by default; ``OTEL_TRACES_SAMPLER`` samples). The provider is Toren's own: a
    program embedding Toren keeps its global one. Attribute values are Toren's own short
    strings and numbers: the SDK's attribute limits (``OTEL_ATTRIBUTE_*``) are not applied.

    Args:
        settings: Toren's settings (unused today; drivers take them).
        processor: where finished spans go instead of the OTLP exporter (tests pass a
            ``SimpleSpanProcessor`` over an ``InMemorySpanExporter``). It is given finished
            spans (``on_end``) only.
    """

    enabled = True

    def __init__(self, settings: Settings, processor: SpanProcessor | None = None,
                 exporter: SpanExporter | None = None) -> None:
        resource = Resource.create({
            "service.name": os.environ.get("OTEL_SERVICE_NAME") or "toren",
            "service.version": toren.__version__})
        self.provider = TracerProvider(resource=resource)
        if processor is None:
            if exporter is None:
                from toren_otel.exporter import TorenSpanExporter

                exporter = TorenSpanExporter()
            processor = BatchSpanProcessor(exporter)
        self.provider.add_span_processor(processor)  # the provider's shutdown flushes it
        self.processor = processor
        self.resource = self.provider.resource
        self.scope = InstrumentationScope("toren", toren.__version__)
        self._shut_down = False

    # -- the spans ------------------------------------------------------------------------------

    def _emit(self, name: str, context: SpanContext, parent: SpanContext | None,
              attributes: dict[str, Any], start: int, end: int, *,
              kind: SpanKind = SpanKind.INTERNAL, status: Status = _UNSET,
              events: Sequence[Event] = ()) -> None:
        """Hand one finished span to the processor."""
        self.processor.on_end(ReadableSpan(
            name, context=context, parent=parent, resource=self.resource,
            attributes=attributes, events=tuple(events), kind=kind, status=status,
            start_time=start, end_time=end, instrumentation_scope=self.scope))

    def _sampled(self, parent: SpanContext | None, trace_id: int, name: str, kind: SpanKind,
                 attributes: dict[str, Any]) -> bool:
        """The configured sampler's decision for a span of ``trace_id`` under ``parent``."""
        context = (trace.set_span_in_context(NonRecordingSpan(parent))
                   if parent is not None else None)
        result = self.provider.sampler.should_sample(context, trace_id, name, kind,
                                                     attributes)
        return result.decision is Decision.RECORD_AND_SAMPLE

    def _child(self, run_id: str) -> SpanContext | None:
        """The parent of a span made now for ``run_id``: the message in hand, or the run's
        root outside one; ``None`` when the message in hand was sampled out."""
        current = _CURRENT.get()
        if current is None:
            return _run_root(run_id)
        return current.context if current.sampled else None

    # -- the seam -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def handling(self, message: QueueMessage, worker_id: str) -> Iterator[None]:
        if message.run_id is None:
            yield
            return
        root = _run_root(message.run_id)
        task_id = message.payload.get("task_id") if message.kind == "task" else None
        name = f"toren.task {task_id}" if task_id is not None else "toren.run_tick"
        attributes: dict[str, Any] = {
            "toren.run_id": message.run_id, "toren.agent": message.agent,
            "toren.worker_id": worker_id, "toren.message.kind": message.kind,
            "toren.message.attempts": message.attempts}
        if task_id is not None:
            attributes["toren.task_id"] = str(task_id)
        # the run's own trace: decided as a root, by trace id, so with a ratio sampler every
        # message of a run gets the same decision (joined() decides again for a caller's trace)
        sampled = self._sampled(None, root.trace_id, name, SpanKind.CONSUMER, attributes)
        context = SpanContext(root.trace_id, _span_id(), is_remote=False,
                              trace_flags=_SAMPLED if sampled else TraceFlags(0))
        current = _Open(context, root, sampled)
        token = _CURRENT.set(current)
        # code run inside (a tool's instrumented HTTP client) sees the message's span
        otel_token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(context)))
        start = time.time_ns()
        status = _UNSET
        try:
            yield
        except BaseException as exc:
            status = Status(StatusCode.ERROR, type(exc).__name__)
            if current.sampled:
                current.events.append(Event("exception", {
                    "exception.type": type(exc).__qualname__,
                    "exception.message": str(exc),
                    "exception.stacktrace": "".join(traceback.format_exception(exc)),
                    "exception.escaped": "False"}))
            raise
        finally:
            otel_context.detach(otel_token)
            _CURRENT.reset(token)
            if current.sampled:  # the ids and decision as joined() left them
                if message.waited_s is not None:
                    waited = max(message.waited_s, 0.0)
                    self._emit("toren.queue_wait",
                               SpanContext(current.root.trace_id, _span_id(), False, _SAMPLED),
                               current.root, attributes | {"toren.queue.wait_s": waited},
                               start - int(waited * 1e9), start)
                self._emit(name, current.context, current.root, attributes, start,
                           time.time_ns(), kind=SpanKind.CONSUMER, status=status,
                           events=current.events)

    def joined(self, run_id: str, traceparent: str) -> None:
        current = _CURRENT.get()
        if current is None:
            return
        trace_id, caller_span, caller_sampled = traceparent_ids(traceparent)
        caller = SpanContext(trace_id, caller_span, is_remote=True,
                             trace_flags=TraceFlags(int(caller_sampled)))
        # nothing of this message is emitted yet: decide again, under the caller's span
        current.sampled = self._sampled(caller, trace_id, "toren.task", SpanKind.CONSUMER, {})
        if not current.sampled:
            return
        current.root = SpanContext(trace_id, trace_ids(run_id)[1], is_remote=True,
                                   trace_flags=_SAMPLED)
        current.context = SpanContext(trace_id, current.context.span_id, is_remote=False,
                                      trace_flags=_SAMPLED)
        # leaves with handling()'s context (its detach restores what was there before)
        otel_context.attach(trace.set_span_in_context(NonRecordingSpan(current.context)))

    def appended(self, agent: str, run_id: str, stream: str, events: Sequence[NewEvent],
                 seconds: float) -> None:
        parent = self._child(run_id)
        if parent is None:  # sampled out: nothing built
            return
        for event in events:
            if event.type == _MODEL_CALL_COMPLETED:
                self._model_call(parent, agent, run_id, stream, event.data)
            elif event.type == _TOOL_CALL_COMPLETED:
                self._tool_call(parent, agent, run_id, stream, event.data)
            elif event.type == _RETRY_SCHEDULED:
                current = _CURRENT.get()
                if current is not None:
                    current.events.append(Event("toren.retry_scheduled", {
                        "toren.attempt": int(event.data.get("attempt", 0)),
                        "toren.delay_s": float(event.data.get("delay_s", 0.0)),
                        "error.type": str((event.data.get("error") or {}).get("code", ""))}))

    def _model_call(self, parent: SpanContext, agent: str, run_id: str, stream: str,
                    data: dict[str, Any]) -> None:
        model = str(data.get("model") or "unknown")
        usage = data.get("usage") or {}
        latency_s = float(data.get("latency_ms") or 0.0) / 1000
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": model.partition("/")[0] if "/" in model else "unknown",
            "gen_ai.request.model": model, "gen_ai.response.model": model,
            "gen_ai.usage.input_tokens": int(usage.get("input_tokens") or 0),
            "gen_ai.usage.output_tokens": int(usage.get("output_tokens") or 0),
            "toren.run_id": run_id, "toren.agent": agent,
            "toren.task_id": stream.removeprefix("task:"),
            "toren.step": int(data.get("step") or 0),
            "toren.repeated": bool(data.get("repeated", False))}
        if data.get("stop_reason"):
            attributes["gen_ai.response.finish_reasons"] = (str(data["stop_reason"]),)
        if data.get("cost_usd") is not None:
            attributes["toren.cost_usd"] = float(data["cost_usd"])
        if data.get("purpose"):
            attributes["toren.purpose"] = str(data["purpose"])
        end = time.time_ns()
        self._emit(f"chat {model}", SpanContext(parent.trace_id, _span_id(), False, _SAMPLED),
                   parent, attributes, end - int(latency_s * 1e9), end, kind=SpanKind.CLIENT)

    def _tool_call(self, parent: SpanContext, agent: str, run_id: str, stream: str,
                   data: dict[str, Any]) -> None:
        name = str(data.get("name"))
        duration_s = float(data.get("duration_ms") or 0.0) / 1000
        status = (Status(StatusCode.ERROR, str(data.get("error_kind") or "error"))
                  if data.get("is_error") else _UNSET)
        end = time.time_ns()
        self._emit(f"execute_tool {name}",
                   SpanContext(parent.trace_id, _span_id(), False, _SAMPLED), parent, {
                       "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                       "gen_ai.tool.call.id": str(data.get("call_id")),
                       "toren.run_id": run_id, "toren.agent": agent,
                       "toren.task_id": stream.removeprefix("task:"),
                       "toren.step": int(data.get("step") or 0)},
                   end - int(duration_s * 1e9), end, status=status)

    def took_over(self, agent: str, run_id: str, stream: str, epoch: int,
                  worker_id: str) -> None:
        parent = self._child(run_id)
        if parent is None:
            return
        attributes: dict[str, Any] = {
            "toren.run_id": run_id, "toren.agent": agent, "toren.stream": stream,
            "toren.lease.epoch": epoch, "toren.worker_id": worker_id}
        current = _CURRENT.get()
        if current is not None:
            current.events.append(Event("toren.lease_takeover", attributes))
        now = time.time_ns()
        self._emit("toren.lease_takeover",
                   SpanContext(parent.trace_id, _span_id(), False, _SAMPLED), parent,
                   attributes, now, now)

    def traceparent(self) -> str | None:
        current = _CURRENT.get()
        if current is None:
            return None
        # sampled out: the child (under a parent-based sampler) is sampled out too
        flags = "01" if current.sampled else "00"
        return f"00-{current.context.trace_id:032x}-{current.context.span_id:016x}-{flags}"

    def run_finished(self, agent: str, run_id: str, status: str,
                     created_at: datetime | None, traceparent: str | None = None) -> None:
        trace_id, span_id = trace_ids(run_id)
        parent = None
        if traceparent is not None:  # the caller's span, in the caller's trace
            trace_id, caller_span, caller_sampled = traceparent_ids(traceparent)
            parent = SpanContext(trace_id, caller_span, is_remote=True,
                                 trace_flags=TraceFlags(int(caller_sampled)))
        name = f"toren.run {agent}"
        attributes = {"toren.run_id": run_id, "toren.agent": agent, "toren.status": status}
        if not self._sampled(parent, trace_id, name, SpanKind.INTERNAL, attributes):
            return
        end = time.time_ns()
        start = int(created_at.timestamp() * 1e9) if created_at is not None else end
        # the run's root: its span id comes from the run id
        self._emit(name, SpanContext(trace_id, span_id, False, _SAMPLED), parent, attributes,
                   start, end,
                   status=Status(StatusCode.ERROR, "run failed") if status == "failed"
                   else _UNSET)

    def shutdown(self) -> None:
        if not self._shut_down:  # Runtime.stop may be called twice
            self._shut_down = True
            self.provider.shutdown()
