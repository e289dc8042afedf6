"""``RuntimeChannelContext``: the ``ChannelContext`` a ``toren.Runtime`` hands its channels."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path, PurePath
from typing import Any

from toren.config import Settings
from toren.core.actors import Actor
from toren.core.approvals import ApprovalRecord
from toren.core.attachments import SHOWABLE_TYPES
from toren.files import (
    IMAGE_EXTENSIONS,
    BadFile,
    check_upload,
    describe_type,
)
from toren.host.services.approvals import ApprovalsService
from toren.host.services.audit import AuditLog
from toren.host.services.files import FilesService
from toren.host.services.sessions import SessionsService
from toren.seams.store import Store
from toren.seams.store.channels import ChannelChats, ChannelInbox, ChannelOutbox


class RuntimeChannelContext:
    """What ``Runtime.start_channels``, the server (``Channel.routes``) and a worker beside
    the server (``Channel.notify_elsewhere``) give a channel: the runtime's sessions and
    approvals services, and the store only through its three channel interfaces (and a
    run's status), and files added under the upload rules and the storage quota."""

    def __init__(self, store: Store, settings: Settings,
                 channel_agents: Callable[[str], dict[str, dict[str, Any]]],
                 sessions: SessionsService, approvals: ApprovalsService,
                 audit: AuditLog | None = None) -> None:
        self._store = store
        self._audit = audit if audit is not None else AuditLog(store)
        self._settings = settings
        self._channel_agents = channel_agents
        self._sessions = sessions
        self._approvals = approvals
        self._files = FilesService(store, settings)

    @property
    def inbox(self) -> ChannelInbox:
        return self._store

    @property
    def chats(self) -> ChannelChats:
        return self._store

    @property
    def outbox(self) -> ChannelOutbox:
        return self._store

    @property
    def lease_ttl_s(self) -> float:
        return float(self._settings.lease_ttl_s)

    @property
    def poll_interval_s(self) -> float:
        return float(self._settings.poll_interval_s)

    @property
    def home(self) -> Path:
        return self._settings.home

    @property
    def skip_preflight(self) -> bool:
        return bool(self._settings.skip_preflight)

    def channel_agents(self, channel: str) -> dict[str, dict[str, Any]]:
        return self._channel_agents(channel)

    async def start_session(self, agent: str, *, idempotency_key: str | None = None,
                            subject: str | None = None) -> str:
        return await self._sessions.start(agent, idempotency_key=idempotency_key,
                                          subject=subject)

    @property
    def max_file_bytes(self) -> int:
        return int(self._settings.max_file_bytes)

    async def send_message(self, session_id: str, text: str, *,
                           idempotency_key: str | None = None,
                           files: Sequence[str] | None = None) -> int:
        return await self._sessions.send(session_id, text, idempotency_key=idempotency_key,
                                         files=list(files) if files else None)

    async def add_file(self, *, name: str, content_type: str, data: bytes,
                       uploaded_by: str) -> str:
        named = name_with_extension(name, content_type)
        # the size cap, the name and the sniffed type as POST /files checks them; hashing
        # megabytes runs off the event loop
        upload = await asyncio.to_thread(check_upload, named, data,
                                         max_bytes=self.max_file_bytes)
        if content_type in SHOWABLE_TYPES and upload.content_type not in SHOWABLE_TYPES:
            raise BadFile(f"{upload.name} was sent as {describe_type(content_type)} but the "
                          f"content is {describe_type(upload.content_type)}")
        stored = await self._files.add(upload, uploaded_by=uploaded_by)
        return stored.id

    def crash_point(self, name: str) -> None:
        """A named crash point (``toren.crashpoints``) for the channel machinery's SIGKILL
        tests; nothing unless ``TOREN_CRASH_AT`` names it. Not part of ``ChannelContext``."""
        self._settings.crash_point(name)

    async def get_session(self, session_id: str) -> dict[str, Any]:
        return await self._sessions.get(session_id)

    async def session_status(self, session_id: str, agent: str) -> str | None:
        record = await self._store.get_run(session_id, agent)
        return None if record is None else record.status

    async def get_approval(self, approval_id: str) -> ApprovalRecord:
        return await self._approvals.get(approval_id)

    async def decide_approval(self, approval_id: str, outcome: str, *, decided_by: str,
                              digest: str | None = None,
                              scope: str = "call") -> ApprovalRecord:
        # a chat button's press (decided_by ``<channel>:<user id>``): recorded as the person
        channel = decided_by.partition(":")[0]
        action = {"approved": "approval.approve", "denied": "approval.deny"}.get(
            outcome, f"approval.{outcome}")
        async with self._audit.recording(
                Actor("channel", decided_by, decided_by), action, "chat",
                target=approval_id, details={"channel": channel, "digest": digest,
                                             "scope": scope}) as note:
            record = await self._approvals.decide(approval_id, outcome, decided_by=decided_by,
                                                  digest=digest, scope=scope)
            note.agent, note.run_id = record.agent, record.run_id
        return record


#: The extension a file of a content type is named with when its name has none.
EXTENSIONS = {content_type: extension for extension, content_type in
              reversed(list(IMAGE_EXTENSIONS.items()))} | {"application/pdf": ".pdf"}


def name_with_extension(name: str, content_type: str) -> str:
    """``name``, with the extension of ``content_type`` appended when it has none (a
    platform's ``photo`` of type image/jpeg is stored as ``photo.jpg``)."""
    extension = EXTENSIONS.get(content_type)
    if extension is None or PurePath(name.replace("\\", "/")).suffix:
        return name
    return name + extension
