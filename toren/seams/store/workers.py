"""The worker registry: which workers are alive, of which version, holding what."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from toren.seams.shapes import Lease


class WorkerRegistry(abc.ABC):
    """Worker sign-ins and liveness, and the renewal of what a worker holds.

    The worker (``toren.host.worker``) calls ``heartbeat`` when it starts and then every third
    of ``TOREN_LEASE_TTL``, ``sign_out`` once when it stops, and ``live_workers`` and
    ``database_now`` every 30 s (to log version skew, and to keep its estimate of the store's
    clock); ``GET /healthz`` lists ``live_workers``.
    """

    @abc.abstractmethod
    async def heartbeat(self, worker: dict[str, Any], ttl_s: float,
                        message_ids: Sequence[int], leases: Sequence[Lease] = ()) -> None:
        """Renew ``leases`` and the claimed ``message_ids`` of work in hand; record the
        worker's sign-in and liveness (``worker``: ``id``, ``version``, ``agents``, and
        ``lane``, ``short``, ``long`` or ``all``: kept when the store can, ``all`` if absent; and
        ``supervisor``, the id of the supervisor that started this worker process, or ``None``:
        kept when the store can).

        Exactly ``leases`` are renewed, for ``ttl_s`` from now, if ``worker["id"]`` still holds
        them: another lease of that holder (one an aborted handler left) is left to expire.

        ``message_ids`` are messages claimed from the outbox by a queue that reads it
        (``Queue.reads_outbox``); a store whose outbox no queue reads may ignore them.
        """

    @abc.abstractmethod
    async def sign_out(self, worker_id: str) -> None:
        """Remove the worker's sign-in and release its leases (graceful shutdown); messages
        it still holds in an outbox-reading queue go back without counting a delivery."""

    @abc.abstractmethod
    async def live_workers(self, max_age_s: float) -> list[dict[str, Any]]:
        """Workers whose heartbeat is younger than ``max_age_s``, each once (``id``,
        ``version``, ``agents``, and what else the store keeps: ``lane``, ``supervisor``, host,
        pid, times)."""

    async def database_now(self) -> datetime:
        """The store's clock now (timezone-aware): the clock leases, queue delays, schedules
        and expiries go by. The worker reads it when it starts and every 30 s and carries it
        forward with its monotonic clock (``toren.host.db_clock``), so that the deadlines and
        wake-up delays it computes hold whatever its own wall clock says. The default, for a
        store without a clock of its own, is this host's clock. Plugin API 1.7."""
        return datetime.now(UTC)
