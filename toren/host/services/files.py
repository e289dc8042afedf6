"""The files agents read: ``toren files`` and ``/files`` call this service."""

from __future__ import annotations

from toren.config import Settings
from toren.files import StorageQuotaExceeded, StoredFile, Upload, storage_quota_message
from toren.host.services.pages import Page, Position, read_page
from toren.seams.store.files import FileStore


class FilesService:
    """Add, list, show, read and delete uploaded files, under the deployment's storage quota
    (``TOREN_MAX_TOTAL_FILE_BYTES``). ``runtime.files``; the routes of ``toren.server.files``
    and the commands of ``toren.cli.files`` call it once the runtime has started."""

    def __init__(self, store: FileStore, settings: Settings) -> None:
        self._store = store
        self._settings = settings

    async def stored_bytes(self) -> int:
        """Bytes of distinct content stored (what the quota caps)."""
        return await self._store.stored_bytes()

    async def check_room(self, what: str = "the upload") -> None:
        """``StorageQuotaExceeded`` when the quota is used up already: ``POST /files`` asks
        before it reads a body, so a full deployment refuses an upload without receiving it."""
        most = self._settings.max_total_file_bytes
        stored = await self._store.stored_bytes()
        if stored >= most:
            raise StorageQuotaExceeded(storage_quota_message(what, stored, None, most))

    async def add(self, upload: Upload, *, uploaded_by: str) -> StoredFile:
        """Store a checked upload (``UploadSpool.check``); ``StorageQuotaExceeded`` if its
        content, not stored yet, would take the files past the quota (nothing is written)."""
        return await self._store.add_file(
            name=upload.name, content_type=upload.content_type, data=upload.data,
            sha256=upload.sha256, uploaded_by=uploaded_by,
            max_stored_bytes=self._settings.max_total_file_bytes)

    async def page(self, *, limit: int, before: Position | None = None) -> Page[StoredFile]:
        """Files newest first, ``limit`` at most, after the page ending at ``before``."""
        return await read_page(
            lambda n, after: self._store.list_files(limit=n, before=after), limit, before)

    async def get(self, file_id: str) -> StoredFile | None:
        """A file's record, or ``None``."""
        return await self._store.get_file(file_id)

    async def read(self, file_id: str) -> tuple[StoredFile, bytes] | None:
        """A file's record and content, or ``None``."""
        return await self._store.read_file(file_id)

    async def delete(self, file_id: str) -> StoredFile | None:
        """Delete a file (its content once no file shares it); its record, or ``None``."""
        return await self._store.delete_file(file_id)
