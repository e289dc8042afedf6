"""API keys of the HTTP API: ``toren keys``, the server's key check and ``toren serve``'s
refusal to serve without keys call this service."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from toren.keys import ApiKey
from toren.seams.store.keys import KeyStore


class KeysService:
    """Create, list, revoke and verify API keys (only a key's hash is stored).
    ``runtime.keys``; needs the store open (``DatabaseService.open`` or ``Runtime.start``)."""

    def __init__(self, store: KeyStore) -> None:
        self._store = store

    async def create(self, name: str, *, role: str = "admin", scopes: Sequence[str] = (),
                     agents: Sequence[str] | None = None,
                     expires_at: datetime | None = None) -> tuple[ApiKey, str]:
        """A new key named ``name``: its record and the key itself (shown only this once).

        ``role``/``scopes``: what it may do (``toren.core.scopes``); ``agents``: the only
        agents it may touch (``None``: all); ``expires_at``: when it stops working."""
        return await self._store.create_key(name, role=role, scopes=scopes, agents=agents,
                                            expires_at=expires_at)

    async def create_if_none(self, name: str, *, role: str = "admin",
                             scopes: Sequence[str] = (), agents: Sequence[str] | None = None,
                             expires_at: datetime | None = None
                             ) -> tuple[ApiKey, str] | list[ApiKey]:
        """As ``create``, unless a key is active already: then the active keys, and nothing
        is created (``toren keys create --if-none``: a deployment's first boot)."""
        active = await self.active()
        if active:
            return active
        return await self.create(name, role=role, scopes=scopes, agents=agents,
                                 expires_at=expires_at)

    async def list_keys(self) -> list[ApiKey]:
        """Every key, newest first, revoked ones included."""
        return await self._store.list_keys()

    async def active(self) -> list[ApiKey]:
        """The keys neither revoked nor expired."""
        return [key for key in await self._store.list_keys() if key.active]

    async def revoke(self, id_or_prefix: str) -> ApiKey | None:
        """Revoke the key with this id or prefix for good; its record, or ``None``."""
        return await self._store.revoke_key(id_or_prefix)

    async def verify(self, token: str) -> ApiKey | None:
        """The record of ``token`` if it is an active key (the server's ``KeyCache`` asks)."""
        return await self._store.verify_key(token)
