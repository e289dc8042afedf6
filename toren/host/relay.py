"""The outbox's other half, for a queue that does not read the store's outbox.

Appends write their messages to the store's outbox in their own transaction (the contract of
``toren.seams.store.RunLog``). The Postgres queue reads the outbox itself. Any other queue
(``Queue.reads_outbox`` is ``False``: SQS, say) needs two things from the host, both here:

- ``OutboxRelay``: a loop that claims due outbox entries, sends each with ``Queue.enqueue``
  and then acknowledges them. A relay that dies between sending and acknowledging leaves its
  claim to expire, and the entries are sent again: at-least-once, like every delivery in
  Toren (handlers are idempotent through the log).
- ``QueueAcknowledgingLog``: the run log execution writes through, which acknowledges the
  worked message with ``Queue.ack`` once the append that ends its work has committed (with an
  outbox-reading queue that acknowledgement is part of the append's transaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from toren.core.runs import RunUpdate
from toren.host.run_log_proxy import DelegatingRunLog
from toren.seams.queue import Queue
from toren.seams.shapes import Lease, OutgoingMessage, QueueMessage
from toren.seams.store import Outbox, RunLog

if TYPE_CHECKING:
    from toren.core.events import NewEvent

log = logging.getLogger(__name__)

#: Entries claimed per round; a full round is followed by the next one at once.
RELAY_BATCH = 100


class OutboxRelay:
    """Sends outbox entries of ``agents`` to ``queue``; started by the host with its workers.

    Args:
        outbox: the store (its ``Outbox`` interface).
        queue: the configured queue, which does not read the outbox.
        agents: whose entries to relay (each fleet relays its own agents', as it claims only
            their messages).
        visibility_s: how long a claimed entry stays hidden from other relays; after that an
            entry this relay did not acknowledge is sent again.
        poll_interval_s: how long an idle relay waits for a notification of a new entry
            before looking again.
    """

    def __init__(self, outbox: Outbox, queue: Queue, agents: Sequence[str], *,
                 visibility_s: float, poll_interval_s: float) -> None:
        self.outbox = outbox
        self.queue = queue
        self.agents = list(agents)
        self.visibility_s = visibility_s
        self.poll_interval_s = poll_interval_s
        self.id = f"relay-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._loop: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="toren-outbox-relay")
        log.info("outbox relay %s sending to %s", self.id, self.queue.description)

    async def stop(self) -> None:
        """Stop at once; entries claimed and not yet acknowledged come back after their
        visibility timeout (and are sent again)."""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None

    async def relay_once(self) -> int:
        """Claim up to ``RELAY_BATCH`` due entries, send them, acknowledge what was sent;
        return how many were claimed. A failed send stops the round: what was sent before it
        is acknowledged, the rest comes back after the visibility timeout."""
        entries = await self.outbox.claim_outbox(self.agents, self.id, RELAY_BATCH,
                                                 self.visibility_s)
        sent: list[int] = []
        try:
            for entry in entries:
                await self.queue.enqueue(entry.agent, entry.run_id, entry.message)
                sent.append(entry.id)
        finally:
            if sent:
                await self.outbox.ack_outbox(self.id, sent)
        return len(entries)

    async def _run(self) -> None:
        while True:
            try:
                relayed = await self.relay_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the loop must outlive any one failure (database blips)
                log.warning("outbox relay %s failed (%s); retrying", self.id, exc)
                relayed = 0
            if relayed < RELAY_BATCH:
                await self.outbox.wait_outbox(self.poll_interval_s)


class QueueAcknowledgingLog(DelegatingRunLog):
    """``log`` as execution sees it when the queue does not read the outbox: an append that
    acknowledges a message (``ack``) commits first, then the message is acknowledged with
    ``queue.ack``. A crash in between delivers the message again; its handler finds the work
    done in the log and acknowledges it then. (``progress`` has no equivalent: such a queue
    counts deliveries its own way.)"""

    def __init__(self, log: RunLog, queue: Queue, worker_id: str) -> None:
        super().__init__(log)
        self.queue = queue
        self.worker_id = worker_id

    async def append(self, agent: str, lease: Lease, expected_seq: int,
                     events: Sequence[NewEvent], *, ttl_s: float,
                     messages: Sequence[OutgoingMessage] = (), run_update: RunUpdate | None = None,
                     ack: QueueMessage | None = None, release: bool = False,
                     progress: QueueMessage | None = None) -> None:
        # ack and progress name messages of the queue, not of the store's outbox
        await self.log.append(agent, lease, expected_seq, events, ttl_s=ttl_s,
                              messages=messages, run_update=run_update, release=release)
        if ack is not None:
            try:
                await self.queue.ack(ack, self.worker_id)
            except Exception as exc:  # committed: at worst the message comes back, a no-op
                log.warning("could not acknowledge message %s after its append: %s", ack.id,
                            exc or type(exc).__name__)
