"""A queue driver that does not read the store's outbox, for the outbox relay's tests.

It stands in for a queue on another service (SQS): its messages live in one ``MemoryBroker``
per test process, shared by every runtime of the test as a service would be, and reach it
only through ``enqueue`` (the outbox relay). Registered as ``memory`` in ``toren.queue`` only
by the tests that use it (``tests/integration/test_outbox_relay.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from toren.config import Settings
from toren.seams.queue import Queue
from toren.seams.shapes import OutgoingMessage, QueueMessage
from toren.seams.store import Store


@dataclass
class Held:
    """A message in the broker."""

    message: QueueMessage
    available_at: float
    claimed_by: str | None = None


@dataclass
class MemoryBroker:
    """The service: messages, and a record of every send (duplicates included)."""

    messages: dict[int, Held] = field(default_factory=dict)
    sent: list[tuple[str, str | None, str, dict[str, Any]]] = field(default_factory=list)
    #: message id -> how many times it was claimed
    claims: dict[int, int] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    #: While set, a send is recorded and then never returns: its relay is as good as dead.
    hang_after_send: bool = False


BROKER = MemoryBroker()


def reset_broker() -> MemoryBroker:
    global BROKER
    BROKER = MemoryBroker()
    return BROKER


class MemoryQueue(Queue):
    """Claims, visibility timeouts, deferrals and dead letters over ``BROKER``."""

    def __init__(self, settings: Settings, store: Store) -> None:
        super().__init__(settings, store)
        self.broker = BROKER

    @property
    def description(self) -> str:
        return "memory (tests; fed by the outbox relay)"

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    async def claim(self, agents: Sequence[str], worker_id: str, limit: int,
                    visibility_s: float, max_deliveries: int
                    ) -> tuple[list[QueueMessage], list[QueueMessage]]:
        now = self._now()
        ready = sorted((held for held in self.broker.messages.values()
                        if held.message.agent in agents and held.available_at <= now),
                       key=lambda held: (held.available_at, held.message.id))
        claimed: list[QueueMessage] = []
        dead: list[QueueMessage] = []
        for held in ready:
            if held.message.attempts >= max_deliveries:
                del self.broker.messages[held.message.id]
                dead.append(held.message)
            elif len(claimed) < limit:
                held.message = _with_attempts(held.message, held.message.attempts + 1)
                held.available_at = now + visibility_s
                held.claimed_by = worker_id
                claimed.append(held.message)
                self.broker.claims[held.message.id] = self.broker.claims.get(
                    held.message.id, 0) + 1
        return claimed, dead

    async def ack(self, message: QueueMessage, worker_id: str) -> None:
        held = self.broker.messages.get(message.id)
        if held is not None and held.claimed_by == worker_id:
            del self.broker.messages[message.id]

    async def defer(self, message: QueueMessage, worker_id: str, delay_s: float) -> None:
        held = self.broker.messages.get(message.id)
        if held is not None and held.claimed_by == worker_id:
            held.available_at = self._now() + delay_s
            held.message = _with_attempts(held.message, max(held.message.attempts - 1, 0))

    async def return_unknown(self, worker_id: str, held_ids: Sequence[int]) -> int:
        returned = 0
        for held in self.broker.messages.values():
            if held.claimed_by == worker_id and held.message.id not in held_ids:
                held.claimed_by = None
                held.available_at = self._now()
                held.message = _with_attempts(held.message, max(held.message.attempts - 1, 0))
                returned += 1
        return returned

    async def renew(self, worker_id: str, message_ids: Sequence[int],
                    visibility_s: float) -> None:
        for message_id in message_ids:
            held = self.broker.messages.get(message_id)
            if held is not None and held.claimed_by == worker_id:
                held.available_at = self._now() + visibility_s

    async def enqueue(self, agent: str, run_id: str | None, message: OutgoingMessage) -> None:
        new = QueueMessage(next(self.broker.ids), agent, run_id, message.kind,
                           dict(message.payload), 0)
        self.broker.messages[new.id] = Held(new, self._now() + message.delay_s)
        self.broker.sent.append((agent, run_id, message.kind, dict(message.payload)))
        self.broker.wakeup.set()
        if self.broker.hang_after_send:
            await asyncio.Event().wait()

    async def wait(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.broker.wakeup.wait(), timeout_s)
        self.broker.wakeup.clear()


def _with_attempts(message: QueueMessage, attempts: int) -> QueueMessage:
    return QueueMessage(message.id, message.agent, message.run_id, message.kind,
                        message.payload, attempts)
