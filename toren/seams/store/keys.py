"""API keys: only a hash of each key's secret is stored; the key is shown once."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toren.core.keys import ApiKey


class KeyStore(abc.ABC):
    """The API keys that the HTTP API accepts.

    ``toren keys create|list|revoke`` call ``create_key``, ``list_keys`` and ``revoke_key``;
    the server's auth middleware calls ``verify_key`` for a bearer token it has not seen in
    the last few seconds, and ``toren dev``/``toren serve`` call ``list_keys`` before
    listening, to refuse to serve without keys where keys are required.
    """

    @abc.abstractmethod
    async def create_key(self, name: str, *, role: str = "admin", scopes: Sequence[str] = (),
                         agents: Sequence[str] | None = None,
                         expires_at: datetime | None = None) -> tuple[ApiKey, str]:
        """Make a key named ``name``; return its record and the key itself (never stored).

        ``toren keys create`` calls it with what the user typed: the name is checked with
        ``toren.keys.check_key_name`` (``ConfigError`` if empty, too long, not printable or
        starting with ``cli:``); ``toren.keys.KeyNameTaken`` if an active key (not revoked,
        expired or not) has the same name ignoring case. ``role`` and ``scopes`` are checked
        with ``toren.core.scopes.check_grant`` (a named role stores no scopes; ``custom``
        stores its own), ``agents`` with ``check_key_agents`` (``None`` or empty: every
        agent). ``expires_at``: when ``verify_key`` stops accepting it (``None``: never).
        Keys are made by ``toren.keys.generate_key`` (``toren_<prefix>_<secret>``; the prefix
        names one key); ``toren.keys.parse_key`` reads one back.
        """

    @abc.abstractmethod
    async def list_keys(self) -> list[ApiKey]:
        """Every key, revoked and expired ones included, newest first."""

    @abc.abstractmethod
    async def revoke_key(self, id_or_prefix: str) -> ApiKey | None:
        """Revoke the key with this id or prefix (or the whole key); ``None`` if there is none.

        Revoking a revoked key changes nothing and returns it.
        """

    @abc.abstractmethod
    async def verify_key(self, token: str) -> ApiKey | None:
        """The record of ``token`` if it is an active key (not revoked, not past its
        ``expires_at`` by the database's clock), else ``None``.

        Compares hashes in constant time and records the use in ``last_used_at``, at most once
        a minute per key so that a busy API does not write on every request.
        """
