"""A run log that hands every call to another one: the base of the worker's wrappers around
the store's run log (``toren.host.relay.QueueAcknowledgingLog``,
``toren.host.observed.ObservedRunLog``), which override only what they change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from toren.core.events import Event, NewEvent
from toren.core.runs import ChildLink, RunRecord, RunUpdate
from toren.seams.shapes import Lease, LeaseBusy, OutgoingMessage, QueueMessage
from toren.seams.store import RunLog


class DelegatingRunLog(RunLog):
    """Every ``RunLog`` method, forwarded unchanged to ``log``."""

    def __init__(self, log: RunLog) -> None:
        self.log = log

    async def create_run(self, agent: str, run_id: str, input: Any, *,
                         idempotency_key: str | None, events: Sequence[NewEvent],
                         messages: Sequence[OutgoingMessage], kind: str = "run",
                         status: str = "queued",
                         parent: ChildLink | None = None,
                         webhooks: Sequence[Mapping[str, Any]] = (),
                         priority: int = 0,
                         concurrency_key: str | None = None) -> tuple[str, bool]:
        return await self.log.create_run(agent, run_id, input, idempotency_key=idempotency_key,
                                         events=events, messages=messages, kind=kind,
                                         status=status, parent=parent, webhooks=webhooks,
                                         priority=priority, concurrency_key=concurrency_key)

    async def session_input(self, agent: str, run_id: str, stream: str,
                            events: Sequence[NewEvent], messages: Sequence[OutgoingMessage],
                            idempotency_key: str | None = None
                            ) -> tuple[bool, str | None, int]:
        return await self.log.session_input(agent, run_id, stream, events, messages,
                                            idempotency_key)

    async def acquire_lease(self, run_id: str, stream: str, holder: str,
                            ttl_s: float) -> Lease | None:
        return await self.log.acquire_lease(run_id, stream, holder, ttl_s)

    async def acquire_and_load(self, agent: str, run_id: str, stream: str, holder: str,
                               ttl_s: float, *, with_finished: bool = False
                               ) -> tuple[Lease, list[Event]] | LeaseBusy:
        return await self.log.acquire_and_load(agent, run_id, stream, holder, ttl_s,
                                               with_finished=with_finished)

    async def release_lease(self, lease: Lease) -> None:
        await self.log.release_lease(lease)

    async def append(self, agent: str, lease: Lease, expected_seq: int,
                     events: Sequence[NewEvent], *, ttl_s: float,
                     messages: Sequence[OutgoingMessage] = (), run_update: RunUpdate | None = None,
                     ack: QueueMessage | None = None, release: bool = False,
                     progress: QueueMessage | None = None) -> None:
        await self.log.append(agent, lease, expected_seq, events, ttl_s=ttl_s,
                              messages=messages, run_update=run_update, ack=ack,
                              release=release, progress=progress)

    async def append_unleased(self, agent: str, run_id: str, stream: str,
                              events: Sequence[NewEvent], *,
                              run_update: RunUpdate | None = None,
                              only_if_active: bool = True) -> bool:
        return await self.log.append_unleased(agent, run_id, stream, events,
                                              run_update=run_update,
                                              only_if_active=only_if_active)

    async def cancel_run(self, run_id: str, reason: str) -> RunRecord | None:
        return await self.log.cancel_run(run_id, reason)

    async def ensure_messages(self, agent: str, run_id: str,
                              messages: Sequence[OutgoingMessage]) -> int:
        return await self.log.ensure_messages(agent, run_id, messages)

    async def run_status(self, agent: str, run_id: str) -> str | None:
        return await self.log.run_status(agent, run_id)
