"""Signals to runs: ``POST /runs/{id}/signals/{name}``, ``toren jobs signal``, the client and
the MCP tool call this service (``runtime.signals``)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection
from datetime import UTC, datetime
from typing import Any

from toren.core import events as ev
from toren.core.events import NewEvent
from toren.core.runs import RunRecord
from toren.errors import RunFinishedError, RunNotFound, SignalTooLarge, UnstorableValue
from toren.execution.messages import signal_tick
from toren.execution.signals import MAX_SIGNAL_BYTES, check_signal_name
from toren.host.services.values import check_storable
from toren.seams.store.signals import SignalLog


class SignalsService:
    """Sends signals to runs of the served agents, each recorded once in the run's log (its
    ``signals`` stream) with the tick that wakes a workflow waiting for it.

    Given the store's ``SignalLog``, a way to read a run's row (``Runtime.get_run``: hot or
    archived; raises ``RunNotFound``) and the served agents' names (a runtime serving none, as
    the CLI's ``toren jobs signal`` uses, reaches every run)."""

    def __init__(self, log: SignalLog, get_run: Callable[[str], Awaitable[RunRecord]],
                 agents: Collection[str]) -> None:
        self._log = log
        self._get_run = get_run
        self._agents = frozenset(agents)

    async def send(self, run_id: str, name: str, payload: Any = None, *,
                   idempotency_key: str | None = None,
                   sent_by: str | None = None) -> dict[str, Any]:
        """Send signal ``name`` with ``payload`` (any JSON value) to the run.

        A workflow takes it with ``ctx.wait_for_signal(name)`` (now, or when it next waits:
        a signal sent before the wait is kept) and sees it in ``ctx.signals(name)``; every
        task whose tool waits in ``toren.wait_for_signal(name)`` is woken in the same
        transaction and gets it. Returns
        ``{"run_id", "name", "number", "created", "status"}``: ``number`` is the signal's
        place on the run's signals stream; ``created`` is ``False`` when an earlier signal
        with the same ``idempotency_key`` was found (nothing was sent again; also once the
        run has finished, so a retry after a lost answer gets the first answer).

        Raises ``ConfigError`` for an invalid name, ``SignalTooLarge`` past
        ``MAX_SIGNAL_BYTES`` of JSON, ``UnstorableValue``, ``RunNotFound`` (no such run of an
        agent served here) and ``RunFinishedError`` once the run has finished.
        """
        check_signal_name(name)
        try:
            size = len(json.dumps(payload, allow_nan=False, ensure_ascii=False).encode())
        except (TypeError, ValueError) as exc:
            raise UnstorableValue(f"the signal's payload is not JSON: {exc}") from None
        if size > MAX_SIGNAL_BYTES:
            raise SignalTooLarge(f"a signal's payload may be at most {MAX_SIGNAL_BYTES} bytes "
                                 f"of JSON; this one has {size}. Send a reference (a file id, "
                                 "a URL) instead of the data")
        if idempotency_key is not None and not 0 < len(idempotency_key) <= 255:
            raise UnstorableValue("an idempotency key must be 1 to 255 characters")
        check_storable([payload, idempotency_key, sent_by], "signal")
        record = await self._get_run(run_id)
        if self._agents and record.agent not in self._agents:
            raise RunNotFound(f"no run {run_id!r} of an agent served here")
        if record.status in ev.TERMINAL_STATUSES and (
                idempotency_key is None or record.extra.get("archive")):
            # with a key, the store answers: a retry of a signal it took is not refused
            raise self._finished(record.id, record.status)
        event = NewEvent.of(ev.SignalReceived(
            name=name, payload=payload, sent_at=datetime.now(UTC).isoformat(),
            idempotency_key=idempotency_key, sent_by=sent_by))
        status, number, created = await self._log.send_signal(
            record.agent, record.id, event, [signal_tick(name)], idempotency_key)
        if status is None:
            raise RunNotFound(f"no run {run_id!r} in this database (see `toren jobs list`)")
        if number is None:
            raise self._finished(record.id, status)
        return {"run_id": record.id, "name": name, "number": number, "created": created,
                "status": status}

    @staticmethod
    def _finished(run_id: str, status: str) -> RunFinishedError:
        return RunFinishedError(f"run {run_id} has finished ({status}) and takes no more "
                                "signals; start a new run")
