"""The ``postgres`` store driver: control schema, one schema per agent, runs and events."""

from __future__ import annotations

import asyncio
import functools
import hmac
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout, TooManyRequests

from toren.agents import AgentSpec
from toren.config import Settings
from toren.core import events as ev
from toren.core.events import Event, NewEvent
from toren.errors import DatabaseUnavailable, TorenError
from toren.keys import (
    ApiKey,
    check_key_name,
    generate_key,
    hash_secret,
    parse_key,
    parse_key_reference,
)
from toren.seams.interfaces import (
    Lease,
    LeaseBusy,
    Migration,
    OutgoingMessage,
    RunRecord,
    RunUpdate,
    Store,
)
from toren_postgres import migrations
from toren_postgres.connection import check_connection, describe_url
from toren_postgres.embedded import EmbeddedPostgres, ensure_embedded
from toren_postgres.queries import query
from toren_postgres.runs import RunLog

_Method = TypeVar("_Method", bound=Callable[..., Awaitable[Any]])


#: SQLSTATEs of a server that is going away or not yet accepting connections (class 08 is
#: the connection exceptions).
_SERVER_UNAVAILABLE = frozenset({"57P01", "57P02", "57P03"})


def unreachable(exc: psycopg.OperationalError) -> bool:
    """Whether ``exc`` says the database cannot be reached (no connection within the pool's
    timeout, a connection lost or refused), rather than that a statement failed."""
    if isinstance(exc, PoolTimeout | PoolClosed | TooManyRequests):
        return True
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _SERVER_UNAVAILABLE


