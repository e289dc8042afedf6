"""The ``WorkerRegistry`` in Postgres: ``toren_control.workers``, and renewals of what workers
hold (leases, and messages claimed from the queue table)."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row

from toren.plugin.drivers import Lease, WorkerRegistry
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import query


class PostgresWorkerRegistry(PostgresConnection, WorkerRegistry):
    """The ``WorkerRegistry`` of the Postgres store."""

    async def heartbeat(self, worker: dict[str, Any], ttl_s: float,
                        message_ids: Sequence[int], leases: Sequence[Lease] = ()) -> None:
        params = {
            "worker_id": worker["id"], "version": worker["version"],
            "agents": list(worker["agents"]), "lane": worker.get("lane", "all"),
            "supervisor": worker.get("supervisor"),
            "hostname": socket.gethostname(),
            "pid": os.getpid(), "ttl_s": ttl_s, "message_ids": list(message_ids),
            "lease_runs": [lease.run_id for lease in leases],
            "lease_streams": [lease.stream for lease in leases]}
        async with self.pool.connection() as conn, conn.pipeline():
            for name in ("heartbeat_leases", "heartbeat_messages", "heartbeat_worker"):
                await conn.execute(query(name), params)

    async def database_now(self) -> datetime:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("database_clock"))
            row = await cursor.fetchone()
        assert row is not None
        now: datetime = row[0]
        return now

    async def sign_out(self, worker_id: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(query("sign_out"), {"worker_id": worker_id})

    async def live_workers(self, max_age_s: float) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(query("live_workers"), {"max_age_s": max_age_s})
            return list(await cursor.fetchall())
