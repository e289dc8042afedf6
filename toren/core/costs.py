"""What the agents' model calls cost per UTC day or week, per agent and model (``GET /costs``,
the console's Costs page): the window's parsing and the report built from the store's rows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal

from toren.core.errors import TorenError
from toren.core.moments import DATE_ONLY, iso_moment

#: How a window is cut: UTC days, or ISO weeks (from Monday 00:00 UTC).
Period = Literal["day", "week"]
PERIODS: tuple[Period, ...] = ("day", "week")
#: The longest window a report covers (a year, leap day included).
MAX_WINDOW_DAYS = 366
#: The window when none is given: the last 30 days, or the last 12 weeks (today's included).
DEFAULT_BUCKETS: Mapping[Period, int] = {"day": 30, "week": 12}
_STEP: Mapping[Period, timedelta] = {"day": timedelta(days=1), "week": timedelta(weeks=1)}
#: What a figure row adds up (``ModelCosts``' counts), in the JSON's order.
FIGURES = ("calls", "cost_usd", "unknown_cost_calls", "input_tokens", "output_tokens")


class InvalidCostsQuery(TorenError):
    """A parameter of the costs report is malformed."""

    code = "invalid_costs_query"
    http_status = 400


class InvalidCostsWindow(InvalidCostsQuery):
    """The costs report's ``since`` and ``until`` are each well formed, but not together (or
    reach past the years 1 to 9999 once widened to whole periods)."""

    code = "invalid_costs_window"


@dataclass(frozen=True)
class ModelCosts:
    """The model calls of one agent on one model in one period (``RunReader.costs``): how many,
    their cost in USD (of those with a known price), how many had no known price, and their
    input and output tokens. A fork's copied calls are not among them (its source paid)."""

    agent: str
    model: str
    bucket: datetime
    calls: int
    cost_usd: float
    unknown_cost_calls: int
    input_tokens: int
    output_tokens: int


def bucket_start(moment: datetime, period: Period) -> datetime:
    """The start (UTC) of the day or ISO week ``moment`` falls in."""
    day = moment.astimezone(UTC).date()
    if period == "week":
        day -= timedelta(days=day.weekday())
    return datetime.combine(day, time(), UTC)


def _moment(text: str, name: str) -> datetime:
    if len(text) > 40 or not text.isprintable() or text != text.strip():
        raise InvalidCostsQuery(f"{name} must be an ISO 8601 date or time (such as 2026-01-31 "
                                "or 2026-01-31T12:00:00Z), of at most 40 characters")
    try:
        return iso_moment(text)
    except ValueError:
        raise InvalidCostsQuery(f"{name} {text!r} is not an ISO 8601 date or time (such as "
                                "2026-01-31 or 2026-01-31T12:00:00Z)") from None


def costs_window(period: str | None, since: str | None, until: str | None,
                 now: datetime | None = None) -> tuple[Period, datetime, datetime]:
    """The period and the window ``[since, until)`` of a report, from the query's text: both
    ends moved out to whole periods (``since`` to the start of its period, ``until`` to the
    end of the one it falls in; an ``until`` that is a date, not a time, includes that day,
    as a person picking "from ... to ..." means it); by default the last ``DEFAULT_BUCKETS``
    periods up to the one holding ``until`` (or now). ``InvalidCostsQuery`` for a period
    other than ``day`` or ``week`` or a malformed date; ``InvalidCostsWindow`` for ``until``
    not after ``since`` or more than ``MAX_WINDOW_DAYS`` between them.
    """
    chosen = period if period is not None else "day"
    if chosen not in PERIODS:
        raise InvalidCostsQuery(f"period must be day or week, not {chosen[:40]!r}")
    assert chosen in ("day", "week")
    step = _STEP[chosen]
    end = _moment(until, "until") if until is not None else (now or datetime.now(UTC))
    try:
        if until is not None and DATE_ONLY.match(until):
            end += timedelta(days=1)
        last = bucket_start(end, chosen)
        end_at = last if end == last else last + step
        start_at = (bucket_start(_moment(since, "since"), chosen) if since is not None
                    else end_at - step * DEFAULT_BUCKETS[chosen])
    except OverflowError:  # 9999-12-31 and the like: past the end of time
        raise InvalidCostsWindow("since and until must be dates between the years 1 and "
                                 "9999") from None
    if end_at <= start_at:
        raise InvalidCostsWindow("until must be after since")
    # a year: 366 days, or the 53 weeks that hold it
    longest = timedelta(days=MAX_WINDOW_DAYS) if chosen == "day" else timedelta(weeks=53)
    if end_at - start_at > longest:
        raise InvalidCostsWindow(f"the window is {(end_at - start_at).days} days long; a report "
                                 f"covers at most {longest.days} days ({MAX_WINDOW_DAYS} by day, "
                                 "53 weeks by week)")
    return chosen, start_at, end_at


def _zero() -> dict[str, Any]:
    return {"calls": 0, "cost_usd": 0.0, "unknown_cost_calls": 0, "input_tokens": 0,
            "output_tokens": 0}


def _add(into: dict[str, Any], row: ModelCosts) -> None:
    for name in FIGURES:
        into[name] += getattr(row, name)


def _rounded(figures: dict[str, Any]) -> dict[str, Any]:
    return figures | {"cost_usd": round(figures["cost_usd"], 10)}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def costs_report(rows: Iterable[ModelCosts], *, period: Period, since: datetime,
                 until: datetime, agents: Sequence[str],
                 budgets: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The JSON of ``GET /costs``: every period of the window (empty ones too) with its
    figures per agent and model, each agent's totals per model, the overall totals, and the
    agents' ``budgets`` as given."""
    by_bucket: dict[datetime, dict[str, Any]] = {}
    moment = since
    while moment < until:
        by_bucket[moment] = _zero() | {"costs": []}
        moment += _STEP[period]
    by_agent: dict[str, dict[str, Any]] = {name: _zero() | {"models": {}} for name in agents}
    totals = _zero()
    for row in sorted(rows, key=lambda r: (r.bucket, r.agent, r.model)):
        bucket = by_bucket.get(bucket_start(row.bucket, period))
        if bucket is None:
            continue  # outside the window: a store's rounding, not the caller's business
        figures = {name: getattr(row, name) for name in FIGURES}
        bucket["costs"].append({"agent": row.agent, "model": row.model} | _rounded(figures))
        _add(bucket, row)
        agent = by_agent.setdefault(row.agent, _zero() | {"models": {}})
        _add(agent, row)
        _add(agent["models"].setdefault(row.model, _zero()), row)
        _add(totals, row)
    return {
        "period": period, "since": _iso(since), "until": _iso(until),
        "buckets": [{"start": _iso(start)} | _rounded(figures)
                    for start, figures in by_bucket.items()],
        "agents": [{"agent": name} | _rounded({k: v for k, v in figures.items()
                                               if k != "models"})
                   | {"models": [{"model": model} | _rounded(model_figures)
                                 for model, model_figures in sorted(figures["models"].items())]}
                   for name, figures in sorted(by_agent.items())],
        "totals": _rounded(totals),
        "budgets": [dict(budget) for budget in budgets],
    }


def today_utc(now: datetime | None = None) -> date:
    """The UTC day the daily budgets count (``limits.dailyBudgetUsd``)."""
    return (now or datetime.now(UTC)).astimezone(UTC).date()
