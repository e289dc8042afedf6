"""The database's clock, as a worker estimates it: what deadlines and wake-up delays go by."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

from toren.seams.store import WorkerRegistry

log = logging.getLogger(__name__)

#: A host clock this far from the database's (either way) is logged as a warning.
SKEW_WARNING_S = 2.0


class DatabaseClock:
    """The store's clock (``WorkerRegistry.database_now``), read now and then and carried
    forward between reads by this process's monotonic clock.

    Leases, queue delays, schedules and expiries are decided by the database's clock; a
    worker computing a deadline (a tool wait's, a signal wait's) or the delay of a wake-up
    (an approval's or a question's expiry) from its own wall clock would be off by its skew:
    30 s ahead, its wake-ups would come 30 s early and find nothing due, over and over; 30 s
    behind, they would come 30 s late. Carried forward by the monotonic clock, the estimate
    is also immune to the wall clock being stepped between reads. Before the first read (or
    without a store), it is the host's clock.
    """

    def __init__(self) -> None:
        self._read_at: datetime | None = None
        self._monotonic = 0.0
        #: The database's clock minus this host's, at the last read (seconds).
        self.offset_s = 0.0
        self._warned = False

    def now(self) -> datetime:
        """The database's clock now, as estimated (timezone-aware, UTC)."""
        if self._read_at is None:
            return datetime.now(UTC)
        return self._read_at + timedelta(seconds=time.monotonic() - self._monotonic)

    async def read(self, registry: WorkerRegistry) -> None:
        """Read the store's clock again; log a warning when this host's clock is more than
        ``SKEW_WARNING_S`` from it (and when it is back within it)."""
        before = time.monotonic()
        read = await registry.database_now()
        after = time.monotonic()
        # the read happened somewhere in the round trip: its middle is the best guess
        self._read_at = read.astimezone(UTC)
        self._monotonic = (before + after) / 2
        self.offset_s = (self.now() - datetime.now(UTC)).total_seconds()
        skewed = abs(self.offset_s) > SKEW_WARNING_S
        if skewed and not self._warned:
            side = "behind" if self.offset_s > 0 else "ahead of"
            log.warning("this host's clock is %.1fs %s the database's: leases, schedules and "
                        "deadlines go by the database's clock, so Toren keeps time, but fix "
                        "the host's time sync (NTP, chrony)", abs(self.offset_s), side)
        elif not skewed and self._warned:
            log.warning("this host's clock agrees with the database's again (within %.1fs)",
                        SKEW_WARNING_S)
        self._warned = skewed
