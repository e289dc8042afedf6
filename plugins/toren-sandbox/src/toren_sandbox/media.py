"""Which workspace files ``read_file`` shows the model: images (PNG, JPEG, GIF, WebP) and PDFs,
known by their content, not their name.

``image_type`` and ``image_size`` are copies of ``toren.core.attachments``'s, which
``toren.plugin`` does not export (yet): a plugin imports only the public API.
"""

from __future__ import annotations

import re
import struct

from toren.plugin import PDF_TYPE

_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


def image_type(head: bytes) -> str | None:
    """The type of the image whose first bytes are ``head`` (PNG, JPEG, GIF, WebP), by its
    signature; ``None`` for anything else."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """An image's width and height from its header (PNG, GIF, WebP, JPEG), or ``None``."""
    try:
        if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
            return _positive(*struct.unpack(">II", data[16:24]))
        if data[:6] in (b"GIF87a", b"GIF89a"):
            return _positive(*struct.unpack("<HH", data[6:10]))
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp_size(data)
        if data.startswith(b"\xff\xd8"):
            return _jpeg_size(data)
    except struct.error:
        return None
    return None


def _positive(width: int, height: int) -> tuple[int, int] | None:
    return (width, height) if width > 0 and height > 0 else None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return _positive(width, height)
    if chunk == b"VP8L" and data[20:21] == b"\x2f":
        bits = int.from_bytes(data[21:25], "little")
        return _positive((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return _positive(width & 0x3FFF, height & 0x3FFF)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Walk the JPEG's markers to the first start-of-frame, which holds the size."""
    index = 2
    while index + 9 < len(data):
        if data[index] != 0xFF:
            return None
        marker = data[index + 1]
        if marker == 0xFF:  # fill byte
            index += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            index += 2
            continue
        (length,) = struct.unpack(">H", data[index + 2:index + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[index + 5:index + 9])
            return _positive(width, height)
        index += 2 + length
    return None


def shown_as(data: bytes) -> tuple[str, str] | None:
    """``(content type, what it is)`` of a file ``read_file`` shows the model: an image whose
    header gives its size (``"640x480"``) or a PDF (``"3 pages"``, or ``""`` when its page
    objects are compressed out of sight); ``None`` for every other file, read as text."""
    if data.startswith(b"%PDF-"):
        pages = len(_PDF_PAGE.findall(data))
        return PDF_TYPE, f"{pages} page{'s' if pages != 1 else ''}" if pages else ""
    content_type = image_type(data[:16])
    size = image_size(data) if content_type else None
    if content_type is None or size is None:  # a truncated or broken image is read as bytes
        return None
    return content_type, f"{size[0]}x{size[1]}"
