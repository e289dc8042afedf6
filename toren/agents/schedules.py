"""``schedules:`` of agent.yaml: each entry checked (cron, time zone, unique name) at load time."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from toren.agents.yamlfile import LocatedYaml
from toren.core.decisions import unstorable
from toren.core.schedules import DEFAULT_CATCHUP_LIMIT, ScheduleSpec, cron_problem
from toren.errors import AgentDefinitionError

#: Tests only: ``1`` also accepts six-field cron expressions whose first field is the second,
#: so a test can watch a schedule fire every few seconds. Never set it in production.
SECONDS_ENV = "TOREN_SCHEDULE_SECONDS"


def seconds_allowed(env: Mapping[str, str] | None = None) -> bool:
    """Whether six-field (seconds) cron expressions are accepted (``TOREN_SCHEDULE_SECONDS``)."""
    return (os.environ if env is None else env).get(SECONDS_ENV, "") not in ("", "0")


def load_schedules(located: LocatedYaml, path: str) -> tuple[ScheduleSpec, ...]:
    """The ``schedules:`` entries of a validated agent.yaml; ``AgentDefinitionError`` with the
    file and the line of the first bad cron expression, time zone or repeated name."""
    entries: list[dict[str, Any]] = located.data.get("schedules") or []
    seconds = seconds_allowed()
    found: dict[str, ScheduleSpec] = {}
    for index, entry in enumerate(entries):
        name = entry["name"]
        if name in found:
            raise AgentDefinitionError(
                f"schedules: two schedules are named {name!r}; give each a distinct name",
                path=path, line=located.line_of(("schedules", index, "name")))
        cron = " ".join(entry["cron"].split())
        problem = cron_problem(cron, seconds=seconds)
        if problem is not None:
            raise AgentDefinitionError(
                f"schedules.{index}.cron: {cron!r} is not a valid cron expression: {problem}. "
                "Write five fields, minute hour day-of-month month day-of-week, e.g. "
                "'0 7 * * *' for every day at 07:00",
                path=path, line=located.line_of(("schedules", index, "cron")))
        timezone = entry.get("timezone", "UTC")
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise AgentDefinitionError(
                f"schedules.{index}.timezone: {timezone!r} is not an IANA time zone; write "
                "one such as UTC, Europe/Paris or America/New_York",
                path=path, line=located.line_of(("schedules", index, "timezone"))) from None
        problem = unstorable(entry.get("input"))
        if problem is not None:
            raise AgentDefinitionError(
                f"schedules.{index}.input cannot be stored in the run log: {problem}",
                path=path, line=located.line_of(("schedules", index, "input")))
        found[name] = ScheduleSpec(
            name=name, cron=cron, timezone=timezone, input=entry.get("input"),
            missed=entry.get("missed", "skip"),
            catchup_limit=entry.get("catchupLimit", DEFAULT_CATCHUP_LIMIT))
    return tuple(found.values())
