"""Files shown to the model: what an attachment records, which kinds there are, what they cost.

An attachment is a reference to a stored file (``FileStore``, content kept once per SHA-256):
the event log and the conversation hold the reference, never the bytes. The task loop reads
the bytes just before a model call and hands them to the provider in
``ModelRequest.attachment_data``. Attachments come from a run's input or a session's message
(``files``, when the agent's model can see their kind) and from tools that return files
(``toren.ToolResult``: an MCP server's image, a screenshot read in the sandbox).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec

#: Kinds of attachment, by what a model must be able to take to see them.
AttachmentKind = Literal["image", "pdf"]
ATTACHMENT_KINDS: tuple[AttachmentKind, ...] = ("image", "pdf")
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
PDF_TYPE = "application/pdf"
#: Every content type a model may be shown (``Model.input_types`` is a subset of it).
SHOWABLE_TYPES = IMAGE_TYPES | {PDF_TYPE}

#: Anthropic's published estimate for an image: width x height / 750 tokens, after scaling it
#: to fit 1568 px on its long edge and about 1.15 megapixels.
IMAGE_PIXELS_PER_TOKEN = 750
IMAGE_MAX_EDGE = 1568
IMAGE_MAX_PIXELS = 1_150_000
#: An image whose size could not be read is counted at the largest an image can cost.
UNKNOWN_IMAGE_TOKENS = IMAGE_MAX_PIXELS // IMAGE_PIXELS_PER_TOKEN
#: A PDF page is shown as its text and an image of the page: about this many tokens.
PDF_PAGE_TOKENS = 1_600
_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


Positive = Annotated[int, msgspec.Meta(ge=1)]


class Attachment(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
                 forbid_unknown_fields=True):
    """A stored file shown to the model with a message: recorded in ``TaskStarted``,
    ``UserMessage`` and ``ToolCallCompleted`` (``attachments``), carried by ``Message``.

    Providers read its bytes from ``ModelRequest.attachment_data[file_id]``."""

    file_id: Annotated[str, msgspec.Meta(description="The stored file (GET /files/{id}).")]
    name: str
    content_type: Annotated[str, msgspec.Meta(
        description="image/png, image/jpeg, image/gif, image/webp or application/pdf.")]
    size_bytes: Annotated[int, msgspec.Meta(ge=0)]
    sha256: str
    width: Annotated[Positive | None, msgspec.Meta(
        description="An image's width in pixels, when its header says.")] = None
    height: Positive | None = None
    pages: Annotated[Positive | None, msgspec.Meta(
        description="A PDF's page count, as its page objects say.")] = None

    @property
    def kind(self) -> AttachmentKind:
        return "pdf" if self.content_type == PDF_TYPE else "image"

    def describe(self) -> str:
        """One line naming the file for a person or a model: name, type, size, id."""
        shape = (f", {self.width}x{self.height} px" if self.width and self.height else
                 f", {self.pages} page{'s' if self.pages != 1 else ''}" if self.pages else "")
        return f"{self.name} ({self.content_type}{shape}, {self.size_bytes:,} bytes, " \
               f"file id {self.file_id})"


def attachment_kind(content_type: str) -> AttachmentKind | None:
    """The kind a file of ``content_type`` is shown as, or ``None`` (not showable)."""
    if content_type == PDF_TYPE:
        return "pdf"
    return "image" if content_type in IMAGE_TYPES else None


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


def pdf_pages(data: bytes) -> int | None:
    """A PDF's page count as its page objects say (a compressed object stream hides them:
    ``None`` then)."""
    pages = len(_PDF_PAGE.findall(data))
    return pages or None


def describe_file(*, file_id: str, name: str, content_type: str, size_bytes: int, sha256: str,
                  data: bytes) -> Attachment:
    """The attachment of a stored file whose content is ``data``: its size in pixels or
    pages read now, so token estimates need not read it again."""
    size = image_size(data) if content_type in IMAGE_TYPES else None
    return Attachment(file_id=file_id, name=name, content_type=content_type,
                      size_bytes=size_bytes, sha256=sha256,
                      width=size[0] if size else None, height=size[1] if size else None,
                      pages=pdf_pages(data) if content_type == PDF_TYPE else None)


def estimated_tokens(attachment: Attachment) -> int:
    """The input tokens showing ``attachment`` costs, by Anthropic's published formula for
    images (scaled to fit) and about 1,600 a PDF page: what receipts, budgets and compaction
    count when the provider gives no figure of its own (``Model.attachment_tokens``)."""
    if attachment.kind == "pdf":
        return PDF_PAGE_TOKENS * (attachment.pages or max(1, attachment.size_bytes // 50_000))
    if not attachment.width or not attachment.height:
        return UNKNOWN_IMAGE_TOKENS
    width, height = float(attachment.width), float(attachment.height)
    scale = min(1.0, IMAGE_MAX_EDGE / max(width, height),
                math.sqrt(IMAGE_MAX_PIXELS / (width * height)))
    return max(1, round(width * scale * height * scale / IMAGE_PIXELS_PER_TOKEN))


def unseen_note(attachments: Iterable[Attachment], why: str) -> str:
    """The text a model reads in place of attachments it is not shown (``why``)."""
    lines = [f"[{why}:"] + [f"- {a.describe()}" for a in attachments]
    return "\n".join(lines) + "]"


@dataclass(frozen=True)
class AttachmentPolicy:
    """An agent's ``attachments:``: the kinds shown to its model as content blocks, and what
    happens when its model cannot take one of them (``text``: a note naming the file;
    ``refuse``: an error when the agent is loaded)."""

    show: tuple[AttachmentKind, ...] = ATTACHMENT_KINDS
    unsupported: Literal["text", "refuse"] = "text"

    @classmethod
    def from_yaml(cls, data: dict[str, Any] | None) -> AttachmentPolicy:
        """The policy from agent.yaml (validated by agent.schema.json already)."""
        data = data or {}
        return cls(show=tuple(data.get("show", ATTACHMENT_KINDS)),
                   unsupported=data.get("unsupported", "text"))

    def to_json(self) -> dict[str, Any]:
        return {"show": list(self.show), "unsupported": self.unsupported}

    def shows(self, content_type: str, input_types: frozenset[str]) -> bool:
        """Whether a file of ``content_type`` goes to a model taking ``input_types`` as a
        content block."""
        kind = attachment_kind(content_type)
        return kind is not None and kind in self.show and content_type in input_types

    def unseen_kinds(self, input_types: frozenset[str]) -> list[AttachmentKind]:
        """The kinds in ``show`` a model taking ``input_types`` cannot take (in full: a
        model that takes PNG but not WebP cannot take ``image``)."""
        wanted = {"image": IMAGE_TYPES, "pdf": frozenset({PDF_TYPE})}
        return [kind for kind in self.show if not wanted[kind] <= input_types]
