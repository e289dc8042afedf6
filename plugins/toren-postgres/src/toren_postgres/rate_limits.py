"""The ``RateLimitStore`` of the Postgres store: sliding windows in ``toren_control`` (control
migration ``0023_rate_limits``), one statement a reservation."""

from __future__ import annotations

from collections.abc import Sequence

from toren.plugin import Settings
from toren.plugin.drivers import (
    BucketState,
    RateDecision,
    RateLimitStore,
    RateRequest,
    RateSettlement,
)
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.notifications import QueueNotifications
from toren_postgres.queries import query

#: NOTIFYed when a parked call may fit (a settlement returned tokens, a waiter was served).
CHANNEL = "toren_rate_limits"


class PostgresRateLimitStore(PostgresConnection, RateLimitStore):
    """Reservations through ``toren_control.reserve_rate``; parked calls wake on
    ``toren_rate_limits`` (one LISTEN connection per process, opened at the first wait)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._rate_notifications: QueueNotifications | None = None

    async def close(self) -> None:
        if self._rate_notifications is not None:
            await self._rate_notifications.stop()
            self._rate_notifications = None
        await super().close()

    async def reserve_rate(self, request: RateRequest) -> RateDecision:
        buckets = request.buckets
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("reserve_rate"), {
                "buckets": [b.name for b in buckets],
                "requests_limits": [b.requests for b in buckets],
                "input_limits": [b.input_tokens for b in buckets],
                "output_limits": [b.output_tokens for b in buckets],
                "window_s": request.window_s, "requests": request.requests,
                "input": request.input_tokens, "output": request.output_tokens,
                "run_id": request.run_id, "stream": request.stream, "epoch": request.epoch,
                "priority": request.priority, "waiter": request.waiter_id,
                "waited_s": request.waited_s})
            row = await cursor.fetchone()
        assert row is not None
        call_id, wait_s, waiter_id, blocked_by = row
        return RateDecision(call_id, None if wait_s is None else float(wait_s), waiter_id,
                            blocked_by)

    async def settle_rate(self, settlements: Sequence[RateSettlement]) -> None:
        if not settlements:
            return
        async with self.pool.connection() as conn:
            await conn.execute(query("settle_rate"), {
                "calls": [s.call_id for s in settlements],
                "requests": [s.requests for s in settlements],
                "inputs": [s.input_tokens for s in settlements],
                "outputs": [s.output_tokens for s in settlements],
                "sent_s_ago": [s.sent_s_ago for s in settlements]})

    async def pause_rate(self, buckets: Sequence[str], seconds: float) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(query("pause_rate"), {"buckets": list(buckets),
                                                     "seconds": seconds})

    async def withdraw_rate_waiter(self, waiter_id: int) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(query("withdraw_rate_waiter"), {"id": waiter_id})

    async def wait_rate_change(self, timeout_s: float) -> None:
        if self._rate_notifications is None:
            self._rate_notifications = QueueNotifications(self._rate_listen_url,
                                                          "toren-rate-limits-listen", CHANNEL)
            self._rate_notifications.start()
        await self._rate_notifications.wait(timeout_s)

    def _rate_listen_url(self) -> str:
        assert self.url is not None  # open() resolved it
        return self.url

    async def rate_limit_state(self) -> list[BucketState]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("rate_limit_state"))
            rows = await cursor.fetchall()
        return [BucketState(name, requests_limit, input_limit, output_limit, float(window),
                            int(requests), int(inputs), int(outputs), int(held), int(waiting),
                            paused, int(waits), float(wait_s), int(pauses))
                for (name, requests_limit, input_limit, output_limit, window, requests, inputs,
                     outputs, held, waiting, paused, waits, wait_s, pauses) in rows]
