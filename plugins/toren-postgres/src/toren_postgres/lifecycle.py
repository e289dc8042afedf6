"""The connection every Postgres store class shares: the database URL or the embedded server,
and one connection pool."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from toren.plugin import DatabaseUnavailable, Settings
from toren.plugin.drivers import StoreLifecycle
from toren_postgres.connection import check_connection, describe_url, with_tcp_timeouts
from toren_postgres.embedded import EmbeddedPostgres, ensure_embedded

#: A pooled connection idle for longer than this is checked (one empty statement) before it
#: is handed out. Under load connections are reused within milliseconds and never checked.
IDLE_CHECK_S = 1.0


class FailoverAwarePool(AsyncConnectionPool):
    """The pool of a Postgres store: psycopg's, which hands out its idle connections unchecked,
    made to notice a server that went away (a restart, a failover to a replica) before its
    callers do.

    * A connection given back broken (its server closed it, or it died) drains the pool: the
      idle connections were to the same server and are most likely dead too. Each would
      otherwise fail its next user in turn; new ones are opened instead, to whichever host of
      a multi-host ``DATABASE_URL`` takes writes now (``target_session_attrs=read-write``).
    * A connection idle for more than ``IDLE_CHECK_S`` is checked before it is handed out
      (an empty statement, one round trip); one that fails the check is given back (which
      drains the pool) and the caller gets a new connection, so the first call after a quiet
      spell does not fail on a connection that died while nobody used it. (psycopg's own
      ``check`` would sleep a backoff of a second or more between dead connections.)
    """

    # psycopg_pool's signature, timeout included
    async def getconn(self, timeout: float | None = None  # noqa: ASYNC109
                      ) -> psycopg.AsyncConnection[Any]:
        conn = await super().getconn(timeout)
        returned = getattr(conn, "_toren_returned_at", None)
        if returned is None or time.monotonic() - returned <= IDLE_CHECK_S:
            return conn
        try:
            await AsyncConnectionPool.check_connection(conn)
        except psycopg.Error:
            await self.putconn(conn)  # broken: drains the pool
            return await super().getconn(timeout)
        return conn

    async def putconn(self, conn: psycopg.AsyncConnection[Any]) -> None:
        broken = conn.pgconn.transaction_status == TransactionStatus.UNKNOWN
        conn._toren_returned_at = time.monotonic()  # type: ignore[attr-defined]
        await super().putconn(conn)
        if broken:
            await self.drain()


class PostgresConnection(StoreLifecycle):
    """``DATABASE_URL`` if set, else the embedded server under TOREN_HOME, through one pool.

    The base of each Postgres store class (``PostgresRunLog``, ``PostgresKeyStore``, ...), so
    each works on its own once opened; ``PostgresStore`` combines them over one pool.
    """

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.url: str | None = settings.database_url
        self.embedded: EmbeddedPostgres | None = None
        self.server_version = "?"
        self._pool: AsyncConnectionPool | None = None

    @property
    def description(self) -> str:
        if self.embedded is not None:
            return (f"embedded Postgres {self.server_version} (data in {self.embedded.pgdata}; "
                    "set DATABASE_URL to use a server)")
        if self.url is None:
            return "embedded Postgres (not started)"
        return f"Postgres {self.server_version} at {describe_url(self.url)} (DATABASE_URL)"

    def missing(self) -> str | None:
        if self.url is not None:
            return None
        pgdata = self.settings.home / "pgdata"
        if (pgdata / "PG_VERSION").exists():
            return None
        return f"no embedded database in {pgdata} (DATABASE_URL is unset)"

    @property
    def pool(self) -> AsyncConnectionPool:
        if self._pool is None:
            raise RuntimeError(f"{type(self).__name__}.open() has not been awaited")
        return self._pool

    async def open(self) -> None:
        if self.url is None:
            self.embedded = await asyncio.to_thread(ensure_embedded, self.settings.home)
            self.url = self.embedded.url
        self.server_version = await check_connection(self.url, self.settings.connect_timeout_s)
        # Every connection is opened from self.url from here on (the pool, the LISTEN
        # connections): a silent peer is then given up within TOREN_DB_TCP_TIMEOUT, not after
        # the kernel's minutes. Added after the check, which reports a malformed URL clearly.
        self.url = with_tcp_timeouts(self.url, self.settings.db_tcp_timeout_s)
        # A call waits at most pool_timeout_s for a connection, so an outage is a quick
        # DatabaseUnavailable. A lost connection is retried with backoff for as long, then
        # afresh on the next call: the pool's backoff would otherwise grow for 5 minutes and
        # leave the server failing for tens of seconds after the database is back. A server
        # that went away (a failover) is noticed by the pool itself (FailoverAwarePool).
        self._pool = FailoverAwarePool(
            self.url, min_size=1, max_size=max(2, self.settings.pool_size),
            kwargs={"autocommit": True,
                    "connect_timeout": max(1, round(self.settings.connect_timeout_s))},
            timeout=self.settings.pool_timeout_s,
            reconnect_timeout=self.settings.pool_timeout_s, open=False, name="toren",
        )
        try:
            await self._pool.open(wait=True, timeout=self.settings.connect_timeout_s + 5)
        except Exception as exc:
            await self._pool.close()
            self._pool = None
            raise DatabaseUnavailable(
                f"cannot open a connection pool to {describe_url(self.url)}: {exc}") from exc

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def health(self) -> dict[str, Any]:
        try:
            async with asyncio.timeout(2):
                async with self.pool.connection() as conn:
                    await conn.execute("SELECT 1")
            return {"reachable": True, "server_version": self.server_version}
        except (TimeoutError, psycopg.Error, RuntimeError) as exc:
            return {"reachable": False, "error": " ".join(str(exc).split())
                    or type(exc).__name__}
