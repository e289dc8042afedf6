"""The ``QuestionStore`` of the Postgres store: ``toren_control.questions`` (control migration
``0016_questions``), its queries in ``sql/questions.sql``."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from toren.plugin.drivers import (
    OutgoingMessage,
    QuestionAsked,
    QuestionRecord,
    QuestionStore,
    schema_name_for,
)
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import parse_queries


@cache
def _queries() -> dict[str, str]:
    text = resources.files("toren_postgres").joinpath("sql/questions.sql").read_text("utf-8")
    return parse_queries(text)


@cache
def _answer_query(schema: str) -> sql.Composed:
    """``answer_question`` with ``{runs}`` bound to the agent's schema."""
    return sql.SQL(_queries()["answer_question"]).format(runs=sql.Identifier(schema, "runs"))


def _record(row: dict[str, Any]) -> QuestionRecord:
    return QuestionRecord(
        id=str(row["id"]), agent=row["agent"], run_id=str(row["run_id"]),
        task_id=row["task_id"], call_id=row["call_id"], question=row["question"],
        choices=tuple(row["choices"]), status=row["status"], asked_at=row["asked_at"],
        expires_at=row["expires_at"], answer=row["answer"], answered_by=row["answered_by"],
        answered_at=row["answered_at"],
        extra={"due": bool(row["due"]), "key": row["answer_key"]})


class PostgresQuestionStore(PostgresConnection, QuestionStore):
    """Questions in one control table; an answer and the wake-up of its task are one
    statement (``answer_question`` in questions.sql)."""

    async def open_question(self, agent: str, run_id: str, task_id: str,
                            asked: QuestionAsked, wake: OutgoingMessage) -> QuestionRecord:
        async with self.pool.connection() as conn:
            await conn.execute(_queries()["open_question"], {
                "id": asked.question_id, "agent": agent, "run_id": run_id,
                "task_id": task_id, "call_id": asked.call_id, "question": asked.question,
                "choices": list(asked.choices), "expires_after_s": asked.expires_after_s,
                "wake": Jsonb({"kind": wake.kind, "payload": wake.payload})})
        found = await self.get_question(asked.question_id)
        assert found is not None
        return found

    async def _get_questions(self, ids: Sequence[str]) -> list[QuestionRecord]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            try:
                await cursor.execute(_queries()["get_questions"], {"ids": list(ids)})
            except psycopg.DataError:
                return []  # not a UUID
            return [_record(row) for row in await cursor.fetchall()]

    async def get_question(self, question_id: str) -> QuestionRecord | None:
        found = await self._get_questions([question_id])
        return found[0] if found else None

    async def answer_question(self, question_id: str, answer: str | None, answered_by: str,
                              outcome: str = "answered", key: str | None = None
                              ) -> tuple[QuestionRecord, bool] | None:
        record = await self.get_question(question_id)
        if record is None:
            return None
        if not record.pending:
            return record, False
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_answer_query(schema_name_for(record.agent)), {
                "id": question_id, "outcome": outcome, "answer": answer,
                "answered_by": answered_by, "key": key})
            row = await cursor.fetchone()
        now = await self.get_question(question_id)
        assert now is not None
        return now, row is not None and row[0] == outcome

    async def list_questions(self, *, agents: Sequence[str] | None, run_id: str | None = None,
                             status: str | None = None, limit: int = 50
                             ) -> list[QuestionRecord]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            try:
                await cursor.execute(_queries()["list_questions"], {
                    "agents": list(agents) if agents is not None else None,
                    "run_id": run_id, "status": status, "limit": limit})
            except psycopg.DataError:
                return []  # a run id that is no UUID names no run
            return [_record(row) for row in await cursor.fetchall()]

    async def cancel_questions(self, run_id: str) -> int:
        async with self.pool.connection() as conn:
            try:
                cursor = await conn.execute(_queries()["cancel_questions"], {"run_id": run_id})
            except psycopg.DataError:
                return 0
            return cursor.rowcount
