"""Files handed to agents: the record stores return, names, size cap, content sniffing, and
uploads spooled to disk as they arrive."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import re
import struct
import tempfile
import unicodedata
import uuid
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import PurePath
from typing import IO, Any

from toren.config import positive_number
from toren.core.attachments import image_type
from toren.core.files import FileContent as FileContent
from toren.core.files import StoredFile as StoredFile
from toren.errors import TorenError

MAX_FILE_BYTES_ENV = "TOREN_MAX_FILE_BYTES"
DEFAULT_MAX_FILE_BYTES = 50 * 1024 * 1024
#: Bytes per piece as an upload is spooled, stored and read back: what an upload costs in
#: memory, whatever its size.
CHUNK_BYTES = 1024 * 1024
#: Bytes at the start of a file that its type is sniffed from.
SNIFF_BYTES = 4096
#: A zip whose central directory (its list of entries) is larger than this is not listed to
#: tell a docx or an xlsx (a few KiB of entries) from another zip: a 50 MiB zip of empty
#: entries would list half a million of them, hundreds of MB in memory.
MAX_ZIP_DIRECTORY_BYTES = 1024 * 1024
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
#: Image types by extension: a name claiming one must hold an image (of any of these types:
#: a PNG saved as .jpg is still shown as the PNG it is).
IMAGE_EXTENSIONS = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                    ".gif": "image/gif", ".webp": "image/webp"}
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


class StorageQuotaExceeded(TorenError):
    """Storing the file would take the deployment's files past ``TOREN_MAX_TOTAL_FILE_BYTES``."""

    code = "storage_quota_exceeded"
    http_status = 507


def storage_quota_message(what: str, stored: int, adding: int | None, limit: int) -> str:
    """Why an upload of ``adding`` bytes (``None``: of any size) is refused with ``stored``
    bytes stored of ``limit``."""
    more = "any more" if adding is None else f"{adding:,} more"
    return (f"{what}: the files stored take {stored:,} bytes; {more} would pass {limit:,} "
            "bytes, the most this deployment stores (TOREN_MAX_TOTAL_FILE_BYTES); delete "
            "files no longer needed (toren files rm) or raise the setting")


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
    image = image_type(head)
    if image is not None:
        sniffed = image
    elif head.startswith(b"%PDF-"):
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
    if extension in IMAGE_EXTENSIONS and image is None:
        raise BadFile(f"{name}: the name says {extension[1:].upper()} but the content is "
                      f"{describe_type(sniffed)}; rename the file or upload the right one")
    if extension in TEXT_TYPES and not sniffed.startswith(("text/", "application/j",
                                                           "application/y",
                                                           "application/x")):
        raise BadFile(f"{name}: the name says {extension[1:]} text but the content is "
                      f"{describe_type(sniffed)}; rename the file or upload the right one")
    return sniffed


def describe_type(content_type: str) -> str:
    if content_type.startswith("image/"):
        return f"a {content_type[6:].upper()} image"
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
        with open_zip() as raw:
            if _zip_directory_bytes(raw) > MAX_ZIP_DIRECTORY_BYTES:
                return ZIP  # no office document has that many entries
            with zipfile.ZipFile(raw) as archive:
                names = set(archive.namelist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error):
        return None
    if "word/document.xml" in names:
        return DOCX
    if "xl/workbook.xml" in names:
        return XLSX
    return ZIP


def _zip_directory_bytes(raw: IO[bytes]) -> int:
    """The size of a zip's central directory, from its end record (found as ``zipfile``
    finds it: at the very end, else the last signature within the largest comment); a zip64
    archive, whose sizes are in another record, counts as too large to list."""
    raw.seek(0, os.SEEK_END)
    size = raw.tell()
    raw.seek(max(0, size - 22 - 65535))
    tail = raw.read()
    at = len(tail) - 22 if tail[-22:-18] == b"PK\x05\x06" else tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        raise zipfile.BadZipFile("no end of central directory record")
    entries, directory_bytes = struct.unpack("<HI", tail[at + 10:at + 16])
    locator = tail[at - 20:at] if at >= 20 else b""
    if (entries == 0xFFFF or directory_bytes == 0xFFFFFFFF) and locator[:4] == b"PK\x06\x07":
        # zip64: the sizes are in the zip64 end record the locator points at
        (record_at,) = struct.unpack("<Q", locator[8:16])
        raw.seek(record_at)
        record = raw.read(56)
        if record[:4] != b"PK\x06\x06" or len(record) < 56:
            raise zipfile.BadZipFile("no zip64 end of central directory record")
        (directory_bytes,) = struct.unpack("<Q", record[40:48])
    raw.seek(0)
    return int(directory_bytes)


