"""``RuntimeChannelContext``: the ``ChannelContext`` a ``toren.Runtime`` hands its channels."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from toren.config import Settings
from toren.core.approvals import ApprovalRecord
from toren.host.services.approvals import ApprovalsService
from toren.host.services.sessions import SessionsService
from toren.seams.store import Store
from toren.seams.store.channels import ChannelChats, ChannelInbox, ChannelOutbox


class RuntimeChannelContext:
    """What ``Runtime.start_channels``, the server (``Channel.routes``) and a worker beside
    the server (``Channel.notify_elsewhere``) give a channel: the runtime's sessions and
    approvals services, and the store only through its three channel interfaces (and a
    run's status)."""

    def __init__(self, store: Store, settings: Settings,
                 channel_agents: Callable[[str], dict[str, dict[str, Any]]],
                 sessions: SessionsService, approvals: ApprovalsService) -> None:
        self._store = store
        self._settings = settings
        self._channel_agents = channel_agents
        self._sessions = sessions
        self._approvals = approvals

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

    async def start_session(self, agent: str, *, idempotency_key: str | None = None) -> str:
        return await self._sessions.start(agent, idempotency_key=idempotency_key)

    async def send_message(self, session_id: str, text: str, *,
                           idempotency_key: str | None = None) -> int:
        return await self._sessions.send(session_id, text, idempotency_key=idempotency_key)

    async def get_session(self, session_id: str) -> dict[str, Any]:
        return await self._sessions.get(session_id)

    async def session_status(self, session_id: str, agent: str) -> str | None:
        record = await self._store.get_run(session_id, agent)
        return None if record is None else record.status

    async def get_approval(self, approval_id: str) -> ApprovalRecord:
        return await self._approvals.get(approval_id)

    async def decide_approval(self, approval_id: str, outcome: str, *,
                              decided_by: str) -> ApprovalRecord:
        return await self._approvals.decide(approval_id, outcome, decided_by=decided_by)
