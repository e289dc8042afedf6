"""Scopes and roles of API keys: what each scope allows, and the scopes of each named role.

The HTTP routes each need one scope (``toren.server.scopes``); a key holds a role, and the
role names its scopes (``custom``: the key's own list). docs/guides/auth.md has the table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from toren.core.errors import ConfigError

#: Every scope, with what it allows (``toren keys create --scope``; docs/guides/auth.md).
SCOPES: dict[str, str] = {
    "agents:read": "list the served agents and their versions",
    "runs:read": "list and read runs, their events, receipts, children, questions, webhooks",
    "runs:write": "start runs, cancel them, send them signals",
    "runs:manage": "fork, upgrade, archive and restore runs",
    "sessions:read": "read sessions",
    "sessions:write": "start sessions and send them messages",
    "approvals:read": "list and read approvals",
    "approvals:decide": "approve, deny, edit and answer approvals; answer ask_user questions",
    "schedules:read": "list and read schedules",
    "schedules:write": "pause, resume and trigger schedules",
    "files:read": "list and download files",
    "files:write": "upload and delete files",
    "metrics:read": "GET /metrics (unless TOREN_METRICS_PUBLIC=1)",
    "fleet:read": "GET /fleet and the queue and limit views",
    "audit:read": "GET /audit: the audit trail",
    "memory:read": "list and read what agents remember (memory:), about whom",
    "memory:write": "correct and erase what agents remember (memory:)",
    "keys:manage": "manage API keys over the API (no route needs it yet: `toren keys` works "
                   "on the database)",
}

_READ = frozenset(scope for scope in SCOPES if scope.endswith(":read"))

#: The scopes of each named role. ``custom`` is not here: its scopes are the key's own.
ROLES: dict[str, frozenset[str]] = {
    "admin": frozenset(SCOPES),
    "operator": frozenset(SCOPES) - {"keys:manage", "audit:read"},
    # memories are personal data: a viewer reads runs, not what agents keep about people
    "viewer": _READ - {"audit:read", "memory:read"},
    "approver": frozenset({"agents:read", "runs:read", "sessions:read", "approvals:read",
                           "approvals:decide"}),
}
#: The role of a key with its own list of scopes.
CUSTOM = "custom"
#: Every role a key may have, for help texts and errors.
ROLE_NAMES = (*ROLES, CUSTOM)
#: The role of keys made before roles existed, and of ``toren keys create`` without --role.
DEFAULT_ROLE = "admin"
#: agent.schema.json's pattern for an agent's name.
_AGENT_NAME = re.compile(r"[a-z][a-z0-9_-]{0,56}")
#: The most agents one key may be limited to.
MAX_KEY_AGENTS = 100


def role_scopes(role: str, scopes: Iterable[str] = ()) -> frozenset[str]:
    """What a key of ``role`` may do: the role's scopes, or ``scopes`` for ``custom``.

    A role this version does not know (a newer one wrote it) grants nothing.
    """
    if role == CUSTOM:
        return frozenset(scopes) & frozenset(SCOPES)
    return ROLES.get(role, frozenset())


def check_grant(role: str, scopes: Iterable[str] = ()) -> tuple[str, tuple[str, ...]]:
    """``(role, scopes)`` as a key stores them; ``ConfigError`` naming the fix otherwise.

    A named role takes no ``scopes`` (they come from the role); ``custom`` needs at least one,
    each a known scope. Scopes come back sorted and without repeats.
    """
    given = [scope.strip() for scope in scopes]
    if role not in ROLE_NAMES:
        raise ConfigError(f"unknown role {role!r}: one of {', '.join(ROLE_NAMES)} "
                          "(custom with --scope for a list of your own)")
    if role != CUSTOM:
        if given:
            raise ConfigError(f"--scope gives the scopes of a custom key; role {role!r} has "
                              "its own (use --role custom with --scope, or drop --scope)")
        return role, ()
    if not given:
        raise ConfigError("a custom key needs at least one --scope; scopes: "
                          + ", ".join(SCOPES))
    unknown = [scope for scope in given if scope not in SCOPES]
    if unknown:
        raise ConfigError(f"unknown scope {unknown[0]!r}; scopes: {', '.join(SCOPES)}")
    return role, tuple(sorted(set(given)))


def check_key_agents(agents: Iterable[str] | None) -> tuple[str, ...] | None:
    """The agents a key is limited to (``None``: every agent); ``ConfigError`` for an empty
    or malformed name, or too many."""
    if agents is None:
        return None
    names = [name.strip() for name in agents]
    if not names:
        return None
    if len(names) > MAX_KEY_AGENTS:
        raise ConfigError(f"a key may be limited to at most {MAX_KEY_AGENTS} agents")
    for name in names:
        if not _AGENT_NAME.fullmatch(name):
            raise ConfigError(f"--agent {name!r} is not an agent name (lower-case letters, "
                              "digits, - and _, starting with a letter, at most 57)")
    return tuple(sorted(set(names)))
