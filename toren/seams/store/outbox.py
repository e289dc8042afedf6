"""The transactional outbox, as an outbox relay reads it.

Every write of the run log that sends messages (``create_run``, ``session_input``, ``append``,
``ensure_messages``, and the guardian's sweep) writes them to the outbox in its own
transaction: a message exists if and only if the write that sent it committed. A queue that
reads the outbox (``Queue.reads_outbox``, the Postgres queue: its table is the outbox) claims
from it directly. Any other queue is fed by the outbox relay (``toren.host.relay``), which
claims due entries here, sends each with ``Queue.enqueue`` and then acknowledges it.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from toren.seams.shapes import OutboxEntry


class Outbox(abc.ABC):
    """Claiming and acknowledging outbox entries, for the outbox relay.

    Called only by ``toren.host.relay.OutboxRelay``, which the host starts (with its workers)
    when the configured queue does not read the outbox: ``claim_outbox`` in a loop, then
    ``ack_outbox`` once the claimed entries are sent, and ``wait_outbox`` when idle.
    Delivery to the queue is at-least-once: a relay that dies between sending and
    acknowledging leaves its entries claimed, and they come back after ``visibility_s`` to be
    sent again (handlers are idempotent through the log). Relay claims are never
    dead-lettered.
    """

    @abc.abstractmethod
    async def claim_outbox(self, agents: Sequence[str], relay_id: str, limit: int,
                           visibility_s: float) -> list[OutboxEntry]:
        """Claim up to ``limit`` due entries of ``agents`` (oldest first) for ``relay_id`` and
        hide them for ``visibility_s``; an entry whose claim expired may be claimed again.

        A delayed message is due once its delay has passed: it waits in the outbox, and the
        relay sends it without a delay.
        """

    @abc.abstractmethod
    async def wait_outbox(self, timeout_s: float) -> None:
        """Return when an entry may have become due (a notification of a write), or after
        ``timeout_s`` (``TOREN_POLL_INTERVAL``): a store that cannot notify just sleeps, and
        each message then waits up to that long in the outbox."""

    @abc.abstractmethod
    async def ack_outbox(self, relay_id: str, entry_ids: Sequence[int]) -> int:
        """Delete the entries ``relay_id`` still holds (sent); return how many. An entry whose
        claim expired and was taken by another relay is left to that relay. Concurrent
        claims never hand one entry to two relays while its claim lasts."""
