"""The guardian's sweep: healing runs whose messages were all lost."""

from __future__ import annotations

import abc
from collections.abc import Sequence


class Guardian(abc.ABC):
    """Finding active runs that nothing will wake, and waking them.

    The worker calls ``guardian_sweep`` every ``TOREN_GUARDIAN_INTERVAL`` seconds for the
    agents it serves. The tick it sends makes the orchestrator re-send what the run is
    missing (``RunLog.ensure_messages``), which heals a lost message (DESIGN rule 5).
    """

    @abc.abstractmethod
    async def guardian_sweep(self, agents: Sequence[str]) -> list[str]:
        """Write a ``run`` tick to the outbox for every active run of ``agents`` with no
        message pending in the outbox and no live lease (no worker is working it); return
        those runs' ids. The tick's payload is ``{"run_id": ..., "reason": "guardian"}``.
        Active: ``queued`` or ``running``. A run written to in the last second or so may be
        left for a later sweep (its message may be on its way).

        With a queue that does not read the outbox, messages already relayed are not pending
        in it, so an active run between two leases (its message waiting in that queue) gets a
        tick: a no-op for the run, and safe.
        """
