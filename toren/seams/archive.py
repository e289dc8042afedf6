"""Archive backends: where finished runs go when their agent's retention has passed.

One-of-N, chosen by the scheme of ``TOREN_ARCHIVE``: ``file:///srv/toren-archive`` (the
``file`` backend, in the kernel) or ``s3://bucket/prefix`` (the ``s3`` backend, from the
``toren-s3`` distribution). Entry-point group ``toren.archive``; the entry point's name is the
scheme.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from toren.errors import ConfigError

if TYPE_CHECKING:
    from toren.config import Settings


class ArchiveBackend(abc.ABC):
    """Stores and reads back the archive objects of runs (``toren.core.retention``'s format).

    Made by the host (``Runtime.archive_backend``) when an archive pass runs or an archived
    run is read, from ``TOREN_ARCHIVE``. ``put`` is called by the archive pass once per run
    before the run leaves the hot tables; ``get`` by every read of an archived run
    (``toren jobs show``, ``GET /runs/{id}``, ...). Both must be safe to call concurrently.
    ``toren.testing.contracts.ArchiveContract`` checks what a backend promises.
    """

    def __init__(self, url: str, settings: Settings) -> None:
        self.url = url
        self.settings = settings

    @property
    def description(self) -> str:
        """One line saying where archives go (printed by ``toren db archive``)."""
        return self.url

    @abc.abstractmethod
    async def put(self, key: str, data: bytes) -> str:
        """Store ``data`` under ``key`` (``<agent>/<YYYY>/<MM>/<run>.jsonl.gz``), durably and
        whole (a reader never sees part of it), replacing any object already there (the same
        key gives the same location); return the location to read it back from (a URL that
        ``get`` takes). ``data`` may be empty."""

    @abc.abstractmethod
    async def get(self, location: str, *, max_bytes: int) -> bytes:
        """The bytes ``put`` stored at ``location``; ``ArchiveUnavailable`` if they cannot be
        read (gone, no access, the service down), ``ArchiveMismatch`` if there are more than
        ``max_bytes`` of them (the size the archive index recorded, or
        ``TOREN_ARCHIVE_MAX_MB``). A location another backend wrote (another scheme) is
        ``ArchiveUnavailable``, never read. Never reads more than ``max_bytes + 1`` bytes, nor
        trusts what is at the location to be a plain object: the host checks the bytes'
        digest."""

    async def close(self) -> None:
        """Let go of clients and connections (called once by the host at shutdown)."""
        return None


def archive_scheme(url: str) -> str:
    """The scheme of a ``TOREN_ARCHIVE`` URL (the backend's name), or a ``ConfigError`` that
    shows what one looks like."""
    scheme = urlsplit(url).scheme.lower()
    if not scheme:
        raise ConfigError(f"TOREN_ARCHIVE={url!r} is not a URL: give file:///path/to/dir or "
                          "s3://bucket/prefix")
    return scheme
