"""A stored file's record (``StoredFile``) and content read a piece at a time
(``FileContent``): the values the file store's interface takes and returns.

Names, size caps, sniffing and spooling uploads are ``toren.files``'.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


@dataclass(frozen=True)
class StoredFile:
    """A file's record (its bytes are read separately): what ``GET /files`` lists."""

    id: str
    name: str
    content_type: str
    size_bytes: int
    sha256: str
    created_at: datetime
    uploaded_by: str | None = None
    agent: str | None = None
    run_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "content_type": self.content_type,
                "size_bytes": self.size_bytes, "sha256": self.sha256,
                "created_at": self.created_at.isoformat(), "uploaded_by": self.uploaded_by,
                "agent": self.agent, "run_id": self.run_id}


class FileContent(Protocol):
    """A file's content read a piece at a time (an upload spooled to disk): what
    ``FileStore.add_file`` takes besides ``bytes``, so that no layer holds a whole file."""

    @property
    def size_bytes(self) -> int:
        """The content's length."""

    def chunks(self) -> AsyncIterator[bytes]:
        """The content from its start, in pieces of at most ``toren.files.CHUNK_BYTES``."""
