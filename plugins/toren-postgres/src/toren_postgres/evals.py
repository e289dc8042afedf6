"""The ``EvalStore`` and ``EvalLeaseStore`` in Postgres: ``toren_control.evals`` and
``eval_case_runs`` (control migrations 0027 and 0029)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from toren.plugin.drivers import CaseRun, Dataset, EvalLeaseStore, EvalRecord, EvalStore
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import parse_queries


@cache
def _queries() -> dict[str, str]:
    text = resources.files("toren_postgres").joinpath("sql/evals.sql").read_text("utf-8")
    return parse_queries(text)


def _uuid(value: str | None) -> uuid.UUID | None:
    if value is None:
        return None
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        return None


class PostgresEvalStore(PostgresConnection, EvalStore):
    """The ``EvalStore`` of the Postgres store."""

    async def create_eval(self, record: EvalRecord) -> EvalRecord:
        eval_id = _uuid(record.id)
        if eval_id is None:
            raise ValueError(f"an eval's id is a UUID, not {record.id!r}")
        try:
            async with self.pool.connection() as conn:
                cursor = await conn.execute(_queries()["create_eval"], {
                    "id": eval_id, "agent": record.agent,
                    "dataset_name": record.dataset.name, "dataset_hash": record.dataset.hash,
                    "dataset": Jsonb(record.dataset.to_json()), "version": record.version,
                    "human_version": record.human_version, "model": record.model,
                    "repeat": record.repeat, "concurrency": record.concurrency,
                    "grader_model": record.grader_model, "source": record.source,
                    "functions": record.functions, "fork_at": record.fork_at,
                    "auto_resume": record.auto_resume})
                row = await cursor.fetchone()
        except psycopg.errors.UniqueViolation:
            raise ValueError(f"an eval with id {record.id} is kept already") from None
        assert row is not None
        return EvalRecord(**{**record.__dict__, "created_at": row[0], "status": "running"})

    async def get_eval(self, eval_id: str) -> EvalRecord | None:
        found = _uuid(eval_id)
        if found is None:
            return None
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(_queries()["get_eval"], {"id": found})
            row = await cursor.fetchone()
        return _record(row) if row is not None else None

    async def list_evals(self, *, agent: str | None = None, limit: int = 50,
                         before: str | None = None) -> list[EvalRecord]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(_queries()["list_evals"], {
                "agent": agent, "limit": limit, "before": _uuid(before)})
            return [_record(row) for row in await cursor.fetchall()]

    async def claim_case_run(self, eval_id: str, case_id: str, repeat: int) -> CaseRun:
        params = {"eval_id": _uuid(eval_id), "case_id": case_id, "repeat": repeat}
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(_queries()["claim_case_run"], params)
            row = await cursor.fetchone()
        assert row is not None
        return _case_run(eval_id, row)

    async def set_case_run(self, eval_id: str, case_id: str, repeat: int,
                           run_id: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(_queries()["set_case_run"], {
                "eval_id": _uuid(eval_id), "case_id": case_id, "repeat": repeat,
                "run_id": run_id})

    async def grade_case_run(self, eval_id: str, case_id: str, repeat: int,
                             grade: dict[str, Any]) -> bool:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_queries()["grade_case_run"], {
                "eval_id": _uuid(eval_id), "case_id": case_id, "repeat": repeat,
                "grade": Jsonb(grade)})
            return cursor.rowcount == 1

    async def case_runs(self, eval_id: str) -> list[CaseRun]:
        found = _uuid(eval_id)
        if found is None:
            return []
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(_queries()["case_runs"], {"eval_id": found})
            return [_case_run(eval_id, row) for row in await cursor.fetchall()]

    async def finish_eval(self, eval_id: str) -> EvalRecord | None:
        found = _uuid(eval_id)
        if found is None:
            return None
        async with self.pool.connection() as conn:
            await conn.execute(_queries()["finish_eval"], {"id": found})
        return await self.get_eval(eval_id)


class PostgresEvalLeaseStore(PostgresConnection, EvalLeaseStore):
    """The ``EvalLeaseStore`` of the Postgres store: columns of ``toren_control.evals``
    (control migration 0029)."""

    async def claim_eval_leases(self, holder: str, agents: Sequence[str], *, ttl_s: float,
                                limit: int = 10, eval_id: str | None = None,
                                skip: Sequence[str] = ()) -> list[str]:
        if eval_id is not None and _uuid(eval_id) is None:
            return []
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_queries()["claim_eval_leases"], {
                "holder": holder, "agents": list(agents), "ttl_s": ttl_s, "limit": limit,
                "id": _uuid(eval_id),
                "skip": [found for found in map(_uuid, skip) if found is not None]})
            return [str(row[0]) for row in await cursor.fetchall()]

    async def renew_eval_leases(self, holder: str, eval_ids: Sequence[str], *,
                                ttl_s: float) -> list[str]:
        ids = [found for found in map(_uuid, eval_ids) if found is not None]
        if not ids:
            return []
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_queries()["renew_eval_leases"], {
                "holder": holder, "ids": ids, "ttl_s": ttl_s})
            return [str(row[0]) for row in await cursor.fetchall()]

    async def release_eval_lease(self, holder: str, eval_id: str) -> None:
        found = _uuid(eval_id)
        if found is None:
            return
        async with self.pool.connection() as conn:
            await conn.execute(_queries()["release_eval_lease"], {"id": found, "holder": holder})

    async def eval_lease(self, eval_id: str) -> str | None:
        found = _uuid(eval_id)
        if found is None:
            return None
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_queries()["eval_lease"], {"id": found})
            row = await cursor.fetchone()
        return row[0] if row is not None and row[2] else None


def _record(row: dict[str, Any]) -> EvalRecord:
    return EvalRecord(
        id=str(row["id"]), agent=row["agent"], dataset=Dataset.from_json(row["dataset"]),
        version=row["version"], human_version=row["human_version"], model=row["model"],
        repeat=row["repeat"], concurrency=row["concurrency"],
        grader_model=row["grader_model"], status=row["status"],
        created_at=row["created_at"], finished_at=row["finished_at"], source=row["source"],
        functions=row["functions"], fork_at=row["fork_at"], auto_resume=row["auto_resume"])


def _case_run(eval_id: str, row: dict[str, Any]) -> CaseRun:
    return CaseRun(eval_id, row["case_id"], row["repeat"], row["run_id"], row["grade"],
                   row["created_at"], row["graded_at"])
