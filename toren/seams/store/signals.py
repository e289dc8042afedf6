"""Signals to runs: appended to a run's ``signals`` stream with the tick that wakes it."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING

from toren.seams.shapes import OutgoingMessage

if TYPE_CHECKING:
    from toren.core.events import NewEvent


class SignalLog(abc.ABC):
    """Sending signals to runs (``Runtime.send_signal``, ``SignalsService``); the orchestrator
    reads them back through ``RunLog.acquire_and_load`` (``with_finished``).

    The outbox contract of ``RunLog`` holds: the messages are written in the same transaction
    as the signal. ``toren.testing.contracts.SignalLogContract`` checks all of this.
    """

    @abc.abstractmethod
    async def send_signal(self, agent: str, run_id: str, event: NewEvent,
                          messages: Sequence[OutgoingMessage],
                          idempotency_key: str | None = None
                          ) -> tuple[str | None, int | None, bool]:
        """Append a ``SignalReceived`` to the run's ``signals`` stream, only if the run is not
        finished, with ``messages`` (the tick that wakes its workflow), in one transaction.

        Called by ``Runtime.send_signal``. Nobody holds a lease on the ``signals`` stream, so
        this never disturbs the compare-and-swap of the run's leased streams; concurrent
        senders each get their own number (one retries on the sequence's primary key). The
        check that the run is not finished and the append are atomic against the append that
        finishes it. With an ``idempotency_key`` that a signal of the stream already carries,
        nothing is written. A written signal also queues, in the same transaction, a
        ``task`` message (``{"task_id", "key": "task:<id>"}``) for each task of the run with
        an open tool wait of the signal's name (a ``ToolWaitStarted`` on its stream with no
        ``ToolWaitEnded`` of the same ``call_id`` and ``wait``), looked for after the run is
        locked, so that a wait appended concurrently is either seen here or sees this signal
        (``toren.execution.tool_waits``). Returns ``(status, number, created)``: the run's
        status as found (``None``: no such run), the signal's number on the stream (that of
        the earlier signal for a repeated key; ``None`` when nothing was written because the
        run is finished or missing) and whether this call wrote it.
        """
