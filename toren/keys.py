"""API keys: the ``toren_<prefix>_<secret>`` format, hashing and the record stores return."""

from __future__ import annotations

import hashlib
import re
import secrets
import unicodedata
import uuid
from dataclasses import dataclass

from toren.core.keys import ApiKey as ApiKey
from toren.errors import ConfigError, TorenError

#: Every key starts with this, so secret scanners and people can recognise one.
KEY_MARK = "toren_"
_KEY = re.compile(r"toren_([0-9a-f]{8})_([A-Za-z0-9_-]{32,})")
_PREFIX = re.compile(r"(?:toren_)?([0-9a-f]{8})")
MAX_NAME_LENGTH = 100


class KeyNotFound(TorenError):
    """No API key has that id or prefix."""

    code = "key_not_found"


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
