"""The audit trail's values: an entry a surface records (who, from where, what, on what, how it
ended) and the filters that read them back. Pure: no I/O.

What an entry may hold is bounded here, once, whatever surface made it: short texts, a few
details of plain values, never a secret (``details`` drops keys that name one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from toren.core.actors import Actor
from toren.core.errors import TorenError
from toren.core.moments import iso_moment
from toren.core.retention import parse_age

#: Where an entry was recorded: the HTTP API, the CLI on the database, an MCP tool, a chat
#: channel's button, the host itself.
AUDIT_SOURCES = ("http", "cli", "mcp", "chat", "system")
#: Who acted: an API key, the CLI's local user, nobody (keyless local development), a person
#: on a chat channel, the host.
ACTOR_KINDS = ("key", "cli", "anonymous", "channel", "system")
#: An action's name: dotted lowercase words (``run.start``, ``approval.approve``).
ACTION = re.compile(r"^[a-z][a-z_]*(\.[a-z][a-z_]*)*$")
#: An action filter: a name, or its start, which may end with ``.`` or ``.*``.
ACTION_FILTER = re.compile(r"^([a-z][a-z_]*(?:\.[a-z][a-z_]*)*)(?:\.\*?)?$")
#: The longest action name or filter.
MAX_ACTION = 60
#: The outcome of an action that did what was asked.
OK = "ok"
#: The longest text kept in a column (ids, names, the user agent) or a detail.
MAX_TEXT = 200
#: Most details kept per entry.
MAX_DETAILS = 12
#: The most entries one read returns.
MAX_LIMIT = 500
#: Detail keys never kept, whatever a caller passes (checked as substrings, lowercased).
_SECRET_WORDS = ("secret", "token", "password", "api_key", "apikey", "authorization",
                 "credential", "cookie")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class InvalidAuditQuery(TorenError):
    """A filter of the audit trail is malformed."""

    code = "invalid_audit_query"
    http_status = 400


def clip(value: object, limit: int = MAX_TEXT) -> str:
    """``value`` as text of at most ``limit`` characters, control characters (NUL, which
    Postgres refuses, among them) made spaces."""
    text = _CONTROL.sub(" ", str(value))
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _detail(value: Any) -> Any:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, list | tuple):
        return [_detail(v) for v in list(value)[:MAX_DETAILS]]
    return clip(value)


def clean_details(details: dict[str, Any] | None) -> dict[str, Any]:
    """At most ``MAX_DETAILS`` details of plain values (texts cut at ``MAX_TEXT``, lists at
    ``MAX_DETAILS`` items, no nested objects), keys naming a secret dropped."""
    kept: dict[str, Any] = {}
    for key, value in (details or {}).items():
        name = clip(key, 60)
        if any(word in name.lower() for word in _SECRET_WORDS) or isinstance(value, dict):
            continue
        kept[name] = _detail(value)
        if len(kept) == MAX_DETAILS:
            break
    return kept


@dataclass(frozen=True)
class AuditEntry:
    """One state-changing call as a surface records it (``AuditLog.record``).

    ``actor_*`` say who (``ACTOR_KINDS``; ``actor_id`` a key's id, the CLI user, a chat
    user), ``source`` where it came through (``AUDIT_SOURCES``), ``remote`` and
    ``user_agent`` from where (HTTP only), ``action`` what (``run.cancel``), ``agent``,
    ``run_id`` and ``target`` on what (an approval's, key's or file's id, a schedule's
    name), ``outcome`` how it ended (``ok`` or the error's code) with ``status`` (the HTTP
    status; ``None`` elsewhere), ``details`` a few plain values (a reason, a digest).
    """

    actor_kind: str
    actor_id: str
    action: str
    source: str
    actor_name: str = ""
    agent: str | None = None
    run_id: str | None = None
    target: str | None = None
    outcome: str = OK
    status: int | None = None
    remote: str | None = None
    user_agent: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, actor: Actor, action: str, source: str, **fields: Any) -> AuditEntry:
        """An entry by ``actor`` (``toren.core.actors``: a request's, the CLI's, a chat
        user's)."""
        return cls(actor_kind=actor.kind, actor_id=actor.id, actor_name=actor.name,
                   action=action, source=source, **fields)

    def bounded(self) -> AuditEntry:
        """This entry with every text clipped and ``details`` cleaned (what stores keep)."""
        def opt(value: str | None) -> str | None:
            return None if value is None else clip(value)
        return replace(self, actor_kind=clip(self.actor_kind, 20),
                       actor_id=clip(self.actor_id), actor_name=clip(self.actor_name),
                       action=clip(self.action, MAX_ACTION), source=clip(self.source, 20),
                       agent=opt(self.agent), run_id=opt(self.run_id), target=opt(self.target),
                       outcome=clip(self.outcome, 60), remote=opt(self.remote),
                       user_agent=opt(self.user_agent), details=clean_details(self.details))


@dataclass(frozen=True)
class AuditRecord:
    """A recorded entry: its ``id`` (ascending in recording order) and when (``at``)."""

    id: int
    at: datetime
    entry: AuditEntry

    def to_json(self) -> dict[str, Any]:
        e = self.entry
        return {"id": str(self.id), "at": self.at.isoformat(),
                "actor": {"kind": e.actor_kind, "id": e.actor_id, "name": e.actor_name},
                "source": e.source, "remote": e.remote, "user_agent": e.user_agent,
                "action": e.action, "agent": e.agent, "run_id": e.run_id, "target": e.target,
                "outcome": e.outcome, "status": e.status, "details": dict(e.details)}


@dataclass(frozen=True)
class AuditQuery:
    """Which entries to read, newest first: ``actor`` (a key's id or name, ``cli:<user>``,
    ``<channel>:<user>``), ``action`` (a whole name, or its start at a dot: ``approval``
    matches ``approval.approve``), ``agent``, ``run_id``, ``since``/``until`` (on ``at``),
    ``outcome`` (``ok``, or an error's code), at most ``limit``, older than entry ``before``
    (a page's cursor)."""

    actor: str | None = None
    action: str | None = None
    agent: str | None = None
    run_id: str | None = None
    outcome: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 50
    before: int | None = None

    def checked(self) -> AuditQuery:
        """This query, or ``InvalidAuditQuery`` naming the filter that is malformed."""
        if not 1 <= self.limit <= MAX_LIMIT:
            raise InvalidAuditQuery(f"limit must be between 1 and {MAX_LIMIT}")
        action = None
        if self.action is not None:
            found = ACTION_FILTER.match(self.action) if len(self.action) <= MAX_ACTION else None
            if found is None:
                raise InvalidAuditQuery(
                    f"action {clip(self.action, MAX_ACTION)!r} is not an action name: dotted "
                    f"lowercase words such as run.cancel, or the start of one such as approval "
                    f"(at most {MAX_ACTION} characters)")
            action = found.group(1)
        for name in ("actor", "agent", "run_id", "outcome"):
            value = getattr(self, name)
            if value is not None and (not value or len(value) > MAX_TEXT
                                      or _CONTROL.search(value)):
                raise InvalidAuditQuery(f"{name} must be 1 to {MAX_TEXT} printable characters")
        return replace(self, action=action)


def parse_moment(text: str, name: str, now: datetime | None = None) -> datetime:
    """A moment for ``--since``/``--until``: an age back from ``now`` (``1h``, ``7d``: units
    s, m, h, d, w) or an ISO 8601 date or time (UTC unless it names an offset).
    ``InvalidAuditQuery`` naming ``name`` otherwise."""
    raw = text.strip()
    try:
        seconds = parse_age(raw)
    except ValueError:
        seconds = None
    else:
        if seconds is not None:
            try:
                return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
            except OverflowError:  # an age older than year 1 (9999999w): the start of time
                return datetime.min.replace(tzinfo=UTC)
    try:
        return iso_moment(raw)
    except ValueError:
        raise InvalidAuditQuery(f"{name} {clip(raw, 60)!r} is neither an age (such as 1h or "
                                "7d) nor an ISO 8601 time (such as 2026-01-31 or "
                                "2026-01-31T12:00:00Z)") from None
