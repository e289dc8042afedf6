"""Channels: long-lived connections between people and agents (terminals, chat apps, HTTP)."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from toren.core.approvals import ApprovalRecord
    from toren.seams.store.channels import ChannelChats, ChannelInbox, ChannelOutbox

#: Distributions that provide the channels Toren documents, for the error naming what to install
#: when an agent lists a channel that no installed plugin registered.
KNOWN_CHANNEL_PLUGINS = {"telegram": "toren-telegram", "whatsapp": "toren-whatsapp",
                         "slack": "toren-slack"}


def plugin_for_channel(name: str) -> str:
    """The distribution to install for channel ``name`` (``toren-<name>`` for unknown ones)."""
    return KNOWN_CHANNEL_PLUGINS.get(name, f"toren-{name}")


class ChannelContext(Protocol):
    """What a channel may do with the Toren process that started it (plugin API v1).

    Handed to ``Channel.start``, ``Channel.routes`` and ``Channel.notify_elsewhere`` instead
    of the whole runtime: a channel starts and continues sessions, reads them, decides the
    approvals its people are offered, and keeps its own state (intake, outbox, chats, its
    poller lease) durably through the three channel stores. Nothing else of the kernel is
    reachable from here, so a channel written against this keeps working across minor
    releases (docs/reference/versioning.md).
    """

    @property
    def inbox(self) -> ChannelInbox:
        """Updates recorded before they are acknowledged, and the poller lease."""

    @property
    def chats(self) -> ChannelChats:
        """Which session a chat is bound to, people's pairing status, the button key."""

    @property
    def outbox(self) -> ChannelOutbox:
        """Messages to send, keyed so that each is sent once."""

    @property
    def lease_ttl_s(self) -> float:
        """How long a poller lease lives unless renewed (``TOREN_LEASE_TTL``)."""

    @property
    def poll_interval_s(self) -> float:
        """How often the deployment polls its own tables (``TOREN_POLL_INTERVAL``)."""

    @property
    def home(self) -> Path:
        """The deployment's ``TOREN_HOME``, for files a channel keeps on this machine."""

    @property
    def skip_preflight(self) -> bool:
        """Whether start-up skips the platforms' credential checks (``TOREN_SKIP_PREFLIGHT``)."""

    def channel_agents(self, channel: str) -> dict[str, dict[str, Any]]:
        """The served agents that list ``channel`` under ``channels:``, with their settings."""

    async def start_session(self, agent: str, *, idempotency_key: str | None = None,
                            subject: str | None = None) -> str:
        """Open a session with ``agent``; the same id again for an ``idempotency_key`` used
        before. ``subject`` names the person (``<channel>:<chat id>``): the agent's ``user``
        memories are theirs (docs/guides/memory.md; API 1.7). ``toren.Runtime.start_session``."""

    @property
    def max_file_bytes(self) -> int:
        """The largest file ``add_file`` takes (``TOREN_MAX_FILE_BYTES``): a channel need not
        download a file the platform says is larger."""

    async def send_message(self, session_id: str, text: str, *,
                           idempotency_key: str | None = None,
                           files: Sequence[str] | None = None) -> int:
        """The person's next message; the turn it started. ``files`` are ids ``add_file``
        returned: listed in the message, and the images and PDFs the agent's model can see
        attached to it (``text`` may then be empty). ``SessionBusy``, ``SessionEnded``,
        ``SessionNotFound`` as ``toren.Runtime.send_message``."""

    async def add_file(self, *, name: str, content_type: str, data: bytes,
                       uploaded_by: str) -> str:
        """Store a file a person sent (a photo, a PDF) as ``POST /files`` stores an upload;
        its id, for ``send_message(files=...)``.

        ``content_type`` is what the platform says the file is: it names a file without an
        extension (``photo`` -> ``photo.jpg``), and a file said to be an image or a PDF whose
        content is neither is refused. The type stored is the one sniffed from the content.
        Raises ``FileTooLarge`` past ``max_file_bytes``, ``BadFile`` for an empty file or one
        that is not what its name or type says, ``StorageQuotaExceeded`` past the deployment's
        ``TOREN_MAX_TOTAL_FILE_BYTES`` (nothing is stored then). ``uploaded_by`` is recorded
        with the file (``<channel>:<user id>``)."""

    async def get_session(self, session_id: str) -> dict[str, Any]:
        """The session's status, transcript and pending approvals
        (``toren.Runtime.get_session``); ``SessionNotFound``."""

    async def session_status(self, session_id: str, agent: str) -> str | None:
        """The session's run status as its row has it (``running``, ``awaiting_input``, ...),
        ``None`` if there is none: cheap enough to ask at every tick."""

    async def get_approval(self, approval_id: str) -> ApprovalRecord:
        """One approval; ``ApprovalNotFound``."""

    async def decide_approval(self, approval_id: str, outcome: str, *, decided_by: str,
                              digest: str | None = None,
                              scope: str = "call") -> ApprovalRecord:
        """Approve or deny (``outcome``) as ``decided_by`` (``<channel>:<user id>``), on the
        arguments of ``digest`` (the approval's ``digest`` the chat showed; another is
        ``ApprovalStale``); ``scope="run"`` approves always. ``ApprovalNotFound``,
        ``ApprovalAlreadyDecided``, ``NotAnApprover``."""


