"""The ``ApprovalStore`` of the Postgres store: ``toren_control.approvals`` (control migration
``0003_approvals``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from toren.plugin.drivers import (
    ApprovalRecord,
    ApprovalRequested,
    ApprovalStore,
    OutgoingMessage,
    arguments_digest,
    schema_name_for,
)
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import agent_query, query


def _record(row: dict[str, Any]) -> ApprovalRecord:
    return ApprovalRecord(
        id=str(row["id"]), agent=row["agent"], run_id=str(row["run_id"]),
        task_id=row["task_id"], call_id=row["call_id"], tool=row["tool"],
        arguments=row["arguments"], status=row["status"], approvers=tuple(row["approvers"]),
        requested_at=row["requested_at"], expires_at=row["expires_at"],
        decided_by=row["decided_by"], decided_at=row["decided_at"], reason=row["reason"],
        extra={"due": bool(row["due"]), "remind_due": bool(row["remind_due"])},
        digest=row["digest"] or "", scope=row["scope"],
        edited_arguments=row["edited_arguments"], answer=row["answer"],
        granted_by=str(row["granted_by"]) if row["granted_by"] else None,
        parameters=row["parameters"], on_expiry=row["on_expiry"],
        escalate_to=tuple(row["escalate_to"]), escalation_level=row["escalation_level"],
        escalated_at=row["escalated_at"], remind_at=row["remind_at"],
        reminded_at=row["reminded_at"])


def _request_json(request: ApprovalRequested) -> dict[str, Any]:
    """A request as open_approvals reads it, with its digest (computed for requests logged
    before digests)."""
    data: dict[str, Any] = msgspec.to_builtins(request)
    data["digest"] = request.digest or arguments_digest(request.arguments)
    return data


class PostgresApprovalStore(PostgresConnection, ApprovalStore):
    """Approvals in one control table; a decision and the wake-up of its task are one
    statement (``decide_approval`` in queries.sql)."""

    async def open_approvals(self, agent: str, run_id: str, task_id: str,
                             requests: Sequence[ApprovalRequested],
                             wake: OutgoingMessage,
                             parameters: Mapping[str, dict[str, Any]] | None = None
                             ) -> list[ApprovalRecord]:
        async with self.pool.connection() as conn:
            await conn.execute(query("open_approvals"), {
                "agent": agent, "run_id": run_id, "task_id": task_id,
                "requests": Jsonb([_request_json(r) for r in requests]),
                "wake": Jsonb({"kind": wake.kind, "payload": wake.payload}),
                "parameters": Jsonb(dict(parameters or {}))})
        found = {r.id: r for r in await self._get([r.approval_id for r in requests])}
        return [found[r.approval_id] for r in requests if r.approval_id in found]

    async def _get(self, ids: Sequence[str]) -> list[ApprovalRecord]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            try:
                await cursor.execute(query("get_approvals"), {"ids": list(ids)})
            except psycopg.DataError:
                return []  # not a UUID
            return [_record(row) for row in await cursor.fetchall()]

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        found = await self._get([approval_id])
        return found[0] if found else None

    async def decide_approval(self, approval_id: str, outcome: str, decided_by: str,
                              reason: str | None, *, scope: str = "call",
                              arguments: dict[str, Any] | None = None,
                              answer: str | None = None
                              ) -> tuple[ApprovalRecord, bool] | None:
        record = await self.get_approval(approval_id)
        if record is None:
            return None
        if not record.pending:
            return record, False
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                agent_query("decide_approval", schema_name_for(record.agent)),
                {"id": approval_id, "outcome": outcome, "decided_by": decided_by,
                 "reason": reason, "scope": scope, "answer": answer,
                 "arguments": Jsonb(arguments) if arguments is not None else None})
            row = await cursor.fetchone()
        now = await self.get_approval(approval_id)
        assert now is not None
        return now, row is not None and row[0] == outcome

    async def escalate_approval(self, approval_id: str) -> ApprovalRecord | None:
        async with self.pool.connection() as conn:
            await conn.execute(query("escalate_approval"), {"id": approval_id})
        return await self.get_approval(approval_id)

    async def mark_reminded(self, approval_id: str) -> bool:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("mark_reminded"), {"id": approval_id})
            return await cursor.fetchone() is not None

    async def list_approvals(self, *, agents: Sequence[str] | None, agent: str | None = None,
                             run_id: str | None = None, status: str | None = None,
                             limit: int = 50) -> list[ApprovalRecord]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            try:
                await cursor.execute(query("list_approvals"), {
                    "agents": list(agents) if agents is not None else None, "agent": agent,
                    "run_id": run_id, "status": status, "limit": limit})
            except psycopg.DataError:
                return []  # a run id that is no UUID names no run
            return [_record(row) for row in await cursor.fetchall()]

    async def cancel_approvals(self, run_id: str) -> int:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("cancel_approvals"), {"run_id": run_id})
            return cursor.rowcount
