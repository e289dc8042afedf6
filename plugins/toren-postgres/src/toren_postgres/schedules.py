"""The ``ScheduleStore`` in Postgres: ``toren_control.schedules`` and ``schedule_fires``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from toren.plugin import ScheduleNotFound, ScheduleRemoved, TorenError
from toren.plugin.drivers import (
    RECENT_FIRES,
    FiredSlot,
    RunFactory,
    ScheduleRecord,
    ScheduleSpec,
    ScheduleStore,
    SlotToFire,
    due_slots,
    next_slot,
    schema_name_for,
)
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import agent_query, query
from toren_postgres.runs import create_run_params


class PostgresScheduleStore(PostgresConnection, ScheduleStore):
    """The ``ScheduleStore`` of the Postgres store.

    The claim is a row lock (``FOR UPDATE SKIP LOCKED``) held by the transaction that records
    the slot in ``schedule_fires`` (primary key: agent, schedule, slot time), creates its run
    and advances ``next_fire_at``: a worker killed mid-way commits none of it, and the next
    worker claims the same slot.
    """

    async def sync_schedules(self, agent: str, schedules: Sequence[ScheduleSpec]) -> None:
        async with self.pool.connection() as conn, conn.transaction():
            now = await _now(conn)
            for spec in schedules:
                await conn.execute(query("sync_schedule"), {
                    "agent": agent, "name": spec.name, "cron": spec.cron,
                    "timezone": spec.timezone, "input": Jsonb(spec.input),
                    "missed": spec.missed, "catchup_limit": spec.catchup_limit,
                    "next_fire_at": next_slot(spec.cron, spec.timezone, now)})
            await conn.execute(query("retire_schedules"), {
                "agent": agent, "names": [spec.name for spec in schedules]})

    async def seconds_to_next_slot(self, agents: Sequence[str]) -> float | None:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("next_due_schedule"), {"agents": list(agents)})
            row = await cursor.fetchone()
        return None if row is None or row[0] is None else float(row[0])

    async def fire_due_schedules(self, agents: Sequence[str], make_run: RunFactory, *,
                                 limit: int = 20) -> list[FiredSlot]:
        fired: list[FiredSlot] = []
        # one schedule per transaction: a schedule's slots never wait on another's
        for _ in range(limit):
            async with self.pool.connection() as conn, conn.transaction():
                cursor = await conn.cursor(row_factory=dict_row).execute(
                    query("claim_due_schedules"), {"agents": list(agents), "limit": 1})
                row = await cursor.fetchone()
                if row is None:
                    break
                due = due_slots(row["spec"], row["timezone"], row["next_fire_at"], row["now"],
                                missed=row["missed"], catchup_limit=row["catchup_limit"])
                for slot_at, trigger in due.fire:
                    found = await _fire(conn, row, slot_at, trigger, make_run)
                    if found is not None:
                        fired.append(found)
                await conn.execute(query("advance_schedule"), {
                    "id": row["id"], "next_fire_at": due.next_fire_at, "fired": bool(due.fire),
                    "last_slot_at": due.fire[-1][0] if due.fire else None,
                    "skipped": due.skipped})
        return fired

    async def trigger_schedule(self, agent: str, name: str, make_run: RunFactory) -> FiredSlot:
        async with self.pool.connection() as conn, conn.transaction():
            row = await _lock(conn, agent, name)
            if not row["enabled"]:
                raise ScheduleRemoved(f"schedule {name!r} of agent {agent!r} is no longer in "
                                      "its agent.yaml; add it back to fire it")
            found = await _fire(conn, row, row["now"], "manual", make_run)
            await conn.execute(query("advance_schedule"), {
                "id": row["id"], "next_fire_at": row["next_fire_at"], "fired": True,
                "last_slot_at": None, "skipped": 0})
        if found is None:  # two triggers in the same microsecond: the other one fired it
            raise TorenError(f"schedule {name!r} of agent {agent!r} was fired at this instant "
                             "by another request; try again")
        return found

    async def set_schedule_paused(self, agent: str, name: str, paused: bool) -> ScheduleRecord:
        async with self.pool.connection() as conn, conn.transaction():
            row = await _lock(conn, agent, name)
            resumed = row["paused"] and not paused
            await conn.execute(query("set_schedule_paused"), {
                "id": row["id"], "paused": paused,
                "next_fire_at": (next_slot(row["spec"], row["timezone"], row["now"])
                                 if resumed else None)})
        return (await self.list_schedules([agent], name, fires=RECENT_FIRES))[0]

    async def list_schedules(self, agents: Sequence[str], name: str | None = None, *,
                             fires: int = 0) -> list[ScheduleRecord]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(query("list_schedules"), {"agents": list(agents), "name": name})
            rows = await cursor.fetchall()
            found = []
            for row in rows:
                recent: list[dict[str, Any]] = []
                if fires:
                    await cursor.execute(query("schedule_fires"), {
                        "agent": row["agent"], "name": row["name"], "limit": fires})
                    recent = [{"slot_at": f["slot_at"].isoformat(), "run_id": str(f["run_id"]),
                               "trigger": f["trigger"], "fired_at": f["fired_at"].isoformat()}
                              for f in await cursor.fetchall()]
                found.append(ScheduleRecord(
                    agent=row["agent"], name=row["name"], cron=row["spec"],
                    timezone=row["timezone"], input=row["input"], missed=row["missed"],
                    catchup_limit=row["catchup_limit"], next_fire_at=row["next_fire_at"],
                    last_fired_at=row["last_fired_at"], last_slot_at=row["last_slot_at"],
                    paused=row["paused"], present=row["enabled"],
                    skipped_slots=row["skipped_slots"], fires=recent))
        return found


async def _now(conn: psycopg.AsyncConnection) -> datetime:
    cursor = await conn.execute(query("database_now"))
    row = await cursor.fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


async def _lock(conn: psycopg.AsyncConnection, agent: str, name: str) -> dict[str, Any]:
    cursor = await conn.cursor(row_factory=dict_row).execute(
        query("lock_schedule"), {"agent": agent, "name": name})
    row = await cursor.fetchone()
    if row is None:
        raise ScheduleNotFound(f"agent {agent!r} has no schedule {name!r} (see `toren schedules "
                               "list`)")
    return row


async def _fire(conn: psycopg.AsyncConnection, row: dict[str, Any], slot_at: datetime,
                trigger: str, make_run: RunFactory) -> FiredSlot | None:
    """Record one slot and create its run, in the caller's transaction; ``None`` if the slot
    had already fired."""
    agent, name = row["agent"], row["name"]
    new = make_run(SlotToFire(agent=agent, schedule=name, input=row["input"], slot_at=slot_at,
                              trigger=trigger, timezone=row["timezone"]))
    cursor = await conn.execute(query("record_fire"), {
        "agent": agent, "schedule": name, "slot_at": slot_at, "run_id": new.run_id,
        "trigger": trigger})
    if await cursor.fetchone() is None:
        return None
    schema = schema_name_for(agent)
    await conn.execute(agent_query("create_run", schema), create_run_params(
        agent, new.run_id, new.input, idempotency_key=new.idempotency_key, events=new.events,
        messages=new.messages, priority=new.priority, concurrency_key=new.concurrency_key))
    await conn.execute(agent_query("tag_scheduled_run", schema),
                       {"run_id": new.run_id, "schedule": name})
    return FiredSlot(agent=agent, schedule=name, slot_at=slot_at, trigger=trigger,
                     run_id=new.run_id)
