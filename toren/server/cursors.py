"""Opaque cursors: where a reader of a run's events, or of a list of runs, got to."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from toren.errors import TorenError


class InvalidCursor(TorenError):
    """The cursor is not one Toren produced."""

    code = "invalid_cursor"


def _encode(value: Any) -> str:
    raw = json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(token: str) -> Any:
    try:
        padded = token + "=" * (-len(token) % 4)
        return json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):  # deep: [[[[...
        raise InvalidCursor(f"cursor {token[:40]!r} is not valid: pass back a cursor (or SSE "
                            "event id) that Toren returned") from None


def encode_event_cursor(position: Mapping[str, int]) -> str:
    """A run's event position: the last sequence number seen in each stream.

    Events of different streams of one run are appended by different workers, so no single
    number orders them by commit; a per-stream position resumes exactly, missing nothing and
    repeating nothing.
    """
    return _encode(dict(position))


def decode_event_cursor(token: str | None) -> dict[str, int]:
    if not token:
        return {}
    value = _decode(token)
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in value.items()):
        raise InvalidCursor("the event cursor is malformed: pass back a cursor (or SSE event "
                            "id) that Toren returned")
    return value


def encode_page_cursor(created_at: datetime, run_id: str) -> str:
    return _encode([created_at.isoformat(), run_id])


def decode_page_cursor(token: str | None) -> tuple[datetime, str] | None:
    if not token:
        return None
    value = _decode(token)
    try:
        created, run_id = value
        return datetime.fromisoformat(created), str(run_id)
    except (TypeError, ValueError):
        raise InvalidCursor("the page cursor is malformed: pass back the next_cursor that "
                            "Toren returned") from None


def encode_offset_cursor(offset: int) -> str:
    """Where the next page of runs in an order other than newest first starts: after
    ``offset`` runs (``GET /runs?sort=``)."""
    return _encode({"runs_offset": offset})


def decode_runs_cursor(token: str | None) -> tuple[datetime, str] | int | None:
    """A ``GET /runs`` cursor: the ``(created_at, id)`` of a newest-first page's last run, or
    the offset of a page in another order (``encode_offset_cursor``)."""
    if not token:
        return None
    value = _decode(token)
    if isinstance(value, dict):
        offset = value.get("runs_offset")
        if isinstance(offset, int) and not isinstance(offset, bool) and 0 < offset < 2**31:
            return offset
        raise InvalidCursor("the page cursor is malformed: pass back the next_cursor that "
                            "Toren returned")
    return decode_page_cursor(token)


def encode_audit_cursor(before: int) -> str:
    """Where the next page of the audit trail starts: entries older than ``before``."""
    return _encode({"audit_before": before})


def decode_audit_cursor(token: str | None) -> int | None:
    if not token:
        return None
    value = _decode(token)
    before = value.get("audit_before") if isinstance(value, dict) else None
    if not isinstance(before, int) or isinstance(before, bool) or not 0 < before < 2**63:
        raise InvalidCursor("the audit cursor is malformed: pass back the next_cursor that "
                            "Toren returned")
    return before
