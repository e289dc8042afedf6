"""The run log as the worker hands it to execution when metrics or tracing are on: every
committed append is timed and told to the metrics and the tracer (one place for both)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from toren.core.events import NewEvent
from toren.core.runs import RunUpdate
from toren.host.metrics import Metrics
from toren.host.run_log_proxy import DelegatingRunLog
from toren.seams.shapes import Lease, OutgoingMessage, QueueMessage
from toren.seams.store import RunLog
from toren.seams.telemetry import Tracer

#: The events that end a run (its root span ends with them).
_RUN_ENDS = frozenset({"RunFinished", "RunDeadLettered"})


class ObservedRunLog(DelegatingRunLog):
    """``log``, with each committed ``append`` and ``append_unleased`` told to ``metrics``
    (counters, append latency) and ``tracer`` (model and tool call spans), and, with tracing
    on, ``run_ended(agent, run_id, status)`` called when a run's end commits; ``released(lease)``
    is called when an append that released its lease commits (the worker then has no lease
    left to release: one statement saved per handler). Nothing is told about an append that
    failed."""

    def __init__(self, log: RunLog, metrics: Metrics | None, tracer: Tracer, *,
                 run_ended: Callable[[str, str, str], None] | None = None,
                 released: Callable[[Lease], None] | None = None) -> None:
        super().__init__(log)
        self.metrics = metrics
        self.tracer = tracer
        self.run_ended = run_ended
        self.released = released

    def _committed(self, agent: str, run_id: str, stream: str, events: Sequence[NewEvent],
                   seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.appended(agent, events, seconds)
        if self.tracer.enabled:
            self.tracer.appended(agent, run_id, stream, events, seconds)
            if self.run_ended is not None and stream == "run":
                for event in events:
                    if event.type in _RUN_ENDS:
                        self.run_ended(agent, run_id, str(event.data.get("status", "failed")))
                        break

    async def append(self, agent: str, lease: Lease, expected_seq: int,
                     events: Sequence[NewEvent], *, ttl_s: float,
                     messages: Sequence[OutgoingMessage] = (), run_update: RunUpdate | None = None,
                     ack: QueueMessage | None = None, release: bool = False,
                     progress: QueueMessage | None = None) -> None:
        started = time.perf_counter()
        await self.log.append(agent, lease, expected_seq, events, ttl_s=ttl_s,
                              messages=messages, run_update=run_update, ack=ack,
                              release=release, progress=progress)
        if release and self.released is not None:
            self.released(lease)
        self._committed(agent, lease.run_id, lease.stream, events,
                        time.perf_counter() - started)

    async def append_unleased(self, agent: str, run_id: str, stream: str,
                              events: Sequence[NewEvent], *,
                              run_update: RunUpdate | None = None,
                              only_if_active: bool = True) -> bool:
        started = time.perf_counter()
        written = await self.log.append_unleased(agent, run_id, stream, events,
                                                 run_update=run_update,
                                                 only_if_active=only_if_active)
        if written:
            self._committed(agent, run_id, stream, events, time.perf_counter() - started)
        return written
