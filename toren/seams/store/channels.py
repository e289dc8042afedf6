"""Chat channels' durable state: the poller lease, the inbox of updates, chats, pairing, sends."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

#: What happened to an incoming update: ``pending`` (recorded, not yet handled), ``delivered``
#: (a turn of the chat's session started; its reply is owed), ``answered`` (the reply is in the
#: send outbox), ``refused`` (its sender is not allowed; nothing reached the model), ``busy``
#: (answered "still working"), ``handled`` (a button press or other non-turn update, done).
UPDATE_STATUSES = ("pending", "delivered", "answered", "refused", "busy", "handled")
#: A person's standing with an agent's channel: waiting for an operator, or decided.
PAIRING_STATUSES = ("pending", "approved", "denied")


@dataclass(frozen=True)
class ChannelUpdate:
    """One incoming update from a chat platform, as recorded before it is acknowledged."""

    channel: str
    agent: str
    #: The platform's unique id of the update (Telegram's update_id, WhatsApp's message id).
    update_id: str
    chat_id: str
    user_id: str
    #: ``message`` (text for the agent) or ``button`` (an inline button was pressed).
    kind: str
    text: str
    #: Orders a chat's updates (the platform's sequence or timestamp), whatever their arrival.
    sort_key: int = 0
    #: Platform details a channel keeps (the user's display name, a callback's id).
    payload: dict[str, Any] = field(default_factory=dict)
    status: str = "pending"
    session_id: str | None = None
    turn: int | None = None
    received_at: datetime | None = None


@dataclass(frozen=True)
class ChannelSend:
    """One message to send to a chat, recorded before it is sent, under a key that makes it
    once-only (``reply:<session>:<turn>:<part>``, ``refusal:<user>``, ...)."""

    key: str
    chat_id: str
    text: str
    #: ``{"buttons": [[{"text", "data"}]]}`` for inline buttons, ``{}`` for plain text.
    payload: dict[str, Any] = field(default_factory=dict)
    channel: str = ""
    agent: str = ""
    attempts: int = 0
    last_error: str | None = None
    sent_at: datetime | None = None


@dataclass(frozen=True)
class ChannelPairing:
    """A person who wrote to an agent's channel without being allow-listed."""

    channel: str
    agent: str
    user_id: str
    chat_id: str
    code: str
    status: str
    display_name: str = ""
    created_at: datetime | None = None
    decided_at: datetime | None = None
    decided_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"channel": self.channel, "agent": self.agent, "user_id": self.user_id,
                "chat_id": self.chat_id, "code": self.code, "status": self.status,
                "display_name": self.display_name,
                "created_at": self.created_at.isoformat() if self.created_at else None,
                "decided_at": self.decided_at.isoformat() if self.decided_at else None,
                "decided_by": self.decided_by}


class ChannelInbox(abc.ABC):
    """The poller lease and the incoming updates of ``toren.host.chat.ChatChannel``, per
    channel and agent.

    The lease holder (one process per channel and agent) calls every method but
    ``record_channel_update``, which any process may call (a webhook lands on any server).
    An update's texts and ids arrive cleaned (``toren.core.chat_text.storable_text``: no NUL,
    no lone surrogate). ``toren.testing.contracts.ChannelInboxContract`` checks these rules.
    """

    @abc.abstractmethod
    async def claim_channel_lease(self, channel: str, agent: str, holder: str,
                                  ttl_s: float) -> bool:
        """Take or renew the poller lease of ``channel`` for ``agent`` for ``ttl_s`` seconds
        (the store's clock); ``True`` if ``holder`` holds it now (it was free, expired, or
        already its own). Of holders claiming a free lease at once, exactly one gets it."""

    @abc.abstractmethod
    async def release_channel_lease(self, channel: str, agent: str, holder: str) -> None:
        """Give the lease up at once (on a clean stop) if ``holder`` holds it."""

    @abc.abstractmethod
    async def record_channel_update(self, update: ChannelUpdate) -> bool:
        """Record an incoming update under its unique id (per channel and agent); ``False`` if
        it was recorded before (a duplicate or a redelivery): of processes recording one
        update at once, exactly one gets ``True``. Returns only once the insert is committed,
        so the caller may then acknowledge the update to the platform."""

    @abc.abstractmethod
    async def pending_channel_updates(self, channel: str, agent: str,
                                      limit: int = 100) -> list[ChannelUpdate]:
        """Updates still ``pending``, at most ``limit``, each chat's in order (``sort_key``,
        then arrival)."""

    @abc.abstractmethod
    async def delivered_channel_updates(self, channel: str, agent: str) -> list[ChannelUpdate]:
        """Updates whose turn started and whose reply is not yet in the outbox."""

    @abc.abstractmethod
    async def set_channel_update(self, channel: str, agent: str, update_id: str, status: str,
                                 *, session_id: str | None = None,
                                 turn: int | None = None) -> None:
        """Move an update to ``status`` (one of ``UPDATE_STATUSES``), with its session/turn
        (``None`` keeps what it had); an unknown update is left alone."""

    @abc.abstractmethod
    async def answer_channel_update(self, channel: str, agent: str, update_id: str,
                                    status: str, sends: list[ChannelSend]) -> None:
        """Record ``sends`` in the outbox (each key once) and move the update to ``status``,
        in one transaction: a crash leaves either both or neither."""



