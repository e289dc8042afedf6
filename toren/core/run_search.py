"""The search parameters of ``GET /runs`` and ``toren jobs list``: words to find (``q``), an
agent version (``version``), a creation date range (``since``, ``until``) and an order
(``sort``), checked into a ``RunSearch``, or an ``InvalidRunSearch`` that says what to send
instead (the API's 400, the CLI's error)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from toren.core.errors import TorenError
from toren.core.moments import DATE_ONLY, iso_moment
from toren.core.runs import RUN_SORTS, RunSearch

#: An agent version's hash (or a prefix) or its ``version:`` from agent.yaml.
VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
MAX_QUERY = 500


class InvalidRunSearch(TorenError):
    """A search parameter Toren cannot use; ``code`` names it (``invalid_query``,
    ``invalid_version``, ``invalid_since``, ``invalid_until``, ``invalid_range``,
    ``invalid_sort``)."""

    http_status = 400

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_run_search(query: Mapping[str, str], **filters: Any) -> RunSearch:
    """The ``RunSearch`` of ``query`` (``GET /runs``' query string, or the CLI's options as
    strings), with ``filters`` already checked (``agents``, ``status``, ``kind``,
    ``schedule``, ``limit``, and ``before`` or ``offset`` from the cursor)."""
    text = query.get("q")
    if text is not None:
        if "\x00" in text or len(text) > MAX_QUERY:
            raise InvalidRunSearch("invalid_query", f"q must be words to find, at most {MAX_QUERY} "
                                             "characters (no NUL)")
        text = text.strip() or None
    version = query.get("version")
    if version is not None and not VERSION.match(version):
        raise InvalidRunSearch("invalid_version", "version must be an agent version's hash (or its "
                                           "first 4 characters or more) or its version: from "
                                           "agent.yaml: letters, digits, '.', '_', '+', '-'")
    since, until = _moment(query, "since"), _moment(query, "until", end=True)
    if since and until and since >= until:
        raise InvalidRunSearch("invalid_range", "since must be before until")
    sort = query.get("sort", "-created")
    descending = sort.startswith("-")
    if sort.removeprefix("-") not in RUN_SORTS:
        raise InvalidRunSearch("invalid_sort", "sort must be one of "
                        + ", ".join(f"{name}, -{name}" for name in RUN_SORTS)
                        + " (a leading - for largest or newest first)")
    return RunSearch(text=text, version=version, since=since, until=until,
                     sort=sort.removeprefix("-"), descending=descending, **filters)


def _moment(query: Mapping[str, str], name: str, *, end: bool = False) -> datetime | None:
    """An ISO 8601 date or date-time parameter, UTC when it names no offset. A bare date as
    ``until`` means the end of that day (``until=2026-12-04`` includes the 4th)."""
    value = query.get(name)
    if value is None:
        return None
    try:
        moment = iso_moment(value)
        if end and DATE_ONLY.match(value):
            moment += timedelta(days=1)
    except OverflowError:  # the end of 9999-12-31: the end of time
        return datetime.max.replace(tzinfo=UTC)
    except ValueError:
        raise InvalidRunSearch("invalid_" + name, f"{name} must be an ISO 8601 date "
                               "(2026-12-04) or date and time (2026-12-04T09:30:00Z)") from None
    return moment

