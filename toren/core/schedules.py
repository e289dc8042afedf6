"""Schedules: cron slots in a time zone, and which slots fire (pure: the caller passes now)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

#: What happens to slots that passed while no worker was running: ``skip`` drops them,
#: ``catchup`` fires the most recent ``catchupLimit`` of them.
MissedPolicy = Literal["skip", "catchup"]
MISSED_POLICIES: tuple[str, ...] = ("skip", "catchup")
DEFAULT_CATCHUP_LIMIT = 5
#: A slot fired at most this long after its time is on time; an older one was missed (every
#: worker was down, or the schedule was paused) and the ``missed`` policy decides.
ON_TIME_S = 60.0
#: Fires shown by ``toren schedules show`` and ``GET /schedules/{agent}/{name}``.
RECENT_FIRES = 10
#: How a slot came to fire (``ScheduleFired.trigger``).
Trigger = Literal["cron", "catchup", "manual"]


@dataclass(frozen=True)
class ScheduleSpec:
    """One entry of ``schedules:`` in agent.yaml, validated by the loader."""

    name: str
    cron: str
    timezone: str = "UTC"
    input: Any = None
    missed: MissedPolicy = "skip"
    catchup_limit: int = DEFAULT_CATCHUP_LIMIT

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "cron": self.cron, "timezone": self.timezone,
                "input": self.input, "missed": self.missed, "catchupLimit": self.catchup_limit}


def cron_problem(expression: str, *, seconds: bool = False) -> str | None:
    """Why ``expression`` is not a usable cron expression, or ``None`` if it is.

    Five fields (minute hour day-of-month month day-of-week); with ``seconds`` (tests only,
    ``TOREN_SCHEDULE_SECONDS=1``) also six, the first being the second.
    """
    if not isinstance(expression, str):
        return "expected a string of five fields"
    fields = expression.split()
    allowed = (5, 6) if seconds else (5,)
    if len(fields) not in allowed:
        return (f"expected five fields (minute hour day-of-month month day-of-week), got "
                f"{len(fields)}")
    try:
        next(CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC)))
    except CronSimError as exc:
        return str(exc)
    except (StopIteration, ValueError, OverflowError) as exc:  # e.g. 30 2 31 2 * never matches
        return f"it never matches ({exc or type(exc).__name__})"
    return None


def next_slot(cron: str, timezone: str, after: datetime) -> datetime:
    """The first slot strictly after ``after`` (aware), in UTC.

    Slots are wall-clock times in ``timezone``. Across a DST change (cronsim follows Debian
    cron): an expression with a fixed minute and hour whose time falls in the hour skipped
    in spring fires once, at the first valid time after it (02:30 becomes 03:00); one whose
    time falls in the hour repeated in autumn fires once, at the first occurrence. An
    expression with ``*`` in the minute or hour field follows real time: the skipped hour has
    no slots, the repeated hour has its slots twice.
    """
    zone = ZoneInfo(timezone)
    local = after.astimezone(zone)
    return next(CronSim(cron, local)).astimezone(UTC)


@dataclass(frozen=True)
class DueSlots:
    """What a claim of a due schedule does: the slots to fire now (oldest first, each with
    its trigger), how many missed slots it drops, and the schedule's next fire time."""

    fire: list[tuple[datetime, Trigger]] = field(default_factory=list)
    skipped: int = 0
    next_fire_at: datetime | None = None


def due_slots(cron: str, timezone: str, next_fire_at: datetime, now: datetime, *,
              missed: str = "skip", catchup_limit: int = DEFAULT_CATCHUP_LIMIT,
              walk_limit: int = 1000) -> DueSlots:
    """The slots from ``next_fire_at`` up to ``now`` (the database clock) and what to do with
    each: on time (at most ``ON_TIME_S`` late) they fire; missed ones fire only under
    ``catchup``, the most recent ``catchup_limit`` of them.

    Missed slots are walked one by one up to ``walk_limit`` (a seconds schedule after a long
    outage would have millions); past it the walk jumps to the on-time window, the catchup
    slots are found walking back from it, and ``skipped`` counts only the slots walked.
    """
    late = now - timedelta(seconds=ON_TIME_S)
    recent: deque[datetime] = deque(maxlen=max(catchup_limit, 0) or None)
    overdue = 0
    slot = next_fire_at
    while slot < late:
        overdue += 1
        recent.append(slot)
        if overdue >= walk_limit:
            slot = next_slot(cron, timezone, late - timedelta(seconds=1))
            recent = deque(_slots_before(cron, timezone, slot, catchup_limit))
            break
        slot = next_slot(cron, timezone, slot)
    kept = list(recent)[-catchup_limit:] if missed == "catchup" and catchup_limit > 0 else []
    fire: list[tuple[datetime, Trigger]] = [(s, "catchup") for s in kept]
    while slot <= now:
        fire.append((slot, "cron"))
        slot = next_slot(cron, timezone, slot)
    return DueSlots(fire=fire, skipped=overdue - len(kept), next_fire_at=slot)


def _slots_before(cron: str, timezone: str, before: datetime, count: int) -> list[datetime]:
    """The ``count`` slots just before ``before``, oldest first."""
    if count <= 0:
        return []
    found = []
    walker = CronSim(cron, before.astimezone(ZoneInfo(timezone)), reverse=True)
    for slot in walker:
        found.append(slot.astimezone(UTC))
        if len(found) == count:
            break
    return found[::-1]


@dataclass(frozen=True)
class ScheduleRecord:
    """A schedule as the database holds it: its agent.yaml entry, its state and recent fires.

    ``state`` is ``active``, ``paused`` (by ``toren schedules pause``) or ``removed`` (no
    longer in agent.yaml: it does not fire; it comes back if the entry does).
    """

    agent: str
    name: str
    cron: str
    timezone: str
    input: Any
    missed: str
    catchup_limit: int
    next_fire_at: datetime | None
    last_fired_at: datetime | None
    last_slot_at: datetime | None
    paused: bool
    present: bool
    skipped_slots: int = 0
    fires: list[dict[str, Any]] = field(default_factory=list)

    @property
    def state(self) -> str:
        if not self.present:
            return "removed"
        return "paused" if self.paused else "active"

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent, "name": self.name, "cron": self.cron,
            "timezone": self.timezone, "input": self.input, "missed": self.missed,
            "catchupLimit": self.catchup_limit, "state": self.state,
            "next_fire_at": _iso(self.next_fire_at) if self.state == "active" else None,
            "last_fired_at": _iso(self.last_fired_at), "last_slot_at": _iso(self.last_slot_at),
            "skipped_slots": self.skipped_slots, "fires": self.fires,
        }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


__all__ = ["DEFAULT_CATCHUP_LIMIT", "MISSED_POLICIES", "ON_TIME_S", "DueSlots", "ScheduleRecord",
           "ScheduleSpec", "cron_problem", "due_slots", "next_slot"]
