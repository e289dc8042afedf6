"""Attachments at the task loop's edges: files a tool returned, stored before its result is
recorded; and the bytes of every attachment read just before a model call.

The log holds references only (``toren.core.attachments.Attachment``); what a model is shown
is decided per call, so a fallback model that cannot see images reads a note instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Sequence

from toren.core.attachments import (
    SHOWABLE_TYPES,
    Attachment,
    AttachmentPolicy,
    attachment_kind,
    describe_file,
    image_type,
    unseen_note,
)
from toren.core.messages import attachments_of
from toren.errors import TorenError
from toren.seams.model import Message, Model, ModelRequest
from toren.seams.store import FileStore
from toren.seams.tools import ToolFile

log = logging.getLogger(__name__)

#: Files one tool result may bring: more is a tool bug, not a picture worth showing.
MAX_TOOL_FILES = 20


def _checked(file: ToolFile, max_bytes: int) -> str | None:
    """Why a returned file cannot be shown, or ``None``."""
    if not isinstance(file, ToolFile):
        return f"{type(file).__name__} is not a toren.ToolFile"
    if file.content_type not in SHOWABLE_TYPES:
        return (f"{file.name!r} is {file.content_type}; a tool can show PNG, JPEG, GIF, WebP "
                "and PDF files")
    if not isinstance(file.data, bytes) or not file.data:
        return f"{file.name!r} has no content"
    if len(file.data) > max_bytes:
        return (f"{file.name!r} is {len(file.data):,} bytes, over the {max_bytes:,} a file may "
                "have (TOREN_MAX_FILE_BYTES)")
    if attachment_kind(file.content_type) == "pdf":
        if not file.data.startswith(b"%PDF-"):
            return f"{file.name!r} says application/pdf but is not a PDF"
    elif image_type(file.data) != file.content_type:
        return f"{file.name!r} says {file.content_type} but its content is not such an image"
    return None


async def store_tool_files(files: FileStore | None, files_returned: Sequence[ToolFile], *,
                           agent: str, run_id: str, tool: str, max_bytes: int,
                           max_stored_bytes: int | None) -> tuple[tuple[Attachment, ...], str]:
    """Store the files a tool returned (one copy per distinct content) and return their
    attachments, with a note (``""`` if none) on those that could not be kept: the model
    reads it after the tool's text, and nothing the tool said is lost.

    A crash after storing and before the result is recorded leaves stored files no event
    names; the call runs again (or is reported interrupted) as any other.
    """
    kept: list[Attachment] = []
    refused: list[str] = []
    if files is None and files_returned:
        return (), "\n[the tool returned files, but this deployment has no file store]"
    for file in files_returned[:MAX_TOOL_FILES]:
        why = _checked(file, max_bytes)
        if why is not None or files is None:
            refused.append(why or "")
            continue
        sha256 = hashlib.sha256(file.data).hexdigest()
        try:
            stored = await files.add_file(name=file.name, content_type=file.content_type,
                                          data=file.data, sha256=sha256,
                                          uploaded_by=f"tool:{tool}", agent=agent,
                                          run_id=run_id, max_stored_bytes=max_stored_bytes)
        except TorenError as exc:  # the storage quota: say so, keep the text
            refused.append(f"{file.name!r} was not stored: {exc.message}")
            continue
        kept.append(describe_file(file_id=stored.id, name=stored.name,
                                  content_type=stored.content_type,
                                  size_bytes=stored.size_bytes, sha256=stored.sha256,
                                  data=file.data))
    if len(files_returned) > MAX_TOOL_FILES:
        refused.append(f"{len(files_returned) - MAX_TOOL_FILES} more files (a result may "
                       f"bring {MAX_TOOL_FILES})")
    note = ("\n[not shown: " + "; ".join(refused) + "]") if refused else ""
    return tuple(kept), note


class AttachmentReader:
    """Reads attachments' bytes for the task loop's requests, once per file per task."""

    def __init__(self, files: FileStore | None) -> None:
        self._files = files
        self._content: dict[str, bytes | None] = {}

    async def _read(self, file_id: str) -> bytes | None:
        if file_id not in self._content:
            found = await self._files.read_file(file_id) if self._files is not None else None
            self._content[file_id] = found[1] if found is not None else None
        return self._content[file_id]

    async def shown(self, request: ModelRequest, model: Model,
                    policy: AttachmentPolicy) -> ModelRequest:
        """``request`` as ``model`` is to see it: each attachment it takes (of a kind the
        agent's ``attachments.show`` lists) with its bytes in ``attachment_data``; any other,
        or one whose file was deleted, as a note in its message's text. A request without
        attachments is returned as it is."""
        if not any(map(attachments_of, request.messages)):  # no Python step per message
            return request
        data: dict[str, bytes] = {}
        messages: list[Message] = []
        for message in request.messages:
            if not message.attachments:
                messages.append(message)
                continue
            shown: list[Attachment] = []
            unseen: list[Attachment] = []
            left_out: list[Attachment] = []
            gone: list[Attachment] = []
            for attachment in message.attachments:
                if attachment.content_type not in model.input_types:
                    unseen.append(attachment)
                    continue
                if not policy.shows(attachment.content_type, model.input_types):
                    left_out.append(attachment)
                    continue
                content = await self._read(attachment.file_id)
                if content is None:
                    gone.append(attachment)
                    continue
                data[attachment.file_id] = content
                shown.append(attachment)
            notes = []
            if unseen:
                notes.append(unseen_note(unseen, f"{model.model_id} cannot be shown these "
                                                 "files; tools may read them by id"))
            if left_out:
                notes.append(unseen_note(left_out, "the agent's attachments.show leaves these "
                                                   "files out; tools may read them by id"))
            if gone:
                notes.append(unseen_note(gone, "these files were deleted and cannot be shown"))
            text = "\n\n".join([message.text, *notes]) if message.text else "\n\n".join(notes)
            messages.append(dataclasses.replace(message, text=text, attachments=tuple(shown)))
        return dataclasses.replace(request, messages=tuple(messages), attachment_data=data)


def image_tokens(request: ModelRequest, model: Model) -> int:
    """The input tokens the request's attachments take, by ``model``'s formula."""
    attachments = request.attachments
    return sum(map(model.attachment_tokens, attachments)) if attachments else 0
