"""Files handed to agents: the record stores return, names, size cap and content sniffing."""

from __future__ import annotations

import io
import os
import re
import unicodedata
import uuid
import zipfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePath
from typing import Any

from toren.config import positive_number
from toren.errors import TorenError

MAX_FILE_BYTES_ENV = "TOREN_MAX_FILE_BYTES"
DEFAULT_MAX_FILE_BYTES = 50 * 1024 * 1024
MAX_NAME_LENGTH = 255
PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
ZIP = "application/zip"
OCTET = "application/octet-stream"
#: Text types by extension (the content must also be UTF-8 text).
TEXT_TYPES = {".md": "text/markdown", ".markdown": "text/markdown", ".csv": "text/csv",
              ".json": "application/json", ".yaml": "application/yaml",
              ".yml": "application/yaml", ".html": "text/html", ".htm": "text/html",
              ".log": "text/plain", ".txt": "text/plain", ".xml": "application/xml",
              ".tsv": "text/tab-separated-values"}
#: Binary document types by extension: a name claiming one must have that content.
BINARY_TYPES = {".pdf": PDF, ".docx": DOCX, ".xlsx": XLSX, ".zip": ZIP}
_UUID = re.compile(r"^[0-9a-fA-F-]{32,36}$")


class FileNotFound(TorenError):
    """No file has that id."""

    code = "file_not_found"
    http_status = 404


class BadFile(TorenError):
    """An upload that cannot be stored: empty, misnamed, or not what its name says."""

    code = "bad_file"
    http_status = 415


class FileTooLarge(BadFile):
    """An upload larger than ``TOREN_MAX_FILE_BYTES``."""

    code = "file_too_large"
    http_status = 413


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


def max_file_bytes(env: dict[str, str] | None = None) -> int:
    """Largest upload in bytes: ``TOREN_MAX_FILE_BYTES``, else 50 MiB."""
    return positive_number(os.environ if env is None else env, MAX_FILE_BYTES_ENV,
                           DEFAULT_MAX_FILE_BYTES, int)


def check_file_name(name: str) -> str:
    """The file's base name, cleaned; ``BadFile`` for an empty or unreadable one."""
    base = PurePath(name.replace("\\", "/")).name.strip()
    base = "".join(ch for ch in base if unicodedata.category(ch)[0] != "C")
    if not base or base in (".", ".."):
        raise BadFile(f"file name {name!r} is empty once directories and control characters "
                      "are removed; give the file a name such as report.pdf")
    if len(base) > MAX_NAME_LENGTH:
        raise BadFile(f"file name is {len(base)} characters; at most {MAX_NAME_LENGTH}")
    return base


def parse_file_id(value: str) -> str | None:
    """``value`` as a canonical UUID string, or ``None`` if it is not one."""
    if not _UUID.match(value):
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def sniff_type(head: bytes, name: str, open_zip: Any = None) -> str:
    """The content type of a file from its first bytes (and, for a zip, its entry names).

    ``open_zip`` is a callable returning a seekable binary file of the whole content, needed
    only to tell a docx from an xlsx from another zip. Raises ``BadFile`` when the name's
    extension claims a type the content is not (a ``.pdf`` that is text, a ``.docx`` that is
    a PDF): a document read as the wrong type gives the model nonsense or an error later.
    """
    extension = PurePath(name).suffix.lower()
    if head.startswith(b"%PDF-"):
        sniffed = PDF
    elif head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        kind = _zip_kind(open_zip) if open_zip is not None else ZIP
        # a damaged archive keeps the type its name claims: reading it says it is damaged
        sniffed = kind or BINARY_TYPES.get(extension, ZIP)
    elif _looks_like_text(head):
        sniffed = TEXT_TYPES.get(extension, "text/plain")
    else:
        sniffed = OCTET
    claimed = BINARY_TYPES.get(extension)
    if claimed is not None and claimed != sniffed and not (claimed == ZIP and sniffed in
                                                          (DOCX, XLSX)):
        raise BadFile(f"{name}: the name says {extension[1:].upper()} but the content is "
                      f"{describe_type(sniffed)}; rename the file or upload the right one")
    if extension in TEXT_TYPES and not sniffed.startswith(("text/", "application/j",
                                                           "application/y",
                                                           "application/x")):
        raise BadFile(f"{name}: the name says {extension[1:]} text but the content is "
                      f"{describe_type(sniffed)}; rename the file or upload the right one")
    return sniffed


def describe_type(content_type: str) -> str:
    return {PDF: "a PDF", DOCX: "a Word document (docx)", XLSX: "an Excel workbook (xlsx)",
            ZIP: "a zip archive", OCTET: "binary data"}.get(content_type, f"text ({content_type})")


def _looks_like_text(head: bytes) -> bool:
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:  # a character cut by the end of the sample is fine
        return exc.start >= len(head) - 3
    return True


def _zip_kind(open_zip: Any) -> str | None:
    """DOCX, XLSX or ZIP by the archive's entries; ``None`` when it cannot be opened."""
    try:
        with open_zip() as raw, zipfile.ZipFile(raw) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return None
    if "word/document.xml" in names:
        return DOCX
    if "xl/workbook.xml" in names:
        return XLSX
    return ZIP


def sniff_bytes(data: bytes, name: str) -> str:
    """``sniff_type`` for content held in memory."""
    return sniff_type(data[:4096], name, lambda: io.BytesIO(data))


@dataclass(frozen=True)
class Upload:
    """A checked upload, ready for ``FileStore.add_file``."""

    name: str
    content_type: str
    data: bytes
    sha256: str


def check_upload(name: str, data: bytes, *, max_bytes: int | None = None) -> Upload:
    """Name, size and sniffed type of an upload, or ``BadFile``/``FileTooLarge`` saying why."""
    import hashlib

    name = check_file_name(name)
    limit = max_file_bytes() if max_bytes is None else max_bytes
    if len(data) > limit:
        raise FileTooLarge(f"{name} is {len(data):,} bytes; uploads may be at most "
                           f"{limit:,} bytes ({MAX_FILE_BYTES_ENV})")
    if not data:
        raise BadFile(f"{name} is empty")
    return Upload(name, sniff_bytes(data, name), data, hashlib.sha256(data).hexdigest())