def _translate_unreachable(method: _Method) -> _Method:
    @functools.wraps(method)
    async def translated(self: PostgresStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return await method(self, *args, **kwargs)
        except psycopg.OperationalError as exc:
            if not unreachable(exc):
                raise
            # the driver's words may name hosts and addresses: they stay in the cause
            reason = (f"no database connection within {self.settings.pool_timeout_s:g}s "
                      "(TOREN_POOL_TIMEOUT)" if isinstance(exc, PoolTimeout)
                      else "the connection to the database was lost")
            raise DatabaseUnavailable(f"the database is unavailable: {reason}; retry "
                                      "shortly") from exc

    return translated  # type: ignore[return-value]


def _translating_unreachable(cls: type[PostgresStore]) -> type[PostgresStore]:
    """Every public coroutine method of ``cls`` raises ``DatabaseUnavailable`` (retryable;
    503 on the HTTP API) when the database cannot be reached. Translated here, at the
    store's edge: inside, ``RunLog`` still sees psycopg's errors (it tells a lost commit
    from a lost connection by them)."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(member):
            setattr(cls, name, _translate_unreachable(member))
    return cls


@_translating_unreachable
class PostgresStore(Store):
    """State in Postgres: ``DATABASE_URL`` if set, else the embedded server under TOREN_HOME."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.url: str | None = settings.database_url
        self.embedded: EmbeddedPostgres | None = None
        self.server_version = "?"
        self._pool: AsyncConnectionPool | None = None
        self._log: RunLog | None = None

    @property
    def description(self) -> str:
        if self.embedded is not None:
            return (f"embedded Postgres {self.server_version} (data in {self.embedded.pgdata}; "
                    "set DATABASE_URL to use a server)")
        if self.url is None:
            return "embedded Postgres (not started)"
        return f"Postgres {self.server_version} at {describe_url(self.url)} (DATABASE_URL)"

    @property
    def pool(self) -> AsyncConnectionPool:
        if self._pool is None:
            raise RuntimeError("PostgresStore.open() has not been awaited")
        return self._pool

    async def open(self) -> None:
        if self.url is None:
            self.embedded = await asyncio.to_thread(ensure_embedded, self.settings.home)
            self.url = self.embedded.url
        self.server_version = await check_connection(self.url, self.settings.connect_timeout_s)
        # A call waits at most pool_timeout_s for a connection, so an outage is a quick
        # DatabaseUnavailable. A lost connection is retried with backoff for as long, then
        # afresh on the next call: the pool's backoff would otherwise grow for 5 minutes and
        # leave the server failing for tens of seconds after the database is back.
        self._pool = AsyncConnectionPool(
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
            raise DatabaseUnavailable(
                f"cannot open a connection pool to {describe_url(self.url)}: {exc}") from exc
        self._log = RunLog(self._pool)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
            self._log = None

    async def pending_migrations(self, agents: Sequence[AgentSpec]) -> list[Migration]:
        async with self.pool.connection() as conn:
            return await migrations.pending(conn, agents)

    async def migrate(self, agents: Sequence[AgentSpec]) -> list[Migration]:
        async with self.pool.connection() as conn:
            return await migrations.migrate(conn, agents)

    def render_migrations(self, pending: Sequence[Migration]) -> str:
        return migrations.render(pending)

    async def health(self) -> dict[str, Any]:
        try:
            async with asyncio.timeout(2):
                async with self.pool.connection() as conn:
                    await conn.execute("SELECT 1")
            return {"reachable": True, "server_version": self.server_version}
        except (TimeoutError, psycopg.Error, RuntimeError) as exc:
            return {"reachable": False, "error": " ".join(str(exc).split())
                    or type(exc).__name__}

    # -- runs and the event log ------------------------------------------------------------

    @property
    def log(self) -> RunLog:
        if self._log is None:
            raise RuntimeError("PostgresStore.open() has not been awaited")
        return self._log

    async def create_run(self, agent: str, run_id: str, input: Any, *,
                         idempotency_key: str | None, events: Sequence[NewEvent],
                         messages: Sequence[OutgoingMessage], kind: str = "run",
                         status: str = "queued") -> tuple[str, bool]:
        return await self.log.create_run(agent, run_id, input, idempotency_key=idempotency_key,
                                         events=events, messages=messages, kind=kind,
                                         status=status)

    async def acquire_lease(self, run_id: str, stream: str, holder: str,
                            ttl_s: float) -> Lease | None:
        return await self.log.acquire_lease(run_id, stream, holder, ttl_s)

    async def acquire_and_load(self, agent: str, run_id: str, stream: str, holder: str,
                               ttl_s: float, *, with_finished: bool = False
                               ) -> tuple[Lease, list[Event]] | LeaseBusy:
        return await self.log.acquire_and_load(agent, run_id, stream, holder, ttl_s,
                                               with_finished=with_finished)

    async def release_lease(self, lease: Lease) -> None:
        await self.log.release_lease(lease)

    async def load_stream(self, agent: str, run_id: str, stream: str) -> list[Event]:
        return await self.log.load_stream(agent, run_id, stream)

    async def append(self, agent: str, lease: Lease, expected_seq: int,
                     events: Sequence[NewEvent], *, ttl_s: float,
                     messages: Sequence[OutgoingMessage] = (), run_update: RunUpdate | None = None,
                     ack: Any = None, release: bool = False, progress: Any = None) -> None:
        await self.log.append(agent, lease, expected_seq, events, ttl_s=ttl_s,
                              messages=messages, run_update=run_update, ack=ack, release=release,
                              progress=progress)

    async def append_unleased(self, agent: str, run_id: str, stream: str,
                              events: Sequence[NewEvent], *,
                              run_update: RunUpdate | None = None,
                              only_if_active: bool = True) -> bool:
        return await self.log.append_unleased(agent, run_id, stream, events,
                                              run_update=run_update,
                                              only_if_active=only_if_active)

    async def session_input(self, agent: str, run_id: str, stream: str,
                            events: Sequence[NewEvent], messages: Sequence[OutgoingMessage],
                            idempotency_key: str | None = None
                            ) -> tuple[bool, str | None, int]:
        return await self.log.session_input(agent, run_id, stream, events, messages,
                                            idempotency_key)

    async def get_run(self, run_id: str, agent: str | None = None) -> RunRecord | None:
        agents = [agent] if agent else list(await self.registered_agents())
        for name in agents:
            record = await self.log.get_run(name, run_id)
            if record is not None:
                return record
        return None

    async def list_runs(self, *, agent: str | None = None, status: str | None = None,
                        limit: int = 50, agents: Sequence[str] | None = None,
                        before: tuple[datetime, str] | None = None,
                        kind: str | None = None) -> list[RunRecord]:
        names = [agent] if agent else list(agents or await self.registered_agents())
        found: list[RunRecord] = []
        for name in names:
            found += await self.log.list_runs(name, status=status, limit=limit, before=before,
                                              kind=kind)
        found.sort(key=lambda run: (run.created_at is not None, run.created_at, run.id),
                   reverse=True)
        return found[:limit]

    async def load_events(self, agent: str, run_id: str,
                          after: Mapping[str, int] | None = None) -> list[Event]:
        return await self.log.load_events(agent, run_id, after)

    async def live_workers(self, max_age_s: float) -> list[dict[str, Any]]:
        return await self.log.live_workers(max_age_s)

    async def save_prompt(self, agent: str, sha256: str, text: str) -> None:
        await self.log.save_prompt(agent, sha256, text)

    async def load_prompts(self, agent: str, hashes: Sequence[str]) -> dict[str, str]:
        return await self.log.load_prompts(agent, hashes)

    async def ensure_messages(self, agent: str, run_id: str,
                              messages: Sequence[OutgoingMessage]) -> int:
        return await self.log.ensure_messages(agent, run_id, messages)

    async def cancel_run(self, run_id: str, reason: str) -> RunRecord | None:
        record = await self.get_run(run_id)
        if record is None or record.status in ev.TERMINAL_STATUSES:
            return record
        await self.log.append_unleased(
            record.agent, run_id, ev.RUN_STREAM, [NewEvent(ev.RUN_CANCELLED, {"reason": reason})],
            run_update=RunUpdate(status="cancelled", stop_reason="cancelled", finished=True),
            drop_messages=True)
        return await self.log.get_run(record.agent, run_id)

    async def guardian_sweep(self, agents: Sequence[str]) -> list[str]:
        return await self.log.guardian_sweep(agents)

    async def registered_agents(self) -> dict[str, str]:
        return await self.log.registered_agents()

    async def heartbeat(self, worker: dict[str, Any], ttl_s: float,
                        message_ids: Sequence[int], leases: Sequence[Lease] = ()) -> None:
        await self.log.heartbeat(worker, ttl_s, message_ids, leases)

    async def sign_out(self, worker_id: str) -> None:
        await self.log.sign_out(worker_id)

    # -- API keys ----------------------------------------------------------------------------

    async def create_key(self, name: str) -> tuple[ApiKey, str]:
        name = check_key_name(name)
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            for _ in range(5):  # prefixes are 32 random bits: even one collision is rare
                new = generate_key()
                await cursor.execute(query("create_key"),
                                     {"name": name, "prefix": new.prefix, "hash": new.hash})
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
                  revoked_at=row["revoked_at"])
