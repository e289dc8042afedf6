"""Files: uploads agents can read, stored content-addressed (one copy per distinct content)."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime

    from toren.core.files import FileContent, StoredFile


class FileStore(abc.ABC):
    """The files of ``POST /files`` and ``toren files``, and what ``read_document`` reads.

    The server and the CLI call ``add_file`` after checking size and type; ``list_files``,
    ``get_file`` and ``delete_file`` serve ``GET /files``, ``GET /files/{id}``, ``DELETE
    /files/{id}`` and ``toren files list|show|rm``; tools read content with ``read_file``
    (through ``ToolCallContext.read_file``).

    A file's id is a UUID the store assigns; ``get_file``, ``read_file`` and
    ``delete_file`` answer ``None`` for any other id, whatever its form (the HTTP API passes on
    what it is given), never an error. Every method may be called by several processes at
    once. ``toren.testing.contracts.FileStoreContract`` checks all of this.
    """

    @abc.abstractmethod
    async def add_file(self, *, name: str, content_type: str, data: bytes | FileContent,
                       sha256: str, uploaded_by: str | None = None, agent: str | None = None,
                       run_id: str | None = None,
                       max_stored_bytes: int | None = None) -> StoredFile:
        """Record a file; its content is kept once per distinct ``sha256``.

        Each call makes a new record (its own id, ``created_at`` by the store's clock), even
        for content stored already. ``data`` is the content in memory or a ``FileContent`` to
        read in pieces (an upload spooled to disk): a driver must not need all of it in memory
        at once. The caller has hashed it (``sha256``, hex). With ``max_stored_bytes``
        (``TOREN_MAX_TOTAL_FILE_BYTES``), content not stored yet that would take
        ``stored_bytes()`` past it raises ``StorageQuotaExceeded`` and nothing is written;
        content already stored costs nothing and is always accepted. The check holds under
        concurrency: of uploads racing for the room left for one, one is stored and the
        others refused. An upload of content whose last file is being deleted keeps it: the
        new file reads back whole.
        """

    @abc.abstractmethod
    async def list_files(self, *, limit: int = 100,
                         before: tuple[datetime, str] | None = None) -> list[StoredFile]:
        """Files, newest first (``created_at``; files created at the same instant in an order
        of the store's that ``before`` follows), at most ``limit``; with ``before`` (a file's
        ``created_at`` and ``id``), only the files listed after that one: pages that miss and
        repeat nothing however many files are added meanwhile."""

    @abc.abstractmethod
    async def stored_bytes(self) -> int:
        """Bytes of distinct content stored (content shared by several files counts once,
        and no longer once its last file is deleted): what ``max_stored_bytes`` caps."""

    @abc.abstractmethod
    async def get_file(self, file_id: str) -> StoredFile | None:
        """The record of a file, or ``None``."""

    @abc.abstractmethod
    async def read_file(self, file_id: str) -> tuple[StoredFile, bytes] | None:
        """A file's record and content, or ``None``."""

    @abc.abstractmethod
    async def delete_file(self, file_id: str) -> StoredFile | None:
        """Delete a file (and its content once no file shares it); its record, or ``None``
        (no such file, or deleted already). The other files sharing its content still read
        back whole."""
