"""The fleet at a glance: ``GET /healthz``, ``GET /fleet``, ``toren top`` and
``toren db archive``'s table sizes call this service."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from toren.config import Settings
from toren.host.fleet import QueueDepth, fleet_snapshot
from toren.seams.store import Store


class FleetService:
    """The database's health, the live workers, the whole fleet's snapshot and the hot tables'
    sizes. ``runtime.fleet``; needs the store open. ``queue_depth`` gives the queue's own
    counts when the queue is not the database's (SQS), once the runtime has started."""

    def __init__(self, store: Store, settings: Settings, agents: Sequence[str],
                 queue_depth: Callable[[], QueueDepth | None] = lambda: None) -> None:
        self._store = store
        self._settings = settings
        self._agents = agents
        self._queue_depth = queue_depth

    @property
    def live_window_s(self) -> float:
        """A worker whose last heartbeat is older than this is not counted as live."""
        return max(10.0, 3 * self._settings.lease_ttl_s)

    async def health(self) -> dict[str, Any]:
        """``reachable`` and, if not, ``error`` (the store's own check)."""
        return await self._store.health()

    async def live_workers(self) -> list[dict[str, Any]]:
        """Workers whose heartbeat is newer than ``live_window_s``."""
        return await self._store.live_workers(self.live_window_s)

    async def snapshot(self) -> dict[str, Any]:
        """What ``toren top --json`` and ``GET /fleet`` show (``toren.host.fleet``)."""
        return await fleet_snapshot(self._store, self.live_window_s,
                                    queue_depth=self._queue_depth())

    async def hot_table_sizes(self) -> dict[str, dict[str, int]]:
        """Per served agent: rows and bytes of its runs and events tables (estimates)."""
        return await self._store.hot_table_sizes(list(self._agents))
