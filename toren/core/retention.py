"""Retention ages and the archive format of a finished run (gzip-compressed JSON lines).

One archive object holds one whole run: its first line is the run's row (``"line": "run"``),
then every event of every stream in the order the run log returns them (``"line": "event"``),
then the run's tool manifests (``"line": "tool_manifest"``), and a last line that counts them
(``"line": "end"``), so a truncated object is told from a complete one. Pure: no I/O.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from toren.core.events import Event
from toren.core.runs import RunRecord

#: The format's version, written in the run line; a reader refuses versions it does not know.
ARCHIVE_FORMAT = 1
_AGE = re.compile(r"^([1-9][0-9]{0,6})([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: ``retention: never`` (or ``TOREN_RETENTION=never``): the agent's runs are never archived.
NEVER = "never"


class ArchiveFormatError(ValueError):
    """An archive object that is not a complete run in a known format."""


def parse_age(text: str) -> float | None:
    """Seconds in an age such as ``30d``, ``12h``, ``2w`` (units s, m, h, d, w); ``None`` for
    ``never``. ``ValueError`` naming the accepted forms otherwise."""
    raw = text.strip().lower()
    if raw == NEVER:
        return None
    match = _AGE.match(raw)
    if match is None:
        raise ValueError(f"{text!r} is not an age: write a whole number and a unit (s, m, h, "
                         "d or w), such as 30d or 12h, or never")
    return float(int(match.group(1)) * _UNIT_S[match.group(2)])


def run_row(record: RunRecord) -> dict[str, Any]:
    """The run's row as JSON: every column, as the run log stores it."""
    return {"id": record.id, "agent": record.agent, "kind": record.kind,
            "status": record.status, "input": record.input, "output": record.output,
            "stop_reason": record.stop_reason, "error": record.error,
            "idempotency_key": record.idempotency_key, "schedule": record.schedule,
            "created_at": _iso(record.created_at), "updated_at": _iso(record.updated_at),
            "finished_at": _iso(record.finished_at), "parent_agent": record.parent_agent,
            "parent_run_id": record.parent_run_id, "parent_task": record.parent_task,
            "child_kind": record.child_kind, "depth": record.depth,
            "agent_version": record.agent_version,
            "agent_human_version": record.agent_human_version}


def record_from_row(row: Mapping[str, Any], extra: dict[str, Any] | None = None) -> RunRecord:
    """A ``RunRecord`` from ``run_row``'s JSON (``extra`` says where it was archived)."""
    values = dict(row)
    for key in ("created_at", "updated_at", "finished_at"):
        values[key] = _datetime(values.get(key))
    return RunRecord(**values, extra=extra or {})


@dataclass(frozen=True)
class ArchivedRunData:
    """A run as its archive object holds it: the row, every event, every tool manifest."""

    record: RunRecord
    events: list[Event]
    tool_manifests: list[dict[str, Any]] = field(default_factory=list)


def encode_archive(record: RunRecord, events: Sequence[Event],
                   tool_manifests: Sequence[Mapping[str, Any]] = ()) -> bytes:
    """The archive object of a run: gzip-compressed JSON lines (see the module docstring)."""
    lines = [{"line": "run", "format": ARCHIVE_FORMAT, "run": run_row(record)}]
    lines += [{"line": "event", "stream": e.stream, "seq": e.seq, "type": e.type,
               "data": e.data, "created_at": _iso(e.created_at)} for e in events]
    lines += [{"line": "tool_manifest", **m} for m in tool_manifests]
    lines.append({"line": "end", "events": len(events), "tool_manifests": len(tool_manifests)})
    text = "".join(json.dumps(line, ensure_ascii=False, separators=(",", ":"), default=str)
                   + "\n" for line in lines)
    # mtime=0: the same run always compresses to the same bytes
    return gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0)


def decode_archive(data: bytes, extra: dict[str, Any] | None = None) -> ArchivedRunData:
    """The run in an archive object; ``ArchiveFormatError`` if it is not whole."""
    try:
        text = gzip.decompress(data).decode("utf-8")
        lines = [json.loads(line) for line in text.splitlines() if line]
    except (OSError, EOFError, ValueError) as exc:
        raise ArchiveFormatError(f"not a gzip JSON-lines archive: {exc}") from exc
    if not lines or lines[0].get("line") != "run":
        raise ArchiveFormatError("the archive does not start with the run's row")
    if lines[0].get("format") != ARCHIVE_FORMAT:
        raise ArchiveFormatError(f"archive format {lines[0].get('format')!r} is not known to "
                                 f"this Toren (it reads format {ARCHIVE_FORMAT})")
    end = lines[-1]
    if end.get("line") != "end":
        raise ArchiveFormatError("the archive is truncated (no end line)")
    record = record_from_row(lines[0]["run"], extra)
    events = [Event(record.id, line["stream"], line["seq"], line["type"], line["data"],
                    _datetime(line["created_at"]))
              for line in lines[1:-1] if line["line"] == "event"]
    manifests = [{k: v for k, v in line.items() if k != "line"}
                 for line in lines[1:-1] if line["line"] == "tool_manifest"]
    if len(events) != end.get("events") or len(manifests) != end.get("tool_manifests"):
        raise ArchiveFormatError(f"the archive holds {len(events)} events and "
                                 f"{len(manifests)} tool manifests, but its end line counts "
                                 f"{end.get('events')} and {end.get('tool_manifests')}")
    return ArchivedRunData(record, events, manifests)


def archive_key(record: RunRecord) -> str:
    """Where a run's object goes under the archive's root: ``<agent>/<YYYY>/<MM>/<id>.jsonl.gz``
    by the month the run was created (so a bucket lifecycle rule can work by prefix)."""
    at = record.created_at
    month = f"{at.year:04d}/{at.month:02d}" if at else "undated"
    return f"{record.agent}/{month}/{record.id}.jsonl.gz"


def archive_summary(events: Sequence[Event]) -> dict[str, Any]:
    """What the archive index keeps about a run besides its row: events, model and tool
    calls, tokens and cost (``toren jobs list --archived`` shows it without the object)."""
    calls = [e.data for e in events if e.type == "ModelCallCompleted"]
    return {"events": len(events), "model_calls": len(calls),
            "tool_calls": sum(1 for e in events if e.type == "ToolCallCompleted"),
            "input_tokens": sum(int((c.get("usage") or {}).get("input_tokens") or 0)
                                for c in calls),
            "output_tokens": sum(int((c.get("usage") or {}).get("output_tokens") or 0)
                                 for c in calls),
            "cost_usd": round(sum(float(c.get("cost_usd") or 0.0) for c in calls), 6)}


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None


def _datetime(text: Any) -> datetime | None:
    return datetime.fromisoformat(text) if isinstance(text, str) else None


__all__ = ["ARCHIVE_FORMAT", "NEVER", "ArchiveFormatError", "ArchivedRunData", "archive_key",
           "archive_summary", "decode_archive", "encode_archive", "parse_age",
           "record_from_row", "run_row"]
