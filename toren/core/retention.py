"""Retention ages and the archive format of a finished run (gzip-compressed JSON lines).

One archive object holds one whole run: its first line is the run's row (``"line": "run"``),
then every event of every stream in the order the run log returns them (``"line": "event"``),
then the run's tool manifests (``"line": "tool_manifest"``), and a last line that counts them
(``"line": "end"``), so a truncated object is told from a complete one. Reading one trusts
nothing in it: ``decode_archive`` decompresses a step at a time up to a cap, checks the shape of
every line, and refuses tool manifests whose paths would leave a workspace. Pure: no I/O.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import uuid
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from toren.core.events import TERMINAL_STATUSES, Event
from toren.core.runs import RunRecord

#: The format's version, written in the run line; a reader refuses versions it does not know.
ARCHIVE_FORMAT = 1
#: Most bytes an object may decompress to when the index recorded no size for it (runs archived
#: before Toren recorded digests): ``TOREN_ARCHIVE_MAX_MB``'s default.
DEFAULT_MAX_CONTENT_BYTES = 256 * 1024 * 1024
_AGE = re.compile(r"^([1-9][0-9]{0,6})([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: ``retention: never`` (or ``TOREN_RETENTION=never``): the agent's runs are never archived.
NEVER = "never"
#: Bytes decompressed per step: what one step of a read holds besides the lines parsed so far.
_INFLATE_STEP = 1 << 20
#: Compressed bytes handed to zlib at a time.
_FEED_STEP = 1 << 16
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MAX_INT4 = 2**31 - 1
_NONE = type(None)
#: The run line's fields (``run_row``) and the types each may hold; the first four are required
#: (an object written before a field existed lacks it).
_RUN_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,), "agent": (str,), "status": (str,), "input": (object,),
    "kind": (str,), "output": (object,), "stop_reason": (str, _NONE),
    "error": (dict, _NONE), "idempotency_key": (str, _NONE), "schedule": (str, _NONE),
    "created_at": (str, _NONE), "updated_at": (str, _NONE), "finished_at": (str, _NONE),
    "parent_agent": (str, _NONE), "parent_run_id": (str, _NONE), "parent_task": (str, _NONE),
    "child_kind": (str, _NONE), "depth": (int,), "agent_version": (str, _NONE),
    "agent_human_version": (str, _NONE)}
_REQUIRED_RUN_FIELDS = ("id", "agent", "status", "input")
_EVENT_FIELDS: dict[str, tuple[type, ...]] = {
    "line": (str,), "stream": (str,), "seq": (int,), "type": (str,), "data": (object,),
    "created_at": (str, _NONE)}
#: A tool manifest's fields, as ``export_tool_manifests`` reads them (all required).
_MANIFEST_FIELDS: dict[str, tuple[type, ...]] = {
    "scope": (str,), "seq": (int,), "parent_seq": (int, _NONE), "step": (int,),
    "epoch": (int,), "call_id": (str,), "full_state": (bool,), "entries": (dict,),
    "removed": (list,), "total_bytes": (int,), "created_at": (str,)}


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


@dataclass(frozen=True)
class ArchiveDigest:
    """What binds an archive object to its run, recorded in the archive index when the run was
    archived: the SHA-256 of the stored bytes (hex), their length, and their length
    decompressed. A read refuses an object that differs in any of them."""

    sha256: str
    object_bytes: int
    content_bytes: int


@dataclass(frozen=True)
class EncodedArchive:
    """An archive object's bytes and the digest that binds them to the run."""

    data: bytes
    digest: ArchiveDigest


def encode_archive_object(record: RunRecord, events: Sequence[Event],
                          tool_manifests: Sequence[Mapping[str, Any]] = ()) -> EncodedArchive:
    """The archive object of a run (see the module docstring) and its digest."""
    lines = [{"line": "run", "format": ARCHIVE_FORMAT, "run": run_row(record)}]
    lines += [{"line": "event", "stream": e.stream, "seq": e.seq, "type": e.type,
               "data": e.data, "created_at": _iso(e.created_at)} for e in events]
    lines += [{"line": "tool_manifest", **m} for m in tool_manifests]
    lines.append({"line": "end", "events": len(events), "tool_manifests": len(tool_manifests)})
    content = "".join(json.dumps(line, ensure_ascii=False, separators=(",", ":"), default=str)
                      + "\n" for line in lines).encode("utf-8")
    # mtime=0: the same run always compresses to the same bytes
    data = gzip.compress(content, compresslevel=6, mtime=0)
    return EncodedArchive(data, ArchiveDigest(hashlib.sha256(data).hexdigest(), len(data),
                                              len(content)))


