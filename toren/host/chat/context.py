"""``RuntimeChannelContext``: the ``ChannelContext`` a ``toren.Runtime`` hands its channels."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from toren.core.approvals import ApprovalRecord
from toren.seams.store.channels import ChannelChats, ChannelInbox, ChannelOutbox

if TYPE_CHECKING:
    from toren.host.runtime import Runtime


class RuntimeChannelContext:
    """What ``Runtime.start_channels``, the server (``Channel.routes``) and a worker beside
    the server (``Channel.notify_elsewhere``) give a channel: the runtime's sessions and
    approvals, and the store only through its three channel interfaces."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    @property
    def inbox(self) -> ChannelInbox:
        return self._runtime.store

    @property
    def chats(self) -> ChannelChats:
        return self._runtime.store

    @property
    def outbox(self) -> ChannelOutbox:
        return self._runtime.store

    @property
    def lease_ttl_s(self) -> float:
        return float(self._runtime.settings.lease_ttl_s)

    @property
    def poll_interval_s(self) -> float:
        return float(self._runtime.settings.poll_interval_s)

    @property
    def home(self) -> Path:
        return self._runtime.settings.home

    @property
    def skip_preflight(self) -> bool:
        return bool(self._runtime.settings.skip_preflight)

    def channel_agents(self, channel: str) -> dict[str, dict[str, Any]]:
        return self._runtime.channel_agents(channel)

    async def start_session(self, agent: str, *, idempotency_key: str | None = None) -> str:
        return await self._runtime.start_session(agent, idempotency_key=idempotency_key)

    async def send_message(self, session_id: str, text: str, *,
                           idempotency_key: str | None = None) -> int:
        return await self._runtime.send_message(session_id, text,
                                                idempotency_key=idempotency_key)

    async def get_session(self, session_id: str) -> dict[str, Any]:
        return await self._runtime.get_session(session_id)

    async def session_status(self, session_id: str, agent: str) -> str | None:
        record = await self._runtime.store.get_run(session_id, agent)
        return None if record is None else record.status

    async def get_approval(self, approval_id: str) -> ApprovalRecord:
        return await self._runtime.get_approval(approval_id)

    async def decide_approval(self, approval_id: str, outcome: str, *,
                              decided_by: str) -> ApprovalRecord:
        return await self._runtime.decide_approval(approval_id, outcome,
                                                   decided_by=decided_by)
