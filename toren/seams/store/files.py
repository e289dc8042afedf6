"""Files: uploads agents can read, stored content-addressed (one copy per distinct content)."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toren.files import StoredFile


class FileStore(abc.ABC):
    """The files of ``POST /files`` and ``toren files``, and what ``read_document`` reads.

    The server and the CLI call ``add_file`` after checking size and type; ``list_files``,
    ``get_file`` and ``delete_file`` serve ``GET /files``, ``GET /files/{id}``, ``DELETE
    /files/{id}`` and ``toren files list|show|rm``; tools read content with ``read_file``
    (through ``ToolCallContext.read_file``).
    """

    @abc.abstractmethod
    async def add_file(self, *, name: str, content_type: str, data: bytes, sha256: str,
                       uploaded_by: str | None = None, agent: str | None = None,
                       run_id: str | None = None) -> StoredFile:
        """Record a file; its content is kept once per distinct ``sha256``."""

    @abc.abstractmethod
    async def list_files(self, *, limit: int = 100) -> list[StoredFile]:
        """Files, newest first, at most ``limit``."""

    @abc.abstractmethod
    async def get_file(self, file_id: str) -> StoredFile | None:
        """The record of a file, or ``None``."""

    @abc.abstractmethod
    async def read_file(self, file_id: str) -> tuple[StoredFile, bytes] | None:
        """A file's record and content, or ``None``."""

    @abc.abstractmethod
    async def delete_file(self, file_id: str) -> StoredFile | None:
        """Delete a file (and its content once no file shares it); its record, or ``None``."""