def encode_archive(record: RunRecord, events: Sequence[Event],
                   tool_manifests: Sequence[Mapping[str, Any]] = ()) -> bytes:
    """The archive object of a run: gzip-compressed JSON lines (see the module docstring)."""
    return encode_archive_object(record, events, tool_manifests).data


def decode_archive(data: bytes, extra: dict[str, Any] | None = None, *,
                   max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES) -> ArchivedRunData:
    """The run in an archive object; ``ArchiveFormatError`` if it is not whole, decompresses
    to more than ``max_content_bytes``, has a line of the wrong shape, or holds tool manifests
    a restore must not write (``check_tool_manifests``)."""
    lines = _json_lines(data, max_content_bytes)
    first = next(lines, None)
    if first is None or first.get("line") != "run":
        raise ArchiveFormatError("the archive does not start with the run's row")
    if first.get("format") != ARCHIVE_FORMAT:
        raise ArchiveFormatError(f"archive format {first.get('format')!r} is not known to "
                                 f"this Toren (it reads format {ARCHIVE_FORMAT})")
    record = _run_record(first.get("run"), extra)
    events: list[Event] = []
    manifests: list[dict[str, Any]] = []
    positions: set[tuple[str, int]] = set()
    end: dict[str, Any] | None = None
    for line in lines:
        kind = line.get("line")
        if end is not None:
            raise ArchiveFormatError("the archive goes on after its end line")
        if kind == "event":
            event = _event(record.id, line)
            if (event.stream, event.seq) in positions:
                raise ArchiveFormatError(f"the archive holds event {event.seq} of stream "
                                         f"{event.stream!r} twice")
            positions.add((event.stream, event.seq))
            events.append(event)
        elif kind == "tool_manifest":
            manifests.append(_fields(line, _MANIFEST_FIELDS, "a tool manifest", skip="line"))
        elif kind == "end":
            end = line
        else:
            raise ArchiveFormatError(f"the archive has a line of unknown kind {kind!r}")
    if end is None:
        raise ArchiveFormatError("the archive is truncated (no end line)")
    if len(events) != end.get("events") or len(manifests) != end.get("tool_manifests"):
        raise ArchiveFormatError(f"the archive holds {len(events)} events and "
                                 f"{len(manifests)} tool manifests, but its end line counts "
                                 f"{end.get('events')} and {end.get('tool_manifests')}")
    check_tool_manifests(manifests)
    return ArchivedRunData(record, events, manifests)


