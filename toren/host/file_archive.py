"""The ``file`` archive backend: archived runs as files under a directory
(``TOREN_ARCHIVE=file:///srv/toren-archive``)."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from toren.errors import ArchiveUnavailable, ConfigError
from toren.seams.archive import ArchiveBackend

if TYPE_CHECKING:
    from toren.config import Settings


class FileArchive(ArchiveBackend):
    """One file per run under the directory of a ``file://`` URL, written to a temporary name,
    flushed to disk and renamed into place, so a reader never sees part of one."""

    def __init__(self, url: str, settings: Settings) -> None:
        super().__init__(url, settings)
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ConfigError(f"TOREN_ARCHIVE={url!r}: a file archive is file:///absolute/dir "
                              "(three slashes, on this machine)")
        self.root = Path(unquote(parts.path))

    def _path(self, key: str) -> Path:
        relative = PurePosixPath(key)
        if relative.is_absolute() or ".." in relative.parts:
            raise ArchiveUnavailable(f"archive key {key!r} leaves the archive directory")
        return self.root.joinpath(*relative.parts)

    async def put(self, key: str, data: bytes) -> str:
        path = self._path(key)
        try:
            await asyncio.to_thread(_write_whole, path, data)
        except OSError as exc:
            raise ArchiveUnavailable(f"cannot write {path}: {exc.strerror or exc}") from exc
        return path.as_uri()

    async def get(self, location: str) -> bytes:
        parts = urlsplit(location)
        if parts.scheme != "file":
            raise ArchiveUnavailable(f"{location!r} is not in a file archive (TOREN_ARCHIVE is "
                                     f"{self.url})")
        path = Path(unquote(parts.path))
        try:
            return await asyncio.to_thread(path.read_bytes)
        except OSError as exc:
            raise ArchiveUnavailable(f"cannot read archived run {path}: "
                                     f"{exc.strerror or exc}") from exc


def _write_whole(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with temporary.open("wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)
