"""The audit trail's values (``toren.core.audit``): what an entry may hold is bounded whatever
a surface passes, and the filters' moments and names are checked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from toren.core.audit import (
    MAX_DETAILS,
    MAX_TEXT,
    AuditEntry,
    AuditQuery,
    InvalidAuditQuery,
    clean_details,
    parse_moment,
)


def test_details_keep_plain_values_and_never_a_secret() -> None:
    kept = clean_details({"reason": "x" * 5000, "api_key": "toren_abc", "Authorization": "B",
                          "webhook_secret": "s", "arguments": {"card": "4111"}, "n": 3,
                          "ratio": float("nan"), "tags": list(range(50)), "ok": True})
    assert set(kept) == {"reason", "n", "ratio", "tags", "ok"}
    assert len(kept["reason"]) == MAX_TEXT and kept["reason"].endswith("…")
    assert kept["ratio"] is None and len(kept["tags"]) == MAX_DETAILS
    assert len(clean_details({f"k{i}": i for i in range(100)})) == MAX_DETAILS


def test_an_entry_is_bounded_before_it_is_stored() -> None:
    entry = AuditEntry(actor_kind="key", actor_id="k\x00\x1b[31m", action="run.start",
                       source="http", user_agent="U" * 10_000, details={"token": "t"})
    bounded = entry.bounded()
    assert bounded.actor_id == "k  [31m"  # NUL and escape made spaces
    assert bounded.user_agent is not None and len(bounded.user_agent) == MAX_TEXT
    assert bounded.details == {}


def test_moments_are_ages_or_iso_times() -> None:
    now = datetime(2026, 5, 1, 12, tzinfo=UTC)
    assert parse_moment("1h", "since", now) == now - timedelta(hours=1)
    assert parse_moment("7d", "since", now) == now - timedelta(days=7)
    # older than datetime can say (schemathesis found the 500): the start of time
    assert parse_moment("9999999w", "until", now) == datetime.min.replace(tzinfo=UTC)
    assert parse_moment("2026-01-31", "since") == datetime(2026, 1, 31, tzinfo=UTC)
    assert parse_moment("2026-01-31T12:00:00+02:00", "until").utcoffset() == timedelta(hours=2)
    for bad in ("yesterday", "1 hour", "-1h", "never", "2026-02-30", ""):
        with pytest.raises(InvalidAuditQuery, match="since"):
            parse_moment(bad, "since")


@pytest.mark.parametrize(("query", "word"), [
    (AuditQuery(limit=0), "limit"), (AuditQuery(limit=501), "limit"),
    (AuditQuery(action="Run.Start"), "action"), (AuditQuery(action="run..x"), "action"),
    (AuditQuery(actor=""), "actor"), (AuditQuery(run_id="r\n"), "run_id"),
    (AuditQuery(action="run.**"), "action"), (AuditQuery(action="run" * 21), "action"),
])
def test_a_malformed_query_names_its_filter(query: AuditQuery, word: str) -> None:
    with pytest.raises(InvalidAuditQuery, match=word):
        query.checked()


def test_an_action_prefix_may_end_with_a_dot_or_star() -> None:
    assert AuditQuery(action="approval.").checked().action == "approval"
    assert AuditQuery(action="approval.*").checked().action == "approval"