class ChannelChats(abc.ABC):
    """Which session serves each chat, and who may talk to an agent over a chat channel.

    The lease holder calls every method but ``list_pairings`` and ``decide_pairing``, which
    ``toren channels pair`` calls; ``session_chat`` is also called by any process that offers a
    session's notice (``ChatChannel.notify``). ``toren.testing.contracts.ChannelChatsContract``
    checks these rules.
    """

    @abc.abstractmethod
    async def chat_session(self, channel: str, agent: str, chat_id: str) -> str | None:
        """The session that serves ``chat_id``, if one was bound."""

    @abc.abstractmethod
    async def bind_chat_session(self, channel: str, agent: str, chat_id: str,
                                session_id: str) -> str:
        """Bind ``chat_id`` to ``session_id`` (replacing an ended one); return the bound id."""

    @abc.abstractmethod
    async def session_chat(self, channel: str, session_id: str) -> tuple[str, str] | None:
        """``(agent, chat_id)`` of the chat that ``session_id`` serves on ``channel``."""

    @abc.abstractmethod
    async def channel_user_status(self, channel: str, agent: str, user_id: str) -> str | None:
        """``approved``, ``denied`` or ``pending`` for a person seen before, else ``None``."""

    @abc.abstractmethod
    async def request_pairing(self, pairing: ChannelPairing) -> ChannelPairing:
        """Record a pending pairing for a person not seen before; return the stored record
        (the earlier one, code and all, if there is one)."""

    @abc.abstractmethod
    async def list_pairings(self, status: str | None = None) -> list[ChannelPairing]:
        """Pairings of every channel and agent, newest first (``status`` filters); a driver
        may stop at the newest few hundred (the ``postgres`` store lists 500)."""

    @abc.abstractmethod
    async def decide_pairing(self, code: str, status: str,
                             decided_by: str) -> ChannelPairing | None:
        """Approve or deny the pending pairing with ``code``; ``None`` if no pairing has that
        code. A decided pairing is returned unchanged."""

    @abc.abstractmethod
    async def chat_button_key(self, new_key: bytes) -> bytes:
        """The deployment's key that signs approval buttons (``toren.host.chat.buttons``):
        ``new_key`` is stored if none is yet, and every later call, from any process, returns
        the stored one (it must outlive restarts: a button shown last week stays valid).
        Processes starting at once each offer a key: one is stored, and all of them get it."""


class ChannelOutbox(abc.ABC):
    """Messages to send to chats, each recorded under a once-only key before it is sent.

    Any process may call ``enqueue_channel_sends`` (a worker committing a notice); the lease
    holder claims, sends and finishes them. ``ChannelInbox.answer_channel_update`` writes
    replies here in the transaction that marks their update answered.
    ``toren.testing.contracts.ChannelOutboxContract`` checks these rules.
    """

    @abc.abstractmethod
    async def enqueue_channel_sends(self, channel: str, agent: str,
                                    sends: list[ChannelSend]) -> int:
        """Record messages to send; a key recorded before (per channel and agent, sent or
        not) is skipped, and of processes recording one key at once one records it. Returns
        how many were new."""

    @abc.abstractmethod
    async def due_channel_sends(self, channel: str, agent: str,
                                limit: int = 20) -> list[ChannelSend]:
        """Unsent messages whose retry time has come, oldest first, each claimed for a minute
        (two senders never take the same one); ``finish_channel_send`` or
        ``retry_channel_send`` settles each."""

    @abc.abstractmethod
    async def finish_channel_send(self, channel: str, agent: str, key: str,
                                  error: str | None = None) -> None:
        """Settle a message: sent (the platform accepted it), or, with ``error``, given up
        for good (the platform refused it permanently: a user who blocked the bot). Either
        way it is never sent again."""

    @abc.abstractmethod
    async def retry_channel_send(self, channel: str, agent: str, key: str, delay_s: float,
                                 error: str) -> None:
        """Keep a message for another try after ``delay_s`` seconds, recording ``error`` and
        counting the attempt (``ChannelSend.attempts``); a settled message stays settled."""

    async def release_channel_sends(self, channel: str, agent: str, keys: list[str],
                                    delay_s: float) -> None:
        """Give back claimed messages that were not tried (the platform asked the sender to
        slow down before their turn): each is due again after ``delay_s`` seconds, its
        attempts and error unchanged; a settled message stays settled.

        Added in plugin API 1.0 with a default for drivers written before it, which counts an
        attempt for each (``retry_channel_send``); a driver should override it."""
        for key in keys:
            await self.retry_channel_send(channel, agent, key, delay_s,
                                          "not tried: the platform asked to slow down")
