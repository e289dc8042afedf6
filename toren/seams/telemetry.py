"""Telemetry seam: the tracer interface (a no-op unless a ``toren.tracer`` driver such as
``toren-otel`` is configured). The log context of the work in hand is in
``toren.seams.log_context``."""

from __future__ import annotations

import contextlib
import hashlib
import re
import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime

from toren.core.events import NewEvent
from toren.seams.shapes import QueueMessage


class Tracer:
    """What the worker tells a tracing backend; every method is a no-op here.

    Made once per process (``toren.host.runtime``) from the ``toren.tracer`` driver chosen by
    ``TOREN_TRACER`` (``otel`` by default when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; see
    docs/guides/observability.md). The worker calls ``handling`` around each queue message it
    works (the other methods are called inside that block, on the same coroutine), so a
    driver can keep the current span in a context variable. Implementations must not block,
    raise or touch the database: they sit on the append path.
    """

    #: ``False`` for the no-op: callers skip building arguments for it.
    enabled: bool = False

    @contextlib.contextmanager
    def handling(self, message: QueueMessage, worker_id: str) -> Iterator[None]:
        """The block in which ``worker_id`` works ``message`` (a task's turn or a run tick).

        ``message.waited_s`` is how long it waited in the queue, when the queue knows."""
        yield

    def appended(self, agent: str, run_id: str, stream: str, events: Sequence[NewEvent],
                 seconds: float) -> None:
        """``events`` were committed to ``stream`` in ``seconds``: model calls
        (``ModelCallCompleted``: model, tokens, cost, latency) and tool calls
        (``ToolCallCompleted``: duration) become spans that end now."""

    def took_over(self, agent: str, run_id: str, stream: str, epoch: int,
                  worker_id: str) -> None:
        """``worker_id`` took ``stream`` over at ``epoch`` from a holder that stopped with
        work in flight (a crash or a lost lease)."""

    def joined(self, run_id: str, traceparent: str) -> None:
        """The run of the message in hand was created with ``traceparent`` (a W3C traceparent,
        ``parse_traceparent``'s): its spans belong to that trace. Called inside ``handling``,
        once the stream's lease is taken, before any span of the message is made."""

    def traceparent(self) -> str | None:
        """The W3C traceparent of the message span in hand, for a run this work starts (a
        cross-agent call, a background run): the child run's spans join this trace under it.
        ``None`` outside a message, when sampled out, or with tracing off."""
        return None

    def run_finished(self, agent: str, run_id: str, status: str,
                     created_at: datetime | None, traceparent: str | None = None) -> None:
        """The run ended (its ``RunFinished`` is committed): the run's root span, from
        ``created_at``, ends now (a child of ``traceparent``'s span, when the run has one)."""

    def shutdown(self) -> None:
        """Flush and stop exporting (the process is stopping)."""


def trace_ids(run_id: str) -> tuple[int, int]:
    """The trace id and root span id of a run, derived from its id alone: every worker that
    touches the run, in any process, parents its spans to the same root without any context
    carried through the queue. A run id is a UUID (128 bits, a trace id's size)."""
    try:
        trace_id = uuid.UUID(run_id).int
    except ValueError:
        trace_id = int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:16], "big")
    span_id = int.from_bytes(hashlib.sha256(f"run:{run_id}".encode()).digest()[:8], "big")
    return trace_id or 1, span_id or 1


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def parse_traceparent(header: str | None) -> str | None:
    """The W3C ``traceparent`` header as Toren stores it (version ``00``, lower case), or
    ``None`` when absent or invalid (the W3C rule: an invalid one is ignored, not refused).
    Called by the API routes that create runs and sessions."""
    if not header:
        return None
    value = header.strip().lower()
    match = _TRACEPARENT.fullmatch(value)
    if match is None or set(match[1]) == {"0"} or set(match[2]) == {"0"}:
        return None
    return value


def traceparent_ids(traceparent: str) -> tuple[int, int, bool]:
    """The trace id, parent span id and sampled flag of a ``parse_traceparent`` value."""
    _version, trace_id, span_id, flags = traceparent.split("-")
    return int(trace_id, 16), int(span_id, 16), bool(int(flags, 16) & 1)
