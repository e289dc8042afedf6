"""The ``FileStore`` in Postgres: ``toren_control.files`` rows over content-addressed blobs."""

from __future__ import annotations

import asyncio
import io
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from toren.plugin import Settings
from toren.plugin.drivers import (
    CHUNK_BYTES,
    FileContent,
    FileStore,
    StorageQuotaExceeded,
    StoredFile,
    content_chunks,
    content_size,
    parse_file_id,
    storage_quota_message,
)
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.queries import query

#: The transaction-scoped advisory lock that uploads of new content take to check the storage
#: quota (an arbitrary constant of its own, like the migrations' and the archive's).
FILE_STORAGE_LOCK_KEY = 0x746F72656E_66696C  # "toren" "fil"


class PostgresFileStore(PostgresConnection, FileStore):
    """Files (control migrations ``0007_file_blobs``, ``0013_file_blob_chunks``): one blob
    per distinct SHA-256, its content inline up to one chunk and in numbered chunks beyond."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        # Writes of content hold a pooled connection for as long as they copy: at most a
        # quarter of the pool at once, so a burst of large uploads cannot starve the runs.
        self._writers = asyncio.Semaphore(max(1, settings.pool_size // 4))

    async def add_file(self, *, name: str, content_type: str, data: bytes | FileContent,
                       sha256: str, uploaded_by: str | None = None, agent: str | None = None,
                       run_id: str | None = None,
                       max_stored_bytes: int | None = None) -> StoredFile:
        size = content_size(data)
        if max_stored_bytes is not None and await self._would_exceed(sha256, size,
                                                                      max_stored_bytes):
            # refused before a byte is copied (checked again, under the lock, before commit)
            raise StorageQuotaExceeded(storage_quota_message(
                name, await self.stored_bytes(), size, max_stored_bytes))
        async with self._writers, self.pool.connection() as conn, conn.transaction(), \
                conn.cursor(row_factory=dict_row) as cursor:
            new = await self._add_blob(cursor, sha256, data)
            if new and max_stored_bytes is not None:
                await cursor.execute(query("lock_file_storage"), {"key": FILE_STORAGE_LOCK_KEY})
                await cursor.execute(query("stored_file_bytes"))
                row = await cursor.fetchone()
                assert row is not None
                if row["stored_bytes"] > max_stored_bytes:  # this content counted in
                    raise StorageQuotaExceeded(storage_quota_message(
                        name, row["stored_bytes"] - size, size, max_stored_bytes))
            await cursor.execute(query("add_file"), {
                "name": name, "content_type": content_type, "sha256": sha256,
                "size_bytes": size, "uploaded_by": uploaded_by, "agent": agent,
                "run_id": run_id})
            row = await cursor.fetchone()
        assert row is not None
        return _file_record(row)

    async def _would_exceed(self, sha256: str, size: int, max_stored_bytes: int) -> bool:
        """Whether content not stored yet would take the storage past ``max_stored_bytes``."""
        if await self.stored_bytes() + size <= max_stored_bytes:
            return False
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("share_file_blob"), {"sha256": sha256})
            return await cursor.fetchone() is None

    async def _add_blob(self, cursor: psycopg.AsyncCursor[dict[str, Any]], sha256: str,
                        data: bytes | FileContent) -> bool:
        """Store the content unless it is stored; whether it was new. Either way the blob
        row is held (inserted, or key-share locked) until the transaction ends."""
        size = content_size(data)
        inline = size <= CHUNK_BYTES
        head = (data if isinstance(data, bytes) else b"".join(
            [piece async for piece in content_chunks(data)])) if inline else None
        while True:
            await cursor.execute(query("add_file_blob"),
                                 {"sha256": sha256, "size_bytes": size, "data": head})
            if await cursor.fetchone() is not None:
                break
            await cursor.execute(query("share_file_blob"), {"sha256": sha256})
            if await cursor.fetchone() is not None:
                return False
        if not inline:
            async with cursor.copy(query("copy_file_blob_chunks")) as copy:
                copy.set_types(["text", "int4", "bytea"])
                seq = 0
                async for piece in content_chunks(data):
                    await copy.write_row((sha256, seq, piece))
                    seq += 1
        return True

    async def stored_bytes(self) -> int:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(query("stored_file_bytes"))
            row = await cursor.fetchone()
        return int(row[0]) if row else 0

    async def list_files(self, *, limit: int = 100,
                         before: tuple[datetime, str] | None = None) -> list[StoredFile]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(query("list_files"), {
                "limit": limit, "before_at": before[0] if before else None,
                "before_id": before[1] if before else None})
            return [_file_record(row) for row in await cursor.fetchall()]

    async def get_file(self, file_id: str) -> StoredFile | None:
        row = await self._file_row("get_file", file_id)
        return None if row is None else _file_record(row)

    async def read_file(self, file_id: str) -> tuple[StoredFile, bytes] | None:
        canonical = parse_file_id(file_id)
        if canonical is None:
            return None
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(query("read_file"), {"id": canonical})
            row = await cursor.fetchone()
            if row is None:
                return None
            record, data = _file_record(row), row["data"]
            if data is not None:
                return record, bytes(data)
            content = io.BytesIO()
            async for chunk in cursor.stream(query("read_file_chunks"),
                                             {"sha256": record.sha256}):
                content.write(chunk["data"])
        if content.tell() != record.size_bytes:
            return None  # deleted between the two reads
        return record, content.getvalue()

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
