"""Moments people and programs write: ISO 8601 dates and date-times, read one way everywhere
(``GET /runs``' and ``GET /costs``' ``since``/``until``, the audit trail's, the CLI's)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

#: A bare date (``2026-12-04``): a whole day, which an ``until`` includes.
DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_LEAP_SECOND = re.compile(r":60(?=[.Z+-]|$)")


def iso_moment(text: str) -> datetime:
    """``text`` as an aware datetime: an ISO 8601 date (its midnight) or date-time, UTC when
    it names no offset; RFC 3339's lowercase ``t`` and ``z`` are taken, and a leap second is
    read as the second before it. ``ValueError`` for anything else (an impossible date)."""
    moment = datetime.fromisoformat(_LEAP_SECOND.sub(":59", text.upper()))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
