"""The ``file`` archive backend runs the archive contract (``toren.testing.contracts``) over a
directory of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from toren.config import Settings
from toren.host.file_archive import FileArchive
from toren.testing.contracts import ArchiveContract


class TestFileArchive(ArchiveContract):
    @pytest_asyncio.fixture
    async def backend(self, tmp_path: Path) -> AsyncIterator[FileArchive]:
        archive = FileArchive((tmp_path / "archive").as_uri(), Settings())
        yield archive
        await archive.close()
