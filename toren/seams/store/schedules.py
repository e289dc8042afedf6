"""Schedules: agent.yaml's timetables in the database, and the claim that fires each slot once."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from toren.core.events import NewEvent
from toren.core.schedules import ScheduleRecord, ScheduleSpec
from toren.seams.shapes import OutgoingMessage


@dataclass(frozen=True)
class SlotToFire:
    """One slot of one schedule, handed to the host's run factory while the slot is claimed."""

    agent: str
    schedule: str
    input: Any
    slot_at: datetime
    trigger: str
    timezone: str = "UTC"


@dataclass(frozen=True)
class NewRun:
    """What creating a run writes (``RunLog.create_run``): built by the host, written by the
    store in the transaction that claims the slot."""

    run_id: str
    input: Any
    idempotency_key: str | None
    events: list[NewEvent] = field(default_factory=list)
    messages: list[OutgoingMessage] = field(default_factory=list)
    #: Its priority and concurrency key (``RunLog.create_run``).
    priority: int = 0
    concurrency_key: str | None = None


#: The host's function from a claimed slot to the run it starts.
RunFactory = Callable[[SlotToFire], NewRun]


@dataclass(frozen=True)
class FiredSlot:
    """A slot that started a run."""

    agent: str
    schedule: str
    slot_at: datetime
    trigger: str
    run_id: str


class ScheduleStore(abc.ABC):
    """The schedules of every agent, and firing their slots exactly once.

    ``Runtime.start`` (with workers) calls ``sync_schedules`` for each agent it serves; every
    worker calls ``seconds_to_next_slot`` and, when a slot is due, ``fire_due_schedules`` in a
    loop (any number of workers may: the claim decides); ``toren schedules`` and the HTTP API
    call the rest.
    """

    @abc.abstractmethod
    async def sync_schedules(self, agent: str, schedules: Sequence[ScheduleSpec]) -> None:
        """Make the database hold ``schedules`` for ``agent``: new ones start at their next
        slot from now, changed timetables restart from now, entries no longer listed stop
        firing (kept as removed). Pauses are left as they are."""

    @abc.abstractmethod
    async def seconds_to_next_slot(self, agents: Sequence[str]) -> float | None:
        """Seconds until the earliest slot of an active schedule of ``agents`` (zero or less:
        due now); ``None`` if they have none. One cheap read: the idle path of the loop."""

    @abc.abstractmethod
    async def fire_due_schedules(self, agents: Sequence[str], make_run: RunFactory, *,
                                 limit: int = 20) -> list[FiredSlot]:
        """Claim up to ``limit`` due schedules of ``agents`` and fire their slots.

        For each claimed schedule, one transaction records every slot to fire (unique per
        agent, schedule and slot time), creates its run with its first events and messages,
        and advances the schedule's next slot: a slot starts exactly one run, whatever the
        number of workers and crashes. Slots missed beyond ``ON_TIME_S`` follow the
        schedule's ``missed`` policy (``toren.core.schedules.due_slots``).
        """

    @abc.abstractmethod
    async def trigger_schedule(self, agent: str, name: str, make_run: RunFactory) -> FiredSlot:
        """Fire ``name`` now (slot: the database's now), whatever its timetable and even when
        paused; ``ScheduleNotFound`` or ``ScheduleRemoved`` otherwise.

        The run of every fired slot (here or by ``fire_due_schedules``) is tagged with its
        schedule (``RunRecord.schedule``, ``RunReader.list_runs(schedule=...)``) and listed
        in the schedule's ``fires``."""

    @abc.abstractmethod
    async def set_schedule_paused(self, agent: str, name: str, paused: bool) -> ScheduleRecord:
        """Pause or resume ``name``. A resumed schedule fires from its next slot after now: the
        slots that passed while it was paused are skipped. ``ScheduleNotFound`` if none."""

    @abc.abstractmethod
    async def list_schedules(self, agents: Sequence[str], name: str | None = None, *,
                             fires: int = 0) -> list[ScheduleRecord]:
        """The schedules of ``agents`` (removed ones too), by agent and name; with ``fires``,
        each with its most recent fires."""
