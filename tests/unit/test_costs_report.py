"""The costs report's window (``costs_window``) and its shape (``costs_report``): pure, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from toren.core.costs import (
    InvalidCostsQuery,
    InvalidCostsWindow,
    ModelCosts,
    bucket_start,
    costs_report,
    costs_window,
)

NOW = datetime(2026, 12, 3, 15, 30, tzinfo=UTC)  # a Thursday


def test_by_default_the_window_is_the_last_30_days_or_12_weeks_up_to_today() -> None:
    assert costs_window(None, None, None, NOW) == (
        "day", datetime(2026, 11, 4, tzinfo=UTC), datetime(2026, 12, 4, tzinfo=UTC))
    period, since, until = costs_window("week", None, None, NOW)
    assert (period, since, until) == ("week", datetime(2026, 9, 14, tzinfo=UTC),
                                      datetime(2026, 12, 7, tzinfo=UTC))
    assert since.weekday() == until.weekday() == 0


def test_the_ends_are_widened_to_whole_periods_and_read_as_utc() -> None:
    assert costs_window("day", "2026-12-01T10:00:00+02:00", "2026-12-02T00:00:00Z") == (
        "day", datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC))
    assert costs_window("week", "2026-12-03", "2026-12-03T01:00") == (
        "week", datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 12, 7, tzinfo=UTC))
    assert costs_window("day", "2026-12-01t10:00:00z", "2026-12-01T23:59:60Z")[1:] == (
        datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC))
    assert bucket_start(datetime(2026, 12, 6, 23, 59, tzinfo=UTC), "week") == datetime(
        2026, 11, 30, tzinfo=UTC)


@pytest.mark.parametrize(("period", "since", "until", "error"), [
    ("month", None, None, InvalidCostsQuery),
    ("", None, None, InvalidCostsQuery),
    ("day", "yesterday", None, InvalidCostsQuery),
    ("day", "2026-13-01", None, InvalidCostsQuery),
    ("day", "2026-12-01\x00", None, InvalidCostsQuery),
    ("day", "2026-12-01'; DROP TABLE runs; --", None, InvalidCostsQuery),
    ("day", "9" * 1000, None, InvalidCostsQuery),
    ("day", " 2026-12-01", None, InvalidCostsQuery),
    ("day", "2026-12-02", "2026-12-01", InvalidCostsWindow),
    ("day", "2025-01-01", "2026-12-01", InvalidCostsWindow),
    ("day", "2025-11-30", "2026-12-01", InvalidCostsWindow),  # 367 days
    ("week", "2024-01-01", "2026-01-01", InvalidCostsWindow),
    ("day", "9999-12-31", "9999-12-31T12:00", InvalidCostsWindow),
    ("day", None, "0001-01-01", InvalidCostsWindow),
])
def test_a_malformed_parameter_or_window_is_refused(period: str, since: str | None,
                                                    until: str | None, error: type) -> None:
    with pytest.raises(error) as raised:
        costs_window(period, since, until, NOW)
    assert raised.value.http_status == 400
    assert "\x00" not in str(raised.value)


def test_an_until_that_is_a_date_includes_that_day() -> None:
    assert costs_window("day", "2026-12-01", "2026-12-01", NOW)[1:] == (
        datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC))
    assert costs_window("day", "2026-12-01", "2026-12-02T00:00:00Z", NOW)[2] == datetime(
        2026, 12, 2, tzinfo=UTC)


def test_a_year_by_day_and_53_weeks_by_week_are_allowed() -> None:
    assert costs_window("day", "2025-12-01", "2026-11-30", NOW)[1:] == (
        datetime(2025, 12, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    _, since, until = costs_window("week", "2025-12-01", "2026-12-01", NOW)
    assert until - since == timedelta(weeks=53)


def test_the_report_lists_every_period_and_adds_up_per_agent_model_and_overall() -> None:
    day1, day2 = datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC)
    rows = [ModelCosts("crew", "m/big", day1, 2, 0.75, 0, 300, 30),
            ModelCosts("crew", "m/free", day1, 1, 0.0, 1, 100, 10),
            ModelCosts("desk", "m/big", day2, 1, 0.1 + 0.2, 0, 10, 1)]
    report = costs_report(rows, period="day", since=day1, until=day1 + timedelta(days=3),
                          agents=["crew", "desk", "idle"],
                          budgets=[{"agent": "crew", "daily_budget_usd": 5.0}])
    assert (report["period"], report["since"], report["until"]) == (
        "day", "2026-12-01T00:00:00Z", "2026-12-04T00:00:00Z")
    assert [(b["start"], b["calls"], b["cost_usd"]) for b in report["buckets"]] == [
        ("2026-12-01T00:00:00Z", 3, 0.75), ("2026-12-02T00:00:00Z", 1, 0.3),
        ("2026-12-03T00:00:00Z", 0, 0.0)]
    assert report["buckets"][0]["costs"][1] == {
        "agent": "crew", "model": "m/free", "calls": 1, "cost_usd": 0.0,
        "unknown_cost_calls": 1, "input_tokens": 100, "output_tokens": 10}
    assert [(a["agent"], a["calls"], [m["model"] for m in a["models"]])
            for a in report["agents"]] == [("crew", 3, ["m/big", "m/free"]),
                                           ("desk", 1, ["m/big"]), ("idle", 0, [])]
    assert report["totals"] == {"calls": 4, "cost_usd": 1.05, "unknown_cost_calls": 1,
                                "input_tokens": 410, "output_tokens": 41}
    assert report["budgets"] == [{"agent": "crew", "daily_budget_usd": 5.0}]
