"""The ``WebhookStore`` in Postgres: ``toren_control.webhook_deliveries`` and
``webhook_attempts`` (control migration 0018), written by a trigger on every agent's runs table
(agent migration 0018) in the transaction that changes a run's status."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any

from toren.plugin import Settings
from toren.plugin.drivers import (
    AttemptOutcome,
    WebhookAttempt,
    WebhookDelivery,
    WebhookDeliveryRecord,
    WebhookStore,
)
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.notifications import QueueNotifications
from toren_postgres.queries import parse_queries

#: What the trigger NOTIFYs when it writes deliveries.
CHANNEL = "toren_webhooks"


@cache
def _queries() -> dict[str, str]:
    text = resources.files("toren_postgres").joinpath("sql/webhooks.sql").read_text("utf-8")
    return parse_queries(text)


class PostgresWebhookStore(PostgresConnection, WebhookStore):
    """The ``WebhookStore`` of the Postgres store. An idle dispatcher wakes on the trigger's
    notifications (its own LISTEN connection, opened at the first ``wait_webhooks``)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._webhook_notifications: QueueNotifications | None = None

    async def close(self) -> None:
        if self._webhook_notifications is not None:
            await self._webhook_notifications.stop()
            self._webhook_notifications = None
        await super().close()

    async def claim_webhook_deliveries(self, agents: Sequence[str], holder: str, limit: int,
                                       visibility_s: float) -> list[WebhookDelivery]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_queries()["claim_deliveries"], {
                "agents": list(agents), "holder": holder, "limit": limit,
                "visibility_s": visibility_s})
            rows = await cursor.fetchall()
        return [WebhookDelivery(str(row[0]), row[1], str(row[2]), row[3], row[4], row[5],
                                row[6], row[7], row[8], row[9])
                for row in rows]

    async def fix_webhook_body(self, delivery_id: str, body: str) -> str:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_queries()["fix_body"], {"id": delivery_id,
                                                                 "body": body})
            row = await cursor.fetchone()
        return str(row[0]) if row is not None else body

    async def record_webhook_attempt(self, delivery_id: str, holder: str,
                                     attempt: WebhookAttempt, outcome: AttemptOutcome,
                                     retry_in_s: float = 0.0) -> bool:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_queries()["record_attempt"], {
                "id": delivery_id, "holder": holder, "outcome": outcome,
                "retry_in_s": retry_in_s, "attempt": attempt.attempt,
                "started_at": attempt.started_at, "duration_ms": attempt.duration_ms,
                "status_code": attempt.status_code, "error": attempt.error})
            return await cursor.fetchone() is not None

    async def wait_webhooks(self, timeout_s: float) -> None:
        if self._webhook_notifications is None:
            self._webhook_notifications = QueueNotifications(
                self._webhook_listen_url, "toren-webhooks-listen", CHANNEL)
            self._webhook_notifications.start()
        await self._webhook_notifications.wait(timeout_s)

    def _webhook_listen_url(self) -> str:
        assert self.url is not None  # open() resolved it
        return self.url

    async def forget_webhook_deliveries(self, ended_before_s: float) -> int:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_queries()["forget_deliveries"],
                                        {"ended_before_s": ended_before_s})
            return cursor.rowcount

    async def webhook_deliveries(self, run_id: str) -> list[WebhookDeliveryRecord]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_queries()["run_deliveries"], {"run_id": run_id})
            rows = await cursor.fetchall()
        return [WebhookDeliveryRecord(
            str(row[0]), row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8],
            row[9], row[10], [_attempt(item) for item in row[11]]) for row in rows]


def _attempt(item: dict[str, Any]) -> WebhookAttempt:
    return WebhookAttempt(item["attempt"], datetime.fromisoformat(item["started_at"]),
                          float(item["duration_ms"]), item["status_code"], item["error"])
