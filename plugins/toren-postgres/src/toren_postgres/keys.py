"""The ``KeyStore`` in Postgres: ``toren_control.keys``, a hash and a public prefix per key."""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from toren.plugin import TorenError
from toren.plugin.drivers import (
    ApiKey,
    KeyNameTaken,
    KeyStore,
    check_key_grant,
    check_key_name,
    generate_key,
    hash_secret,
    parse_key,
    parse_key_reference,
)
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import query


class PostgresKeyStore(PostgresConnection, KeyStore):
    """The ``KeyStore`` of the Postgres store."""

    async def create_key(self, name: str, *, role: str = "admin", scopes: Sequence[str] = (),
                         agents: Sequence[str] | None = None,
                         expires_at: datetime | None = None) -> tuple[ApiKey, str]:
        name = check_key_name(name)
        grant = check_key_grant(role, scopes, agents)
        params = {"name": name, "role": grant.role, "scopes": list(grant.scopes),
                  "agents": list(grant.agents) if grant.agents is not None else None,
                  "expires_at": expires_at}
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            for _ in range(5):  # prefixes are 32 random bits: even one collision is rare
                new = generate_key()
                try:
                    await cursor.execute(query("create_key"),
                                         params | {"prefix": new.prefix, "hash": new.hash})
                except psycopg.errors.UniqueViolation as exc:
                    if exc.diag.constraint_name != "keys_active_name":
                        raise
                    raise KeyNameTaken(
                        f"an active API key is named {name!r} already (names are unique, "
                        "ignoring case): pick another name, or revoke that key first "
                        "(toren keys list)") from None
                row = await cursor.fetchone()
                if row is not None:
                    return _key_record(row), new.token
        raise TorenError("could not draw an unused API key prefix in five tries")

    async def list_keys(self) -> list[ApiKey]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(query("list_keys"))
            return [_key_record(row) for row in await cursor.fetchall()]

    async def revoke_key(self, id_or_prefix: str) -> ApiKey | None:
        key_id, prefix = parse_key_reference(id_or_prefix)
        if key_id is None and prefix is None:
            return None
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(query("revoke_key"), {"id": key_id, "prefix": prefix})
            row = await cursor.fetchone()
        return None if row is None else _key_record(row)

    async def verify_key(self, token: str) -> ApiKey | None:
        parsed = parse_key(token)
        if parsed is None:
            return None
        prefix, secret = parsed
        presented = hash_secret(secret)
        async with (self.pool.connection() as conn,
                    conn.cursor(row_factory=dict_row) as cursor):
            await cursor.execute(query("find_key"), {"prefix": prefix})
            for row in await cursor.fetchall():
                if not hmac.compare_digest(row.pop("hash"), presented):
                    continue
                if row.pop("stale"):
                    await cursor.execute(query("touch_key"), {"id": row["id"]})
                    touched = await cursor.fetchone()
                    if touched is not None:  # else a concurrent request recorded it
                        row["last_used_at"] = touched["last_used_at"]
                return _key_record(row)
        return None


def _key_record(row: dict[str, Any]) -> ApiKey:
    return ApiKey(id=str(row["id"]), name=row["name"], prefix=row["prefix"],
                  created_at=row["created_at"], last_used_at=row["last_used_at"],
                  revoked_at=row["revoked_at"], role=row["role"],
                  scopes=tuple(row["scopes"] or ()),
                  agents=tuple(row["agents"]) if row["agents"] is not None else None,
                  expires_at=row["expires_at"])
