"""The ``FileStore`` in Postgres: ``toren_control.files`` rows over content-addressed blobs."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from toren.files import StoredFile, parse_file_id
from toren.seams.store import FileStore
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import query


class PostgresFileStore(PostgresConnection, FileStore):
    """Files (control migration ``0007_file_blobs``): one blob per distinct SHA-256."""

    async def add_file(self, *, name: str, content_type: str, data: bytes, sha256: str,
                       uploaded_by: str | None = None, agent: str | None = None,
                       run_id: str | None = None) -> StoredFile:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(query("add_file"), {
                "name": name, "content_type": content_type, "data": data, "sha256": sha256,
                "size_bytes": len(data), "uploaded_by": uploaded_by, "agent": agent,
                "run_id": run_id})
            row = await cursor.fetchone()
        assert row is not None
        return _file_record(row)

    async def list_files(self, *, limit: int = 100) -> list[StoredFile]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(query("list_files"), {"limit": limit})
            return [_file_record(row) for row in await cursor.fetchall()]

    async def get_file(self, file_id: str) -> StoredFile | None:
        row = await self._file_row("get_file", file_id)
        return None if row is None else _file_record(row)

    async def read_file(self, file_id: str) -> tuple[StoredFile, bytes] | None:
        row = await self._file_row("read_file", file_id)
        if row is None:
            return None
        data = bytes(row.pop("data"))
        return _file_record(row), data

    async def _file_row(self, query_name: str, file_id: str) -> dict[str, Any] | None:
        """The row a query by file id returns; ``None`` for no row or an id that is no UUID."""
        canonical = parse_file_id(file_id)
        if canonical is None:
            return None
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(query(query_name), {"id": canonical})
            return await cursor.fetchone()

    async def delete_file(self, file_id: str) -> StoredFile | None:
        canonical = parse_file_id(file_id)
        if canonical is None:
            return None
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(query("delete_file"), {"id": canonical})
            row = await cursor.fetchone()
            if row is None:
                return None
            try:
                async with conn.transaction():
                    await cursor.execute(query("delete_orphan_blob"), {"sha256": row["sha256"]})
            except psycopg.errors.ForeignKeyViolation:
                pass  # an upload of the same content is committing: the blob is its now
        return _file_record(row)


def _file_record(row: dict[str, Any]) -> StoredFile:
    return StoredFile(id=str(row["id"]), name=row["name"], content_type=row["content_type"],
                      size_bytes=row["size_bytes"], sha256=row["sha256"],
                      created_at=row["created_at"], uploaded_by=row["uploaded_by"],
                      agent=row["agent"], run_id=None if row["run_id"] is None
                      else str(row["run_id"]))
