"""The chat channels' store interfaces in Postgres: ``toren_control.channel_*`` (migrations 0011
and 0014).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from toren.plugin import ChannelPairing, ChannelSend, ChannelUpdate
from toren.plugin.drivers import ChannelChats, ChannelInbox, ChannelOutbox
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import parse_queries


@cache
def _queries() -> dict[str, str]:
    text = resources.files("toren_postgres").joinpath("sql/channels.sql").read_text("utf-8")
    return parse_queries(text)


#: The ``channel_keys`` row of the key that signs approval buttons (migration 0014).
BUTTON_KEY_NAME = "approval_buttons"


def _q(name: str) -> str:
    return _queries()[name]


class _ChannelQueries(PostgresConnection):
    async def _fetch(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(_q(name), params)
            return await cursor.fetchall() if cursor.description else []


class PostgresChannelInbox(_ChannelQueries, ChannelInbox):
    """The ``ChannelInbox`` of the Postgres store.

    The lease is a row renewed by its holder and taken over by anyone once ``expires_at`` has
    passed (no session advisory lock: a lock dies with its connection, and a pooled
    connection outlives a hung holder). The inbox's primary key (channel, agent, update id)
    makes recording an update idempotent.
    """

    async def claim_channel_lease(self, channel: str, agent: str, holder: str,
                                  ttl_s: float) -> bool:
        rows = await self._fetch("claim_lease", {"channel": channel, "agent": agent,
                                                 "holder": holder, "ttl_s": ttl_s})
        return bool(rows)

    async def release_channel_lease(self, channel: str, agent: str, holder: str) -> None:
        await self._fetch("release_lease", {"channel": channel, "agent": agent,
                                            "holder": holder})

    async def record_channel_update(self, update: ChannelUpdate) -> bool:
        rows = await self._fetch("record_update", {
            "channel": update.channel, "agent": update.agent, "update_id": update.update_id,
            "chat_id": update.chat_id, "user_id": update.user_id, "kind": update.kind,
            "text": update.text, "sort_key": update.sort_key, "payload": Jsonb(update.payload)})
        return bool(rows)

    async def pending_channel_updates(self, channel: str, agent: str,
                                      limit: int = 100) -> list[ChannelUpdate]:
        rows = await self._fetch("pending_updates", {"channel": channel, "agent": agent,
                                                     "limit": limit})
        return [_update(row) for row in rows]

    async def delivered_channel_updates(self, channel: str, agent: str) -> list[ChannelUpdate]:
        rows = await self._fetch("delivered_updates", {"channel": channel, "agent": agent})
        return [_update(row) for row in rows]

    async def set_channel_update(self, channel: str, agent: str, update_id: str, status: str,
                                 *, session_id: str | None = None,
                                 turn: int | None = None) -> None:
        await self._fetch("set_update", {"channel": channel, "agent": agent,
                                         "update_id": update_id, "status": status,
                                         "session_id": session_id, "turn": turn})

    async def answer_channel_update(self, channel: str, agent: str, update_id: str,
                                    status: str, sends: list[ChannelSend]) -> None:
        async with self.pool.connection() as conn, conn.transaction():
            for send in sends:
                await conn.execute(_q("enqueue_send"), _send_params(channel, agent, send))
            await conn.execute(_q("set_update"), {"channel": channel, "agent": agent,
                                                  "update_id": update_id, "status": status,
                                                  "session_id": None, "turn": None})



class PostgresChannelChats(_ChannelQueries, ChannelChats):
    """The ``ChannelChats`` of the Postgres store: ``channel_chats``, ``channel_pairings`` and
    ``channel_keys``."""

    async def chat_session(self, channel: str, agent: str, chat_id: str) -> str | None:
        rows = await self._fetch("chat_session", {"channel": channel, "agent": agent,
                                                  "chat_id": chat_id})
        return rows[0]["session_id"] if rows else None

    async def bind_chat_session(self, channel: str, agent: str, chat_id: str,
                                session_id: str) -> str:
        rows = await self._fetch("bind_chat", {"channel": channel, "agent": agent,
                                               "chat_id": chat_id, "session_id": session_id})
        return str(rows[0]["session_id"])

    async def session_chat(self, channel: str, session_id: str) -> tuple[str, str] | None:
        rows = await self._fetch("session_chat", {"channel": channel, "session_id": session_id})
        return (rows[0]["agent"], rows[0]["chat_id"]) if rows else None

    async def channel_user_status(self, channel: str, agent: str, user_id: str) -> str | None:
        rows = await self._fetch("user_status", {"channel": channel, "agent": agent,
                                                 "user_id": user_id})
        return rows[0]["status"] if rows else None

    async def request_pairing(self, pairing: ChannelPairing) -> ChannelPairing:
        params = {"channel": pairing.channel, "agent": pairing.agent,
                  "user_id": pairing.user_id, "chat_id": pairing.chat_id,
                  "code": pairing.code, "display_name": pairing.display_name}
        await self._fetch("request_pairing", params)
        return _pairing((await self._fetch("get_pairing", params))[0])

    async def list_pairings(self, status: str | None = None) -> list[ChannelPairing]:
        return [_pairing(row) for row in await self._fetch("list_pairings", {"status": status})]

    async def decide_pairing(self, code: str, status: str,
                             decided_by: str) -> ChannelPairing | None:
        rows = await self._fetch("decide_pairing", {"code": code, "status": status,
                                                    "decided_by": decided_by})
        if not rows:
            rows = await self._fetch("pairing_by_code", {"code": code})
        return _pairing(rows[0]) if rows else None

    async def chat_button_key(self, new_key: bytes) -> bytes:
        params = {"name": BUTTON_KEY_NAME, "key": new_key}
        await self._fetch("make_key", params)
        return bytes((await self._fetch("get_key", params))[0]["key"])


class PostgresChannelOutbox(_ChannelQueries, ChannelOutbox):
    """The ``ChannelOutbox`` of the Postgres store: ``channel_sends``, claimed with
    ``FOR UPDATE SKIP LOCKED``."""

    async def enqueue_channel_sends(self, channel: str, agent: str,
                                    sends: list[ChannelSend]) -> int:
        added = 0
        async with self.pool.connection() as conn, conn.transaction():
            for send in sends:
                cursor = await conn.execute(_q("enqueue_send"),
                                            _send_params(channel, agent, send))
                added += 1 if await cursor.fetchone() else 0
        return added

    async def due_channel_sends(self, channel: str, agent: str,
                                limit: int = 20) -> list[ChannelSend]:
        rows = await self._fetch("due_sends", {"channel": channel, "agent": agent,
                                               "limit": limit})
        return [ChannelSend(key=row["key"], chat_id=row["chat_id"], text=row["text"],
                            payload=row["payload"], channel=row["channel"],
                            agent=row["agent"], attempts=row["attempts"],
                            last_error=row["last_error"], sent_at=row["sent_at"])
                for row in sorted(rows, key=lambda row: row["seq"])]

    async def finish_channel_send(self, channel: str, agent: str, key: str,
                                  error: str | None = None) -> None:
        await self._fetch("finish_send", {"channel": channel, "agent": agent, "key": key,
                                          "error": error[:2000] if error else None})

    async def retry_channel_send(self, channel: str, agent: str, key: str, delay_s: float,
                                 error: str) -> None:
        await self._fetch("retry_send", {"channel": channel, "agent": agent, "key": key,
                                         "delay_s": delay_s, "error": error[:2000]})

    async def release_channel_sends(self, channel: str, agent: str, keys: list[str],
                                    delay_s: float) -> None:
        await self._fetch("release_sends", {"channel": channel, "agent": agent,
                                            "keys": list(keys), "delay_s": delay_s})


def _send_params(channel: str, agent: str, send: ChannelSend) -> dict[str, Any]:
    return {"channel": channel, "agent": agent, "key": send.key, "chat_id": send.chat_id,
            "text": send.text, "payload": Jsonb(send.payload)}


def _update(row: dict[str, Any]) -> ChannelUpdate:
    return ChannelUpdate(channel=row["channel"], agent=row["agent"], update_id=row["update_id"],
                         chat_id=row["chat_id"], user_id=row["user_id"], kind=row["kind"],
                         text=row["text"], sort_key=row["sort_key"], payload=row["payload"],
                         status=row["status"], session_id=row["session_id"], turn=row["turn"],
                         received_at=row["received_at"])


def _pairing(row: dict[str, Any]) -> ChannelPairing:
    return ChannelPairing(channel=row["channel"], agent=row["agent"], user_id=row["user_id"],
                          chat_id=row["chat_id"], code=row["code"], status=row["status"],
                          display_name=row["display_name"], created_at=row["created_at"],
                          decided_at=row["decided_at"], decided_by=row["decided_by"])