def _json_lines(data: bytes, max_content_bytes: int) -> Iterator[dict[str, Any]]:
    """The JSON objects of a gzip JSON-lines object, decompressed a step at a time: never more
    than ``max_content_bytes`` in all (a gzip bomb stops at the cap, not at the memory's end)."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip framing only
    view = memoryview(data)
    fed = 0
    # fed a slice at a time: zlib copies the input it has not used into unconsumed_tail at
    # every step, which for the whole object would be quadratic
    pending: bytes | memoryview = b""
    buffer = bytearray()
    total = 0
    while not inflater.eof:
        if not pending and fed < len(data):
            pending = view[fed:fed + _FEED_STEP]
            fed += len(pending)
        try:
            chunk = inflater.decompress(pending, _INFLATE_STEP)
        except zlib.error as exc:
            raise ArchiveFormatError(f"not a gzip JSON-lines archive: {exc}") from exc
        pending = inflater.unconsumed_tail
        if not chunk and not pending and fed >= len(data) and not inflater.eof:
            raise ArchiveFormatError("the archive is truncated (its gzip stream stops before "
                                     "its end)")
        total += len(chunk)
        if total > max_content_bytes:
            raise ArchiveFormatError(f"the archive decompresses to more than "
                                     f"{max_content_bytes} bytes, the most this read allows")
        buffer += chunk
        start = 0
        # split on newline bytes only: str.splitlines would also split inside a JSON string
        # at U+2028, U+2029 or U+0085, which json.dumps leaves unescaped
        while (stop := buffer.find(b"\n", start)) >= 0:
            if stop > start:
                yield _json_line(buffer[start:stop])
            start = stop + 1
        del buffer[:start]
    if inflater.unused_data or fed < len(data):
        raise ArchiveFormatError("the archive has data after the end of its gzip stream")
    if buffer.strip():
        yield _json_line(buffer)


def _json_line(raw: bytearray) -> dict[str, Any]:
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ArchiveFormatError(f"the archive has a line that is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ArchiveFormatError("the archive has a line that is not a JSON object")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _fields(line: Any, spec: Mapping[str, tuple[type, ...]], what: str, *,
            required: Sequence[str] | None = None, skip: str | None = None) -> dict[str, Any]:
    """``line``'s fields if each has a type ``spec`` allows (every field of ``spec`` present
    unless ``required`` names the ones that must be), without ``skip``."""
    if not isinstance(line, dict):
        raise ArchiveFormatError(f"{what} in the archive is not a JSON object")
    values = {name: value for name, value in line.items() if name != skip}
    unknown = set(values) - set(spec)
    missing = set(required if required is not None else spec) - set(values)
    if unknown or missing:
        raise ArchiveFormatError(f"{what} in the archive has unknown fields "
                                 f"{sorted(unknown)} or lacks {sorted(missing)}")
    for name, value in values.items():
        types = spec[name]
        if object in types:
            continue
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ArchiveFormatError(f"{what} in the archive has a {name!r} of the wrong type")
        if isinstance(value, str) and "\x00" in value:
            raise ArchiveFormatError(f"{what} in the archive has a NUL byte in {name!r}")
        if isinstance(value, int) and not isinstance(value, bool) and not \
                0 <= value <= (2**63 - 1):
            raise ArchiveFormatError(f"{what} in the archive has {name!r} out of range")
    return values


def _run_record(row: Any, extra: dict[str, Any] | None) -> RunRecord:
    values = _fields(row, _RUN_FIELDS, "the run's row", required=_REQUIRED_RUN_FIELDS)
    try:
        if str(uuid.UUID(values["id"])) != values["id"]:
            raise ValueError("not in canonical form")
        record = record_from_row(values, extra)
    except ValueError as exc:
        raise ArchiveFormatError(f"the run's row in the archive is malformed: {exc}") from exc
    if record.status not in TERMINAL_STATUSES:
        raise ArchiveFormatError(f"the archive's run is {record.status!r}: only finished runs "
                                 "are archived")
    return record


def _event(run_id: str, line: dict[str, Any]) -> Event:
    values = _fields(line, _EVENT_FIELDS, "an event")
    if not 1 <= values["seq"] <= _MAX_INT4 or not values["stream"] or not values["type"]:
        raise ArchiveFormatError(f"an event in the archive has no stream or type, or a seq "
                                 f"outside 1..{_MAX_INT4}")
    try:
        at = _datetime(values["created_at"])
    except ValueError as exc:
        raise ArchiveFormatError(f"an event in the archive has a malformed created_at: "
                                 f"{exc}") from exc
    return Event(run_id, values["stream"], values["seq"], values["type"], values["data"], at)


# -- tool manifests (the sandbox's durable workspaces) ----------------------------------------


def workspace_path_problem(path: Any) -> str | None:
    """What is wrong with ``path`` as a path inside a workspace (``None``: nothing): it must
    be a relative path of non-empty components, none ``.`` or ``..``, without NUL."""
    if not isinstance(path, str) or not path:
        return "is empty or not a string"
    if "\x00" in path:
        return "holds a NUL byte"
    if path.startswith("/"):
        return "is absolute"
    for part in path.split("/"):
        if part in ("", ".", ".."):
            return f"has a {part!r} component"
    return None


def check_tool_manifests(manifests: Sequence[Mapping[str, Any]]) -> None:
    """Refuse (``ArchiveFormatError``) tool manifests that a restore must not write: a path
    ``workspace_path_problem`` finds wrong, an entry that is not a file, symlink or directory
    as the sandbox records them, a manifest whose parent is not an earlier manifest of its
    scope, or a state (a manifest replayed on its parents, as the sandbox materialises it)
    with an entry beneath one that is not a directory: a symlink there would carry what is
    written beneath it out of the workspace."""
    scopes: dict[str, list[Mapping[str, Any]]] = {}
    for manifest in manifests:
        scopes.setdefault(manifest["scope"], []).append(manifest)
    for scope, group in scopes.items():
        _check_scope(scope, sorted(group, key=lambda m: int(m["seq"])))


def _check_scope(scope: str, manifests: list[Mapping[str, Any]]) -> None:
    seqs = [m["seq"] for m in manifests]
    if len(set(seqs)) != len(seqs):
        raise ArchiveFormatError(f"tool manifests of scope {scope!r} repeat a seq")
    # how many later manifests start from each one: a state is handed on, not copied, to the
    # last of them (a scope is almost always one chain)
    children = Counter(m["parent_seq"] for m in manifests if not m["full_state"])
    states: dict[int, _WorkspaceTree] = {}
    for manifest in manifests:
        seq, parent = manifest["seq"], manifest["parent_seq"]
        where = f"tool manifest {seq} of scope {scope!r}"
        if manifest["full_state"]:
            tree = _WorkspaceTree()
        elif parent is None or parent >= seq or parent not in states:
            raise ArchiveFormatError(f"{where} names a parent {parent!r} that is not an "
                                     "earlier manifest of its scope")
        else:
            children[parent] -= 1
            tree = states[parent].copy() if children[parent] else states.pop(parent)
        for path in manifest["removed"]:
            problem = workspace_path_problem(path)
            if problem:
                raise ArchiveFormatError(f"{where} removes a path that {problem}: {path!r}")
            tree.remove(path)
        entries = manifest["entries"]
        for path, entry in entries.items():
            problem = workspace_path_problem(path)
            kind = _entry_kind(entry)
            if problem or kind is None:
                raise ArchiveFormatError(f"{where} has an entry {path!r} that "
                                         f"{problem or 'is not a file, symlink or directory'}")
            tree.put(path, kind)
        for path in entries:
            problem = tree.problem(path)
            if problem:
                raise ArchiveFormatError(f"{where}: {problem}")
        if children[seq]:
            states[seq] = tree


def _entry_kind(entry: Any) -> str | None:
    """``f``, ``l`` or ``d`` for an entry of the sandbox's shape (``["f", sha256, size,
    executable]``, ``["l", target]``, ``["d"]``), else ``None``."""
    if not isinstance(entry, list) or not entry:
        return None
    kind = entry[0]
    if kind == "d" and len(entry) == 1:
        return "d"
    if kind == "l" and len(entry) == 2 and isinstance(entry[1], str) and entry[1] \
            and "\x00" not in entry[1]:
        return "l"
    if (kind == "f" and len(entry) == 4 and isinstance(entry[1], str)
            and _SHA256.match(entry[1]) and type(entry[2]) is int and entry[2] >= 0
            and isinstance(entry[3], bool)):
        return "f"
    return None


class _WorkspaceTree:
    """A workspace's entries (path -> kind) and, per path, how many entries lie beneath it."""

    def __init__(self) -> None:
        self.kinds: dict[str, str] = {}
        self.beneath: Counter[str] = Counter()

    def copy(self) -> _WorkspaceTree:
        other = _WorkspaceTree()
        other.kinds, other.beneath = dict(self.kinds), Counter(self.beneath)
        return other

    def put(self, path: str, kind: str) -> None:
        if path not in self.kinds:
            for ancestor in _ancestors(path):
                self.beneath[ancestor] += 1
        self.kinds[path] = kind

    def remove(self, path: str) -> None:
        if self.kinds.pop(path, None) is not None:
            for ancestor in _ancestors(path):
                self.beneath[ancestor] -= 1

    def problem(self, path: str) -> str | None:
        """Why ``path``'s entry cannot be written in this state, or ``None``. Checking every
        path a manifest puts suffices: a pair its parent held was checked then."""
        for ancestor in _ancestors(path):
            kind = self.kinds.get(ancestor)
            if kind is not None and kind != "d":
                return f"{path!r} lies beneath {ancestor!r}, which is {_KIND_NAMES[kind]}"
        kind = self.kinds[path]
        if kind != "d" and self.beneath[path] > 0:
            return f"{path!r} is {_KIND_NAMES[kind]} with entries beneath it"
        return None


_KIND_NAMES = {"f": "a file", "l": "a symlink", "d": "a directory"}


def _ancestors(path: str) -> Iterator[str]:
    at = path.find("/")
    while at >= 0:
        yield path[:at]
        at = path.find("/", at + 1)


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


__all__ = ["ARCHIVE_FORMAT", "DEFAULT_MAX_CONTENT_BYTES", "NEVER", "ArchiveDigest",
           "ArchiveFormatError", "ArchivedRunData", "EncodedArchive", "archive_key",
           "archive_summary", "check_tool_manifests", "decode_archive", "encode_archive",
           "encode_archive_object", "parse_age", "record_from_row", "run_row",
           "workspace_path_problem"]