def sniff_bytes(data: bytes, name: str) -> str:
    """``sniff_type`` for content held in memory."""
    return sniff_type(data[:4096], name, lambda: io.BytesIO(data))


@dataclass(frozen=True)
class Upload:
    """A checked upload, ready for ``FileStore.add_file``."""

    name: str
    content_type: str
    data: bytes | FileContent
    sha256: str

    @property
    def size_bytes(self) -> int:
        return content_size(self.data)


class UploadSpool:
    """An upload written to an anonymous temporary file (in ``TMPDIR``) as it arrives, hashed
    as it goes, and read back in pieces for the store: an upload costs a chunk of memory, not
    its size. Writes, hashing and reads run in threads, off the event loop.

    ``async with UploadSpool(name, max_bytes) as spool``: ``await spool.write(piece)`` for
    each piece received (``FileTooLarge`` past ``max_bytes``), then ``await spool.check()``
    for the ``Upload`` (its ``data`` is the spool: valid until the ``with`` block ends).
    """

    def __init__(self, name: str, max_bytes: int) -> None:
        self.name = name
        self.max_bytes = max_bytes
        self.size_bytes = 0
        self._head = b""
        self._sha256 = hashlib.sha256()
        self._file: IO[bytes] | None = None

    async def __aenter__(self) -> UploadSpool:
        self._file = await asyncio.to_thread(tempfile.TemporaryFile, prefix="toren-upload-")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._file is not None:
            await asyncio.to_thread(self._file.close)
            self._file = None

    @property
    def _open(self) -> IO[bytes]:
        if self._file is None:
            raise RuntimeError("UploadSpool is used outside its async with block")
        return self._file

    async def write(self, piece: bytes) -> None:
        """Append ``piece``; ``FileTooLarge`` (nothing written) when it takes the upload past
        ``max_bytes``."""
        if self.size_bytes + len(piece) > self.max_bytes:
            raise FileTooLarge(f"{self.name} is larger than {self.max_bytes:,} bytes, the most "
                               f"an upload may be ({MAX_FILE_BYTES_ENV})")
        if len(self._head) < SNIFF_BYTES:
            self._head += piece[:SNIFF_BYTES - len(self._head)]
        self.size_bytes += len(piece)
        await asyncio.to_thread(self._append, self._open, piece)

    def _append(self, file: IO[bytes], piece: bytes) -> None:
        file.write(piece)
        self._sha256.update(piece)  # hashlib lets other threads run while it hashes

    async def check(self) -> Upload:
        """The spooled upload's name, sniffed type and SHA-256; ``BadFile`` saying what is
        wrong with it (empty, misnamed)."""
        name = check_file_name(self.name)
        if not self.size_bytes:
            raise BadFile(f"{name} is empty")
        await asyncio.to_thread(self._open.flush)
        content_type = await asyncio.to_thread(sniff_type, self._head, name, self._reopen)
        return Upload(name, content_type, self, self._sha256.hexdigest())

    def _reopen(self) -> IO[bytes]:
        """A second handle on the spool for ``zipfile``, which closes what it is given (it
        shares the spool's file position, which ``chunks`` does not use)."""
        return os.fdopen(os.dup(self._open.fileno()), "rb")

    async def chunks(self) -> AsyncIterator[bytes]:
        await asyncio.to_thread(self._open.flush)
        descriptor, offset = self._open.fileno(), 0
        while piece := await asyncio.to_thread(os.pread, descriptor, CHUNK_BYTES, offset):
            offset += len(piece)
            yield piece


async def content_chunks(data: bytes | FileContent) -> AsyncIterator[bytes]:
    """``data`` in pieces of at most ``CHUNK_BYTES``, from memory or from a ``FileContent``."""
    if isinstance(data, bytes):
        for start in range(0, len(data), CHUNK_BYTES):
            yield data[start:start + CHUNK_BYTES]
        return
    async for piece in data.chunks():
        yield piece


def content_size(data: bytes | FileContent) -> int:
    """``data``'s length, in memory or not."""
    return len(data) if isinstance(data, bytes) else data.size_bytes


def check_upload(name: str, data: bytes, *, max_bytes: int | None = None) -> Upload:
    """Name, size and sniffed type of an upload held in memory, or ``BadFile``/``FileTooLarge``
    saying why (uploads that arrive in pieces go through ``UploadSpool``)."""
    name = check_file_name(name)
    limit = max_file_bytes() if max_bytes is None else max_bytes
    if len(data) > limit:
        raise FileTooLarge(f"{name} is {len(data):,} bytes; uploads may be at most "
                           f"{limit:,} bytes ({MAX_FILE_BYTES_ENV})")
    if not data:
        raise BadFile(f"{name} is empty")
    return Upload(name, sniff_bytes(data, name), data, hashlib.sha256(data).hexdigest())
