"""The queue driver's interface (``toren.queue``, ``TOREN_QUEUE``): messages that wake workers."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from toren.seams.shapes import OutgoingMessage, QueueMessage

if TYPE_CHECKING:
    from toren.config import Settings
    from toren.seams.store import Store


class Queue(abc.ABC):
    """Messages that wake workers: at-least-once, labelled by agent, with delayed delivery.

    Made by ``Runtime.start`` once the store is open (``driver(settings, store)``); the worker
    calls ``claim``, ``ack``, ``defer``, ``return_unknown`` and ``wait`` in its poll loop and
    handlers, and ``renew`` in its heartbeat; the outbox relay calls ``enqueue``.

    Each process has its own queue object and its worker uses one worker id with it: a
    message's ``id`` is what that object gave it (it may mean nothing to another process's
    object). ``toren.testing.contracts.QueueContract`` checks what follows.
    """

    #: ``True`` when the store's outbox is this queue (the Postgres queue: the outbox is its
    #: table), so messages are delivered from the append's own transaction and acknowledged in
    #: the append that ends their work. ``False`` (the default): the host starts an outbox
    #: relay that sends outbox entries with ``enqueue``, and acknowledges a message with
    #: ``ack`` after the append that ends its work has committed.
    reads_outbox: ClassVar[bool] = False

    #: ``True`` when the claim honours flow control (docs/guides/flow-control.md): each
    #: agent's ``concurrency:`` limit as registered in the store, and run priority with aging
    #: (``QueueMessage.priority``, ``TOREN_PRIORITY_AGING_S``). The runtime refuses to start
    #: a queue without it for an agent that sets ``concurrency:`` or ``priority:``, naming
    #: the file and field, rather than ignore them.
    flow_control: ClassVar[bool] = False

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """One line saying where messages live (printed at startup)."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect; awaited after the store is open."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop listening and release connections."""

    @abc.abstractmethod
    async def claim(self, agents: Sequence[str], worker_id: str, limit: int,
                    visibility_s: float, max_deliveries: int
                    ) -> tuple[list[QueueMessage], list[QueueMessage]]:
        """Claim up to ``limit`` ready messages of ``agents``; hide each for ``visibility_s``.

        Returns ``(claimed, dead)``: ``dead`` are messages already delivered
        ``max_deliveries`` times, moved to the dead letters instead of being delivered again
        (never delivered after that). Each claimed message's ``attempts`` counts this
        delivery; a message is held by one claimer at a time, however many claim at once, and
        comes back (counting one more delivery) once its visibility runs out unacknowledged.
        A claim may return fewer messages than are ready.
        """

    @abc.abstractmethod
    async def ack(self, message: QueueMessage, worker_id: str) -> None:
        """Delete a message this worker still holds (no-op if another worker reclaimed it).

        The worker acknowledges only once the work the message asked for is recorded, so a
        queue that cannot tell a reclaimed message from a held one may delete it anyway (SQS
        deletes with any receipt handle it gave out): the reclaiming worker finds that work
        done. The contract checks the no-op; toren-sqs runs that check as an expected
        failure.
        """

    @abc.abstractmethod
    async def defer(self, message: QueueMessage, worker_id: str, delay_s: float) -> None:
        """Hand a held message back, visible again after ``delay_s``, without counting the
        delivery towards dead-lettering."""

    @abc.abstractmethod
    async def return_unknown(self, worker_id: str, held: Sequence[int]) -> int:
        """Hand back, without counting, every message claimed by ``worker_id`` except
        ``held``: after a claim whose answer was lost (the connection broke as it committed),
        the messages it took would otherwise stay hidden and count as a failed delivery.
        Returns how many went back."""

    @abc.abstractmethod
    async def renew(self, worker_id: str, message_ids: Sequence[int],
                    visibility_s: float) -> None:
        """Hide the messages ``worker_id`` still holds for another ``visibility_s`` from now
        (ids it does not hold are ignored): work in hand outlasting a visibility timeout is
        not delivered again meanwhile.

        The worker calls it every third of ``TOREN_LEASE_TTL`` if the queue does not read the
        outbox; for one that does, ``WorkerRegistry.heartbeat`` renews the messages in the
        same round trip as the leases instead.
        """

    @abc.abstractmethod
    async def enqueue(self, agent: str, run_id: str | None, message: OutgoingMessage) -> None:
        """Send one message on its own (the outbox relay sends each outbox entry with it, due
        now); a ``delay_s`` keeps it from being claimed until it has passed."""

    @abc.abstractmethod
    async def wait(self, timeout_s: float) -> None:
        """Return when a message may be ready (a notification) or after ``timeout_s``."""

    async def depth(self, agents: Sequence[str]) -> dict[str, dict[str, int]] | None:
        """Messages per agent: ``ready`` (claimable now), ``in_flight`` (claimed by a worker)
        and ``delayed`` (retries and wake-ups not due yet), and for a queue with
        ``flow_control`` ``waiting_concurrency`` (of the ready ones, those held back by the
        agent's concurrency limit); ``None`` when the queue cannot count them cheaply.
        ``GET /healthz`` shows it to trusted callers (the console's fleet page); the default
        says nothing."""
        return None