class Channel(abc.ABC):
    """A channel registered through the ``register_channels`` hook.

    ``toren dev`` calls ``start`` once after the runtime is up and ``stop`` once on shutdown,
    but only for a channel that at least one served agent lists under ``channels:`` in its
    agent.yaml; the channel serves exactly those agents (``context.channel_agents(name)``
    gives each one's settings). ``start`` must return promptly: run long-lived loops as
    background tasks. Chat apps build on ``toren.plugin.ChatChannel``, which adds the
    shared machinery (elected poller, exactly-once delivery, allow-list and pairing).
    """

    #: The name agents use in ``channels:`` and ``toren plugins`` shows.
    name: str
    #: One line shown by ``toren plugins``.
    description: str = ""
    #: Environment variables the channel needs (checked at startup when an agent enables it).
    required_env: tuple[str, ...] = ()

    #: JSON Schema of the settings an agent gives this channel under ``channels: {name: ...}``
    #: in agent.yaml. The agent loader validates every agent's settings against it (errors
    #: name the file, the line and the field), then calls ``check_settings``.
    settings_schema: Mapping[str, Any] = {"type": "object", "additionalProperties": False}

    def check_settings(self, agent: str, settings: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Checks beyond the schema, called by the agent loader once per agent listing this
        channel, with settings that already passed ``settings_schema``.

        Returns problems as ``(field, message)`` pairs (``field`` a dotted path inside the
        channel's settings, ``""`` for the whole); the loader raises the first as an error at
        its line. The default finds none.
        """
        return []

    def required_env_for(self, settings: Mapping[str, Any]) -> list[str]:
        """Environment variables one agent's settings need (such as the variable its
        ``bot_token_env`` names), checked at startup with the channel's ``required_env``.
        The default is none."""
        return []

    def routes(self, app: Any, context: ChannelContext) -> None:
        """Add HTTP routes (webhooks) to the Toren server's aiohttp ``app``.

        Called by ``toren.server.app.create_app`` once for every channel a served agent
        lists, before the server starts listening, so platforms that push updates (WhatsApp's
        Cloud API, Telegram in webhook mode) reach the channel. Routes live under
        ``/channels/<name>/`` and are exempt from the API's bearer keys: each must
        authenticate its caller itself (a signature, a secret token). The default adds none.
        """
        return None

    @abc.abstractmethod
    async def start(self, context: ChannelContext) -> None:
        """Begin serving; ``context`` is what the channel may do with this process
        (``ChannelContext``)."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop serving and release every resource ``start`` took."""

    async def notify(self, session_id: str, agent: str, text: str) -> None:
        """Push ``text`` to the person on the other end of session ``session_id``, if this
        channel owns that session; otherwise do nothing (the default).

        Called by the worker in the same process (``toren dev``) right after it committed a
        notice to the session's transcript, such as a background run's result
        (docs/guides/background-runs.md). The transcript is the record: a channel that misses a
        notice (this process crashed first) finds it there.
        """
        return None

    async def notify_elsewhere(self, context: ChannelContext, session_id: str, agent: str,
                               text: str) -> None:
        """Hand ``text`` to the process that runs this channel, for session ``session_id`` of
        ``agent`` (an agent that lists this channel), from a process that did not start it.

        Called by a worker that runs beside the server instead of in it (``toren worker``
        beside ``toren serve``: Compose, AWS) right after it committed such a notice; ``context``
        is that worker's ``ChannelContext``. A channel whose sends are durable queues it where
        the process holding the channel sends it (``ChatChannel`` does); the default does
        nothing, and the notice stays in the transcript.
        """
        return None
