"""``OtelTracer``: Toren's tracer seam (``toren.seams.telemetry.Tracer``) on the OpenTelemetry
SDK, exporting over OTLP/HTTP as the standard ``OTEL_*`` variables say.

Spans: ``toren.run`` (the root, one per run), ``toren.task``/``toren.run_tick`` (one per
queue message a worker works), ``chat <model>`` (each model call, GenAI semantic
conventions), ``execute_tool <name>`` (each tool call), ``toren.queue_wait`` and
``toren.lease_takeover``. The trace id is the run id and the root's span id is derived from
it, so every process that works a run joins the same trace with no context in the queue.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

import toren
from toren.config import Settings
from toren.core.events import NewEvent
from toren.seams.shapes import QueueMessage
from toren.seams.telemetry import Tracer, trace_ids

log = logging.getLogger(__name__)

_MODEL_CALL_COMPLETED = "ModelCallCompleted"
_TOOL_CALL_COMPLETED = "ToolCallCompleted"
_RETRY_SCHEDULED = "RetryScheduled"
#: The ids the next span must take (a run's root span); random otherwise.
_FORCED_IDS: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "toren_otel_forced_ids", default=None)


class _RunIds(IdGenerator):
    """Random ids, except for a run's root span, whose ids come from the run id."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        forced = _FORCED_IDS.get()
        return forced[1] if forced is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        forced = _FORCED_IDS.get()
        return forced[0] if forced is not None else self._random.generate_trace_id()


def _run_parent(run_id: str) -> otel_context.Context:
    """A context whose current span is the run's root (remote: another process may end it)."""
    trace_id, span_id = trace_ids(run_id)
    root = SpanContext(trace_id, span_id, is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(root))


def _ns(seconds_ago: float) -> int:
    return time.time_ns() - int(seconds_ago * 1e9)


class OtelTracer(Tracer):
    """The ``otel`` tracer driver (``TOREN_TRACER=otel``, chosen by default when
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set).

    Spans go through a ``BatchSpanProcessor`` to the OTLP/HTTP exporter (configured by the
    standard variables: endpoint, headers, timeout; ``OTEL_SERVICE_NAME`` names the service,
    ``toren`` by default). The provider is Toren's own: a program embedding Toren keeps its
    global one.

    Args:
        settings: Toren's settings (unused today; drivers take them).
        processor: where finished spans go instead of the OTLP exporter (tests pass a
            ``SimpleSpanProcessor`` over an ``InMemorySpanExporter``).
    """

    enabled = True

    def __init__(self, settings: Settings, processor: SpanProcessor | None = None,
                 exporter: SpanExporter | None = None) -> None:
        resource = Resource.create({
            "service.name": os.environ.get("OTEL_SERVICE_NAME") or "toren",
            "service.version": toren.__version__})
        self.provider = TracerProvider(resource=resource, id_generator=_RunIds())
        if processor is None:
            if exporter is None:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )

                exporter = OTLPSpanExporter()
            processor = BatchSpanProcessor(exporter)
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("toren", toren.__version__)
        self._shut_down = False

    @contextlib.contextmanager
    def handling(self, message: QueueMessage, worker_id: str) -> Iterator[None]:
        if message.run_id is None:
            yield
            return
        parent = _run_parent(message.run_id)
        attributes: dict[str, Any] = {
            "toren.run_id": message.run_id, "toren.agent": message.agent,
            "toren.worker_id": worker_id, "toren.message.kind": message.kind,
            "toren.message.attempts": message.attempts}
        task_id = message.payload.get("task_id") if message.kind == "task" else None
        if task_id is not None:
            attributes["toren.task_id"] = str(task_id)
        if message.waited_s is not None:
            waited = max(message.waited_s, 0.0)
            self.tracer.start_span(
                "toren.queue_wait", context=parent, start_time=_ns(waited),
                attributes=attributes | {"toren.queue.wait_s": waited}).end()
        name = f"toren.task {task_id}" if task_id is not None else "toren.run_tick"
        span = self.tracer.start_span(name, context=parent, kind=SpanKind.CONSUMER,
                                      attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            yield
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            otel_context.detach(token)
            span.end()

    def appended(self, agent: str, run_id: str, stream: str, events: Sequence[NewEvent],
                 seconds: float) -> None:
        for event in events:
            if event.type == _MODEL_CALL_COMPLETED:
                self._model_call(agent, run_id, stream, event.data)
            elif event.type == _TOOL_CALL_COMPLETED:
                self._tool_call(agent, run_id, stream, event.data)
            elif event.type == _RETRY_SCHEDULED:
                span = trace.get_current_span()
                span.add_event("toren.retry_scheduled", {
                    "toren.attempt": int(event.data.get("attempt", 0)),
                    "toren.delay_s": float(event.data.get("delay_s", 0.0)),
                    "error.type": str((event.data.get("error") or {}).get("code", ""))})

    def _model_call(self, agent: str, run_id: str, stream: str, data: dict[str, Any]) -> None:
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
        self.tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT,
                               start_time=_ns(latency_s), attributes=attributes).end()

    def _tool_call(self, agent: str, run_id: str, stream: str, data: dict[str, Any]) -> None:
        name = str(data.get("name"))
        duration_s = float(data.get("duration_ms") or 0.0) / 1000
        span = self.tracer.start_span(f"execute_tool {name}", kind=SpanKind.INTERNAL,
                                      start_time=_ns(duration_s), attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": str(data.get("call_id")),
            "toren.run_id": run_id, "toren.agent": agent,
            "toren.task_id": stream.removeprefix("task:"),
            "toren.step": int(data.get("step") or 0)})
        if data.get("is_error"):
            span.set_status(Status(StatusCode.ERROR, str(data.get("error_kind") or "error")))
        span.end()

    def took_over(self, agent: str, run_id: str, stream: str, epoch: int,
                  worker_id: str) -> None:
        attributes: dict[str, Any] = {
            "toren.run_id": run_id, "toren.agent": agent, "toren.stream": stream,
            "toren.lease.epoch": epoch, "toren.worker_id": worker_id}
        trace.get_current_span().add_event("toren.lease_takeover", attributes)
        self.tracer.start_span("toren.lease_takeover", attributes=attributes).end()

    def run_finished(self, agent: str, run_id: str, status: str,
                     created_at: datetime | None) -> None:
        start = int(created_at.timestamp() * 1e9) if created_at is not None else None
        token = _FORCED_IDS.set(trace_ids(run_id))
        try:
            # no parent: the root; its ids come from the run id (_RunIds)
            span = self.tracer.start_span(
                f"toren.run {agent}", context=otel_context.Context(), start_time=start,
                attributes={"toren.run_id": run_id, "toren.agent": agent,
                            "toren.status": status})
        finally:
            _FORCED_IDS.reset(token)
        if status == "failed":
            span.set_status(Status(StatusCode.ERROR, "run failed"))
        span.end()

    def shutdown(self) -> None:
        if not self._shut_down:  # Runtime.stop may be called twice
            self._shut_down = True
            self.provider.shutdown()
