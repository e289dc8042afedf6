"""The ``RunLog`` in Postgres: runs, leases, appends and their outbox writes (Toren's durability
rules, store side)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
import psycopg
from psycopg.types.json import Json, Jsonb
from psycopg_pool import PoolTimeout

from toren.plugin import DatabaseUnavailable, LeaseFenced, LeaseLost, RunCancelled
from toren.plugin.drivers import (
    KEEP,
    ChildLink,
    Event,
    Lease,
    LeaseBusy,
    MessageHandOff,
    NewEvent,
    OutgoingMessage,
    QueueMessage,
    RunLog,
    RunRecord,
    RunUpdate,
    schema_name_for,
)
from toren.plugin.drivers import events as ev
from toren_postgres.connection import out_of_space, out_of_space_error
from toren_postgres.group_commit import GroupCommit, GroupFailed
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import agent_query, query
from toren_postgres.reader import find_run

#: The row of an append found committed after its connection broke (lease held, appended).
_COMMITTED = (1, 1, 0)


def _messages_json(messages: Sequence[OutgoingMessage]) -> Jsonb:
    # encoded as the events are (a message carries the same input as its TaskStarted);
    # psycopg's default, json.dumps, was a measurable share of an append's CPU
    return Jsonb([{"kind": m.kind, "payload": m.payload, "delay_s": m.delay_s}
                  for m in messages], dumps=_dumps)


def _events_json(events: Sequence[NewEvent]) -> Json:
    return Json([e.to_json() for e in events], dumps=_dumps)


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value)  # bytes, which psycopg sends as they are


#: An append's change to the run row when it changes nothing (most appends).
_NO_UPDATE = RunUpdate()


def _run_update_params(update: RunUpdate | None) -> dict[str, Any]:
    if update is None:  # most appends: the parameters made once (callers only read them)
        return _NO_UPDATE_PARAMS
    return {
        "update_run": update != _NO_UPDATE,
        "status": update.status,
        "set_output": update.output is not KEEP,
        "output": None if update.output is KEEP else Jsonb(update.output),
        "stop_reason": update.stop_reason,
        "set_error": update.error is not KEEP,
        "error": None if update.error is KEEP or update.error is None else Jsonb(update.error),
        "finished": update.finished,
    }


_NO_UPDATE_PARAMS = _run_update_params(_NO_UPDATE)


def create_run_params(agent: str, run_id: str, input: Any, *, idempotency_key: str | None,
                      events: Sequence[NewEvent], messages: Sequence[OutgoingMessage],
                      kind: str = "run", status: str = "queued",
                      parent: ChildLink | None = None, hand_off: MessageHandOff | None = None,
                      webhooks: Sequence[Mapping[str, Any]] = (), priority: int = 0,
                      concurrency_key: str | None = None) -> dict[str, Any]:
    """The parameters of the ``create_run`` statement (also run by the schedule claim); with
    ``hand_off``, as many of the messages as its room says are claimed for that worker."""
    if hand_off is None or not messages:
        hand_off = None
    hand_limit = hand_off.room(agent, None, False) if hand_off is not None else 0
    return {"hand_limit": hand_limit,
            "hand_to": hand_off.id if hand_off is not None and hand_limit else None,
            "hand_visibility_s": hand_off.visibility_s if hand_off is not None else 0.0,
            "run_id": run_id, "input": Jsonb(input), "idempotency_key": idempotency_key,
            "events": _events_json(events), "messages": _messages_json(messages),
            "agent": agent, "kind": kind, "status": status,
            "parent_agent": parent.agent if parent else None,
            "parent_run_id": parent.run_id if parent else None,
            "parent_task": parent.task_id if parent else None,
            "child_kind": parent.kind if parent else None,
            "depth": parent.depth if parent else 0,
            "webhooks": Jsonb([dict(w) for w in webhooks]) if webhooks else None,
            "priority": priority, "concurrency_key": concurrency_key}


def _handed(agent: str, run_id: str, handed: str, priority: int = 0) -> list[QueueMessage]:
    """The messages a statement claimed for this process's worker (``[[id, kind, payload],
    ...]``), as a claim returns them (first delivery)."""
    return [QueueMessage(message_id, agent, run_id, kind, payload, 1, waited_s=0.0,
                         priority=priority)
            for message_id, kind, payload in orjson.loads(handed)]


class PostgresRunLog(PostgresConnection, RunLog):
    """The ``RunLog`` of the Postgres store. Its outbox is ``toren_control.queue``: every
    statement that sends messages inserts them there itself, so they commit with it. Each
    leased append also reads the run's agent version, told to ``on_run_version``'s callback."""

    _version_seen: Callable[[str, str | None], None] | None = None
    _watched_seen: Callable[[str, bool], None] | None = None
    _hand_off: MessageHandOff | None = None

    def hand_off_to(self, worker: MessageHandOff | None) -> None:
        """See ``RunLog.hand_off_to``: the append statement claims them (``hand_limit``)."""
        self._hand_off = worker

    def on_run_version(self, seen: Callable[[str, str | None], None]) -> None:
        """See ``AgentVersionStore.on_run_version``: called after each committed append."""
        self._version_seen = seen

    def on_run_watched(self, seen: Callable[[str, bool], None]) -> None:
        """See ``LiveText.on_run_watched``: called after each committed leased append."""
        self._watched_seen = seen

    async def create_run(self, agent: str, run_id: str, input: Any, *,
                         idempotency_key: str | None, events: Sequence[NewEvent],
                         messages: Sequence[OutgoingMessage], kind: str = "run",
                         status: str = "queued",
                         parent: ChildLink | None = None,
                         webhooks: Sequence[Mapping[str, Any]] = (),
                         priority: int = 0,
                         concurrency_key: str | None = None) -> tuple[str, bool]:
        statement = agent_query("create_run", schema_name_for(agent))
        hand_off = self._hand_off
        params = create_run_params(agent, run_id, input, idempotency_key=idempotency_key,
                                   events=events, messages=messages, kind=kind, status=status,
                                   parent=parent, hand_off=hand_off, webhooks=webhooks,
                                   priority=priority, concurrency_key=concurrency_key)
        # A concurrent create with the same key may commit after this statement's snapshot:
        # then neither branch returns a row, and a second try sees the winner.
        for _ in range(3):
            async with self.pool.connection() as conn:
                cursor = await conn.execute(statement, params)
                row = await cursor.fetchone()
            if row is not None:
                found = str(row[0])
                if row[1] is not None and hand_off is not None:
                    hand_off.handed(_handed(agent, found, row[1], priority))
                return found, found == run_id
        raise RuntimeError(f"could not create or find run with idempotency key {idempotency_key}")

    async def acquire_lease(self, run_id: str, stream: str, holder: str,
                            ttl_s: float) -> Lease | None:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("acquire_lease"), {
                "run_id": run_id, "stream": stream, "holder": holder, "ttl_s": ttl_s})
            row = await cursor.fetchone()
        return Lease(run_id, stream, holder, row[0]) if row else None

    async def acquire_and_load(self, agent: str, run_id: str, stream: str, holder: str,
                               ttl_s: float, *, with_finished: bool = False
                               ) -> tuple[Lease, list[Event]] | LeaseBusy:
        params = {"run_id": run_id, "stream": stream, "holder": holder, "ttl_s": ttl_s,
                  "with_finished": with_finished}
        async with self.pool.connection() as conn:
            # one statement, its own transaction: the lease, then the read in a snapshot taken
            # once the lease is ours (see the function acquire_and_load, agent migration 0013)
            cursor = await conn.execute(
                agent_query("acquire_and_load", schema_name_for(agent)), params)
            row = await cursor.fetchone()
        assert row is not None
        epoch, stream_events, finished, retry_in_s, created_at, traceparent, version = row
        if epoch is None:
            return LeaseBusy(retry_in_s=retry_in_s if retry_in_s is not None else ttl_s)
        events = [Event(run_id, stream, seq, kind, data)
                  for seq, kind, data in orjson.loads(stream_events or "[]")]
        # each row: stream, seq, data and (since agent migration 0017) type
        events += [Event(run_id, row[0], row[1], row[3] if len(row) > 3 else "TaskFinished",
                         row[2])
                   for row in orjson.loads(finished or "[]")]
        return Lease(run_id, stream, holder, epoch, run_created_at=created_at,
                     traceparent=traceparent, agent_version=version, version_read=True), events

    async def release_lease(self, lease: Lease) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(query("release_lease"), {
                "run_id": lease.run_id, "stream": lease.stream, "holder": lease.holder,
                "epoch": lease.epoch})

    async def append(self, agent: str, lease: Lease, expected_seq: int,
                     events: Sequence[NewEvent], *, ttl_s: float,
                     messages: Sequence[OutgoingMessage] = (),
                     run_update: RunUpdate | None = None, ack: Any = None,
                     release: bool = False, progress: Any = None) -> None:
        schema = schema_name_for(agent)
        hand_off = self._hand_off if messages else None
        hand_limit = hand_off.room(agent, lease.holder, release) if hand_off is not None else 0
        params = {
            "hand_limit": hand_limit,
            "hand_visibility_s": hand_off.visibility_s if hand_off is not None else 0.0,
            "run_id": lease.run_id, "stream": lease.stream, "holder": lease.holder,
            "epoch": lease.epoch, "ttl_s": ttl_s, "release": release, "agent": agent,
            "first_seq": expected_seq, "events": _events_json(events),
            "messages": _messages_json(messages), "ack_id": ack.id if ack else None,
            # one statement must not both delete and update the same message
            "progress_id": progress.id if progress is not None and progress is not ack else None,
            **_run_update_params(run_update),
        }
        statement = agent_query("append", schema)
        row: tuple[Any, ...] | None
        if self.settings.group_commit:
            grouped = await self._group_commit().execute(
                statement, params, batch_statement=agent_query("append_batch", schema))
            if not isinstance(grouped, GroupFailed):
                row = grouped
            elif grouped.broken and await self._append_outcome(
                    schema, lease, expected_seq, events, grouped.error) == "committed":
                if hand_limit and hand_off is not None:
                    hand_off.handed_unknown()
                return
            else:  # the batch did not commit: this append alone, as if never grouped
                row = await self._append_alone(statement, params, schema, lease, expected_seq,
                                               events)
        else:
            row = await self._append_alone(statement, params, schema, lease, expected_seq,
                                           events)
        if row is None or row[0] == 0:
            await self._explain_rejection(schema, lease)
        elif row[1] == -1:  # the stream ends before expected_seq - 1: nothing was written
            raise LeaseFenced(f"stream {lease.stream} of run {lease.run_id} ends before seq "
                              f"{expected_seq - 1} on this database, but this worker was about "
                              f"to append seq {expected_seq}: events it appended are gone (a "
                              "failover to a replica that had not received them), so the work "
                              "resumes from this server's log")
        elif row is _COMMITTED:  # the connection broke; what the append claimed is not known
            if hand_limit and hand_off is not None:
                hand_off.handed_unknown()
        else:
            if self._version_seen is not None:
                self._version_seen(lease.run_id, row[3])
            if self._watched_seen is not None:
                self._watched_seen(lease.run_id, bool(row[2]))
            if row[4] is not None and hand_off is not None:
                hand_off.handed(_handed(agent, lease.run_id, row[4]))

    async def close(self) -> None:
        group: GroupCommit | None = getattr(self, "_group", None)
        if group is not None:  # its kept connection goes back before the pool closes
            await group.release()
        await super().close()

    def _group_commit(self) -> GroupCommit:
        group: GroupCommit | None = getattr(self, "_group", None)
        if group is None:
            group = self._group = GroupCommit(lambda: self.pool)
        return group

    async def _append_alone(self, statement: Any, params: dict[str, Any], schema: str,
                            lease: Lease, expected_seq: int, events: Sequence[NewEvent]
                            ) -> tuple[Any, ...] | None:
        """One append in its own transaction (how every append ran before group commit, and
        how one runs again when its batch failed): the statement's row, ``_COMMITTED`` when a
        broken connection turns out to have committed it."""
        for attempt in (1, 2):
            try:
                async with self.pool.connection() as conn:
                    cursor = await conn.execute(statement, params)
                    return await cursor.fetchone()
            except psycopg.errors.UniqueViolation:
                raise LeaseLost(f"stream {lease.stream} of run {lease.run_id} already has event "
                                f"{expected_seq}: another worker wrote it") from None
            except PoolTimeout as exc:  # never sent: no outcome to find out
                raise DatabaseUnavailable(f"no database connection for an append to run "
                                          f"{lease.run_id}: {exc}") from exc
            except psycopg.OperationalError as exc:
                if out_of_space(exc):  # refused and rolled back: no outcome to find out
                    raise out_of_space_error(exc, f"an append to run {lease.run_id}") from exc
                # The connection broke with the statement in flight: it may have committed.
                # Find out from the log itself before doing anything else.
                outcome = await self._append_outcome(schema, lease, expected_seq, events, exc)
                if outcome == "committed":
                    return _COMMITTED
                if attempt == 2:
                    raise DatabaseUnavailable(f"append to run {lease.run_id} failed twice: "
                                              f"{exc}") from exc
        raise AssertionError("unreachable")

    async def _append_outcome(self, schema: str, lease: Lease, expected_seq: int,
                              events: Sequence[NewEvent], error: Exception) -> str:
        """After a connection broke mid-append: ``committed`` if the log holds exactly these
        events at these sequence numbers (the commit happened, only its answer was lost),
        ``absent`` if it holds none of them (nothing happened: the append may be retried).
        Raises ``LeaseLost`` if another writer holds those numbers, ``DatabaseUnavailable``
        if the outcome cannot be known (no events to look for, or no database)."""
        if not events:
            raise DatabaseUnavailable(
                f"the connection broke during an append to run {lease.run_id}: {error}")
        try:
            async with self.pool.connection() as conn:
                cursor = await conn.execute(agent_query("events_at", schema), {
                    "run_id": lease.run_id, "stream": lease.stream, "first_seq": expected_seq,
                    "last_seq": expected_seq + len(events) - 1})
                found = await cursor.fetchall()
        except psycopg.OperationalError as exc:
            raise DatabaseUnavailable(
                f"the connection broke during an append to run {lease.run_id} and the "
                f"database cannot be reached to learn whether it committed: {exc}") from exc
        if not found:
            return "absent"
        ours = [(e.type, orjson.loads(orjson.dumps(e.data))) for e in events]
        if [(kind, data) for kind, data in found] == ours:
            return "committed"
        raise LeaseLost(f"stream {lease.stream} of run {lease.run_id} has other events at "
                        f"{expected_seq}: another worker wrote them")

    async def _explain_rejection(self, schema: str, lease: Lease) -> None:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(agent_query("lease_state", schema), {
                "run_id": lease.run_id, "stream": lease.stream})
            row = await cursor.fetchone()
        if row is not None and row[3] == "cancelled":
            raise RunCancelled(f"run {lease.run_id} was cancelled")
        if row is not None and (row[0], row[1]) == (lease.holder, lease.epoch) and row[4]:
            # a failover (or a restart): the log this lease was granted against may have been
            # longer than this server's, and what this worker holds in memory with it too
            raise LeaseFenced(f"the lease on stream {lease.stream} of run {lease.run_id} "
                              f"(epoch {lease.epoch}) was granted by another database server "
                              "(the primary before a failover, or before a restart); its log "
                              "may have held more than this one's, so the work resumes from "
                              "this server's log")
        holder = f"held by {row[0]} at epoch {row[1]}" if row else "missing"
        raise LeaseLost(f"lost the lease on stream {lease.stream} of run {lease.run_id} "
                        f"(epoch {lease.epoch}); it is now {holder}")

    async def append_unleased(self, agent: str, run_id: str, stream: str,
                              events: Sequence[NewEvent], *,
                              run_update: RunUpdate | None = None,
                              only_if_active: bool = True) -> bool:
        return await self._append_unleased(agent, run_id, stream, events,
                                           run_update=run_update, only_if_active=only_if_active)

    async def _append_unleased(self, agent: str, run_id: str, stream: str,
                               events: Sequence[NewEvent], *, run_update: RunUpdate | None,
                               only_if_active: bool, drop_messages: bool = False) -> bool:
        statement = agent_query("append_unleased", schema_name_for(agent))
        params = {"run_id": run_id, "stream": stream, "events": _events_json(events),
                  "only_if_active": only_if_active, "drop_messages": drop_messages,
                  **_run_update_params(run_update)}
        for _ in range(20):
            try:
                async with self.pool.connection() as conn:
                    cursor = await conn.execute(statement, params)
                    row = await cursor.fetchone()
                return bool(row and row[0])
            except psycopg.errors.UniqueViolation:
                continue  # a leased writer took that sequence number; take the next one
        raise LeaseLost(f"could not append to stream {stream} of run {run_id}: it kept moving")

    async def session_input(self, agent: str, run_id: str, stream: str,
                            events: Sequence[NewEvent], messages: Sequence[OutgoingMessage],
                            idempotency_key: str | None = None
                            ) -> tuple[bool, str | None, int]:
        schema = schema_name_for(agent)
        params = {"run_id": run_id, "stream": stream, "events": _events_json(events),
                  "messages": _messages_json(messages), "agent": agent,
                  "key": idempotency_key}
        async with self.pool.connection() as conn:
            cursor = await conn.execute(agent_query("session_input", schema), params)
            row = await cursor.fetchone()
            assert row is not None
            taken, status, turn, seen_turn = bool(row[0]), row[1], int(row[2]), row[3]
            if not taken and seen_turn is None and idempotency_key is not None:
                # a sender with the same key may have taken the turn after this statement's
                # snapshot: look again
                cursor = await conn.execute(agent_query("user_message_turn", schema), params)
                found = await cursor.fetchone()
                seen_turn = found[0] if found else None
        if seen_turn is not None:
            return True, status, int(seen_turn)
        return taken, status, turn

    async def run_status(self, agent: str, run_id: str) -> str | None:
        record = await find_run(self.pool, run_id, agent)
        return record.status if record is not None else None

    async def ensure_messages(self, agent: str, run_id: str,
                              messages: Sequence[OutgoingMessage]) -> int:
        sent = 0
        async with self.pool.connection() as conn:
            for message in messages:
                cursor = await conn.execute(query("ensure_message"), {
                    "agent": agent, "run_id": run_id, "kind": message.kind,
                    "payload": Jsonb(message.payload), "delay_s": message.delay_s})
                sent += cursor.rowcount
        return sent

    async def cancel_run(self, run_id: str, reason: str) -> RunRecord | None:
        record = await find_run(self.pool, run_id)
        if record is None or record.status in ev.TERMINAL_STATUSES:
            return record
        await self._append_unleased(
            record.agent, run_id, ev.RUN_STREAM, [NewEvent(ev.RUN_CANCELLED, {"reason": reason})],
            run_update=RunUpdate(status="cancelled", stop_reason="cancelled", finished=True),
            only_if_active=True, drop_messages=True)
        return await find_run(self.pool, run_id, record.agent)
