"""Schedules, pure parts: cron slots across DST changes, the missed-slots policy, and
agent.yaml's schedules: refused with file, line and reason when wrong."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from toren.agents import load_agent
from toren.core.schedules import ON_TIME_S, cron_problem, due_slots, next_slot
from toren.errors import AgentDefinitionError

NEW_YORK = ZoneInfo("America/New_York")


def slots(cron: str, timezone: str, after: datetime, count: int) -> list[datetime]:
    found = []
    for _ in range(count):
        after = next_slot(cron, timezone, after)
        found.append(after)
    return found


def local(moments: list[datetime], zone: ZoneInfo = NEW_YORK) -> list[str]:
    return [m.astimezone(zone).strftime("%m-%d %H:%M %Z") for m in moments]


def test_slots_are_wall_clock_times_in_the_time_zone() -> None:
    found = slots("0 7 * * *", "Europe/Paris", datetime(2026, 6, 1, tzinfo=UTC), 2)
    assert found == [datetime(2026, 6, 1, 5, tzinfo=UTC), datetime(2026, 6, 2, 5, tzinfo=UTC)]


def test_a_fixed_time_in_the_hour_skipped_in_spring_fires_once_just_after_it() -> None:
    # 2026-03-08: New York's clocks jump from 02:00 to 03:00; 02:30 does not exist that day
    found = slots("30 2 * * *", "America/New_York", datetime(2026, 3, 7, 12, tzinfo=UTC), 3)
    assert local(found) == ["03-08 03:00 EDT", "03-09 02:30 EDT", "03-10 02:30 EDT"]


def test_a_fixed_time_in_the_hour_repeated_in_autumn_fires_once() -> None:
    # 2026-11-01: 01:00-02:00 happens twice in New York; 01:30 fires at its first occurrence
    found = slots("30 1 * * *", "America/New_York", datetime(2026, 10, 31, 12, tzinfo=UTC), 3)
    assert local(found) == ["11-01 01:30 EDT", "11-02 01:30 EST", "11-03 01:30 EST"]
    assert found[1] - found[0] == timedelta(hours=25)


def test_an_hourly_schedule_follows_real_time_across_both_changes() -> None:
    autumn = slots("30 * * * *", "America/New_York", datetime(2026, 11, 1, 4, tzinfo=UTC), 4)
    # the repeated hour has its slot twice, an hour apart in real time
    assert local(autumn) == ["11-01 00:30 EDT", "11-01 01:30 EDT", "11-01 01:30 EST",
                             "11-01 02:30 EST"]
    spring = slots("30 * * * *", "America/New_York", datetime(2026, 3, 8, 6, tzinfo=UTC), 3)
    # the skipped hour has none
    assert local(spring) == ["03-08 01:30 EST", "03-08 03:30 EDT", "03-08 04:30 EDT"]
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(spring))


@pytest.mark.parametrize(("expression", "reason"), [
    ("* * *", "expected five fields"),
    ("61 * * * *", "Bad minute"),
    ("0 25 * * *", "Bad hour"),
    ("0 0 31 2 *", "Bad day-of-month"),
    ("0 0 * 13 *", "Bad month"),
    ("*/0 * * * *", "Bad minute"),
    ("0 0 * * * *", "expected five fields"),
])
def test_malformed_cron_is_refused_with_the_reason(expression: str, reason: str) -> None:
    problem = cron_problem(expression)
    assert problem is not None and reason in problem


def test_six_fields_only_in_seconds_mode() -> None:
    assert cron_problem("*/5 * * * * *", seconds=True) is None
    assert cron_problem("*/5 * * * * *") is not None


def test_on_time_slots_fire_and_missed_ones_follow_the_policy() -> None:
    now = datetime(2026, 5, 1, 12, 0, 30, tzinfo=UTC)
    on_time = due_slots("* * * * *", "UTC", datetime(2026, 5, 1, 12, tzinfo=UTC), now)
    assert on_time.fire == [(datetime(2026, 5, 1, 12, tzinfo=UTC), "cron")]
    assert on_time.next_fire_at == datetime(2026, 5, 1, 12, 1, tzinfo=UTC)
    down_since = now - timedelta(hours=2)
    skipped = due_slots("0,30 * * * *", "UTC", down_since.replace(second=0), now)
    assert [t for _s, t in skipped.fire] == ["cron"] and skipped.skipped == 4
    caught = due_slots("0,30 * * * *", "UTC", down_since.replace(second=0), now,
                       missed="catchup", catchup_limit=2)
    assert [s.strftime("%H:%M") for s, t in caught.fire if t == "catchup"] == ["11:00", "11:30"]
    assert caught.skipped == 2
    assert ON_TIME_S == 60


def test_a_long_outage_of_a_seconds_schedule_is_not_walked_slot_by_slot() -> None:
    now = datetime(2026, 5, 1, 12, tzinfo=UTC)
    due = due_slots("* * * * * *", "UTC", now - timedelta(days=30), now, missed="catchup",
                    catchup_limit=2, walk_limit=100)
    catchup = [s for s, t in due.fire if t == "catchup"]
    assert catchup == [now - timedelta(seconds=62), now - timedelta(seconds=61)]
    assert due.next_fire_at == now + timedelta(seconds=1)


def schedule_yaml(*entries: str) -> str:
    return "model: toren/scripted\nschedules:\n" + "".join(entries)


def test_agent_yaml_schedules_load(make_agent_dir: Callable[..., Path]) -> None:
    directory = make_agent_dir("crew", agent_yaml=schedule_yaml(
        "  - name: daily\n    cron: '0  7 * * *'\n    timezone: Europe/Paris\n"
        "    input: {topic: news}\n    missed: catchup\n    catchupLimit: 2\n"))
    [daily] = load_agent(directory).schedules
    assert (daily.name, daily.cron, daily.timezone, daily.input, daily.missed,
            daily.catchup_limit) == ("daily", "0 7 * * *", "Europe/Paris", {"topic": "news"},
                                     "catchup", 2)
    assert load_agent(directory).to_json()["schedules"][0]["catchupLimit"] == 2


@pytest.mark.parametrize(("entries", "line", "message"), [
    ("  - name: daily\n    cron: '0 7 * *'\n", 4, "not a valid cron expression: expected five"),
    ("  - name: daily\n    cron: '0 7 * * *'\n  - name: late\n    cron: '0 99 * * *'\n", 6,
     "schedules.1.cron: '0 99 * * *' is not a valid cron expression: Bad hour"),
    ("  - name: daily\n    cron: '0 7 * * *'\n    timezone: Mars/Olympus\n", 5,
     "'Mars/Olympus' is not an IANA time zone"),
    ("  - name: daily\n    cron: '0 7 * * *'\n  - name: daily\n    cron: '0 8 * * *'\n", 5,
     "two schedules are named 'daily'"),
    ("  - name: daily\n    cron: '0 7 * * *'\n    missed: later\n", 5, "missed"),
    ("  - name: daily\n    crom: '0 7 * * *'\n", 4, "did you mean 'cron'"),
    ("  - name: Daily!\n    cron: '0 7 * * *'\n", 3, "name"),
    ("  - name: daily\n    cron: '0 7 * * *'\n    input: \"a\\0b\"\n", 5,
     "schedules.0.input cannot be stored in the run log"),
])
def test_bad_schedules_are_refused_with_file_line_and_reason(
        make_agent_dir: Callable[..., Path], entries: str, line: int, message: str) -> None:
    directory = make_agent_dir("crew", agent_yaml=schedule_yaml(entries))
    with pytest.raises(AgentDefinitionError) as caught:
        load_agent(directory)
    assert caught.value.path == str(directory / "agent.yaml")
    assert caught.value.line == line, caught.value.message
    assert message in caught.value.message
