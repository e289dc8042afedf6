"""API keys: the ``toren_<prefix>_<secret>`` format, hashing and the record stores return."""

from __future__ import annotations

import hashlib
import re
import secrets
import unicodedata
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from toren.core.keys import ApiKey as ApiKey
from toren.core.scopes import check_grant, check_key_agents
from toren.errors import ConfigError, TorenError

#: Every key starts with this, so secret scanners and people can recognise one.
KEY_MARK = "toren_"
_KEY = re.compile(r"toren_([0-9a-f]{8})_([A-Za-z0-9_-]{32,})")
_PREFIX = re.compile(r"(?:toren_)?([0-9a-f]{8})")
MAX_NAME_LENGTH = 100
#: Names that start with this (any case) are the CLI's (``cli:<user>``), never a key's.
RESERVED_NAME_PREFIX = "cli:"
#: The longest a key may be made to last (``--expires``).
MAX_KEY_LIFETIME = timedelta(days=3660)
_LIFETIME = re.compile(r"([0-9]{1,12})([mhdw])")
_LIFETIME_UNIT = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1),
                  "w": timedelta(weeks=1)}


class KeyNotFound(TorenError):
    """No API key has that id or prefix."""

    code = "key_not_found"


class KeyNameTaken(ConfigError):
    """Another active API key has that name (names are unique, ignoring case)."""

    code = "key_name_taken"
    http_status = 409


class NoApiKeys(ConfigError):
    """No active API key exists, and serving needs one."""

    code = "no_api_keys"


@dataclass(frozen=True)
class NewKey:
    """A freshly generated key: ``token`` is shown to the user once; ``hash`` is stored."""

    prefix: str
    token: str
    hash: str


def generate_key() -> NewKey:
    """A new random key. The prefix (public, for lookup and listing) is 32 random bits; the
    secret is 256 bits from ``secrets.token_urlsafe(32)``."""
    prefix = KEY_MARK + secrets.token_hex(4)
    secret = secrets.token_urlsafe(32)
    return NewKey(prefix=prefix, token=f"{prefix}_{secret}", hash=hash_secret(secret))


def hash_secret(secret: str) -> str:
    """The hex SHA-256 of a key's secret.

    A fast unsalted hash is enough here, unlike for passwords: the secret is 256 random bits,
    so there is no dictionary to try and brute force is hopeless; a slow KDF would only add
    latency to every request.
    """
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_key(token: str) -> tuple[str, str] | None:
    """``(prefix, secret)`` of a well-formed key (prefix including ``toren_``), else ``None``."""
    match = _KEY.fullmatch(token)
    if match is None:
        return None
    return KEY_MARK + match[1], match[2]


def parse_key_reference(id_or_prefix: str) -> tuple[str | None, str | None]:
    """``(id, prefix)`` that ``toren keys revoke`` was given; at most one is not ``None``.

    Accepts a key's id, its prefix with or without ``toren_``, or the whole key (a leaked key
    can be revoked by pasting it).
    """
    text = id_or_prefix.strip()
    try:
        return str(uuid.UUID(text)), None
    except ValueError:
        pass
    parsed = parse_key(text)
    if parsed is not None:
        return None, parsed[0]
    match = _PREFIX.fullmatch(text)
    if match is not None:
        return None, KEY_MARK + match[1]
    return None, None


def check_key_name(name: str) -> str:
    """The name, stripped; ``ConfigError`` if it is empty, too long or not printable.

    Names are shown by ``toren keys list`` and in logs, so they may hold only printable
    characters: no control characters or escape sequences (which a terminal would act on), no
    line breaks, and no invisible formatting characters such as bidirectional overrides.
    """
    name = name.strip()
    if not name:
        raise ConfigError("an API key needs a name (who or what uses it, e.g. `ci`)")
    if len(name) > MAX_NAME_LENGTH:
        raise ConfigError(f"an API key's name has at most {MAX_NAME_LENGTH} characters; this "
                          f"one has {len(name)}")
    if name[:4].lower() == RESERVED_NAME_PREFIX:
        raise ConfigError(f"an API key's name may not start with {RESERVED_NAME_PREFIX!r}: "
                          "that is how the local CLI's user is shown (cli:<user>); pick "
                          "another name")
    bad = next((char for char in name if not _printable(char)), None)
    if bad is not None:
        raise ConfigError(f"an API key's name may hold only printable characters; it has "
                          f"U+{ord(bad):04X} ({unicodedata.name(bad, 'a control character')}). "
                          "Use letters, digits, spaces and punctuation")
    return name


def _printable(char: str) -> bool:
    # Categories C* are control (Cc), format (Cf: bidi overrides, zero-width), surrogate,
    # private-use and unassigned; Z* other than a plain space are line/paragraph separators
    # and odd spaces.
    category = unicodedata.category(char)
    return char == " " or not (category.startswith("C") or category.startswith("Z"))


def parse_expiry(text: str, now: datetime | None = None) -> datetime:
    """When a key made now with ``--expires text`` stops working: ``30d``, ``12h``, ``90m``,
    ``2w`` from ``now``, or an ISO 8601 time (UTC if it names no zone).

    ``ConfigError`` for anything else, a time not in the future, or more than ten years away.
    """
    now = now or datetime.now(UTC)
    text = text.strip()
    if len(text) > 40:
        raise ConfigError("--expires is a lifetime (30d, 12h, 90m, 2w) or an ISO 8601 time; "
                          f"this is {len(text)} characters long")
    match = _LIFETIME.fullmatch(text)
    if match is not None:
        count, unit = int(match[1]), _LIFETIME_UNIT[match[2]]
        # compared before multiplying: a huge count overflows a timedelta (and a datetime)
        if count > MAX_KEY_LIFETIME // unit:
            raise ConfigError("--expires may be at most ten years away (leave it out for a "
                              "key that never expires)")
        when = now + count * unit
    else:
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise ConfigError(f"--expires {text[:40]!r} is neither a lifetime (30d, 12h, 90m, "
                              "2w) nor an ISO 8601 time (2027-01-31 or "
                              "2027-01-31T18:00:00+00:00)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
    if when <= now:
        raise ConfigError(f"--expires {text!r} is not in the future")
    if when - now > MAX_KEY_LIFETIME:
        raise ConfigError("--expires may be at most ten years away (leave it out for a key "
                          "that never expires)")
    return when


@dataclass(frozen=True)
class KeyGrant:
    """What a new key may do, checked: ``role``, ``scopes`` (custom only), ``agents``."""

    role: str
    scopes: tuple[str, ...]
    agents: tuple[str, ...] | None


def check_key_grant(role: str, scopes: Sequence[str] = (),
                    agents: Sequence[str] | None = None) -> KeyGrant:
    """A new key's role, scopes and agents as the store keeps them; ``ConfigError`` naming
    the fix for an unknown role or scope, scopes on a named role, or a bad agent name."""
    role, checked = check_grant(role, scopes)
    return KeyGrant(role, checked, check_key_agents(agents))
