"""Forks: a new run created with a log copied from another run's (``Runtime.fork_run``)."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from toren.seams.shapes import OutgoingMessage

if TYPE_CHECKING:
    from toren.core.events import NewEvent


class ForkStore(abc.ABC):
    """Creating a fork in one transaction.

    ``Runtime.fork_run`` reads the source run (``RunReader.load_events``), decides what to copy
    (``toren.core.forking.plan_fork``) and calls ``create_fork``; it never writes to the source
    run.
    """

    @abc.abstractmethod
    async def create_fork(self, agent: str, run_id: str, input: Any, *,
                          streams: Mapping[str, Sequence[NewEvent]],
                          messages: Sequence[OutgoingMessage]) -> None:
        """Insert the run (status ``queued``), every stream's events numbered 1, 2, ... and
        ``messages`` (to the outbox), all in one transaction: a fork exists whole or not at
        all. ``streams`` maps a stream name (``run``, ``task:<id>``) to its events.
        ``run_id`` is new (the host makes it); should a run have it, the fork fails and
        writes nothing."""
