"""The ``file`` archive backend: archived runs as files under a directory
(``TOREN_ARCHIVE=file:///srv/toren-archive``)."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import uuid
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from toren.errors import ArchiveMismatch, ArchiveUnavailable, ConfigError
from toren.regular_files import NotARegularFile, open_regular
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

    async def get(self, location: str, *, max_bytes: int) -> bytes:
        parts = urlsplit(location)
        if parts.scheme != "file":
            raise ArchiveUnavailable(f"{location!r} is not in a file archive (TOREN_ARCHIVE is "
                                     f"{self.url})")
        path = Path(unquote(parts.path))
        try:
            return await asyncio.to_thread(_read_object, path, max_bytes)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ArchiveMismatch(f"the archived run's object {path} is a symbolic link, "
                                      "not the file that was archived: it was replaced; "
                                      "nothing was read through it") from exc
            if exc.errno == errno.ENXIO:  # a socket: it cannot even be opened
                raise ArchiveMismatch(f"the archived run's object {path} is not a regular "
                                      "file (a socket): it was replaced; nothing was read from "
                                      "it") from exc
            raise ArchiveUnavailable(f"cannot read archived run {path}: "
                                     f"{exc.strerror or exc}") from exc


def _read_object(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes`` of them. Opened without
    following a symlink there (ELOOP) and without blocking: a FIFO opens at once, then is
    refused, instead of waiting for a writer that never comes."""
    try:
        fd, info = open_regular(path, follow_symlinks=False)
    except NotARegularFile as exc:
        raise ArchiveMismatch(f"the archived run's object {path} is not a regular file "
                              f"(mode {stat.filemode(exc.mode)}): it was replaced; "
                              "nothing was read from it") from None
    with os.fdopen(fd, "rb") as file:
        if info.st_size > max_bytes:
            raise _too_large(path, max_bytes)
        data = file.read(max_bytes + 1)  # the file may grow after fstat
    if len(data) > max_bytes:
        raise _too_large(path, max_bytes)
    return data


def _too_large(path: Path, max_bytes: int) -> ArchiveMismatch:
    return ArchiveMismatch(f"the archived run's object {path} holds more than {max_bytes} "
                           "bytes, more than was archived (or than TOREN_ARCHIVE_MAX_MB allows "
                           "for a run archived without a digest); nothing was read from it")


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
