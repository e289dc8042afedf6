"""``ChatChannel``: what every chat app shares, so a platform plugin only speaks its wire format.

Per agent listing the channel, one process holds a lease (``ChannelInbox``) and is the only
one that polls the platform, starts turns and sends. Updates are recorded in the database
before they are acknowledged (polling) or answered 200 (webhooks), under the platform's
unique id, so a duplicate never starts a second turn and a crash loses nothing. Replies go
through a keyed outbox (``reply:<session>:<turn>:<part>``): a turn resumed after a crash, or
a new lease holder, never sends one twice. Files a person sends (a photo, a PDF:
``payload["files"]``) are downloaded and stored before the turn starts, and attached to its
message; the message's idempotency key makes a retry after a crash start the turn once.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import secrets
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toren.core import events as ev
from toren.core.attachments import SHOWABLE_TYPES
from toren.core.chat_text import split_text, storable_text
from toren.core.questions import question_text
from toren.errors import (
    ApprovalAlreadyDecided,
    ApprovalNotFound,
    ChannelError,
    NotAnApprover,
    SessionBusy,
    SessionEnded,
    SessionNotFound,
    TorenError,
)
from toren.files import BadFile, FileTooLarge, StorageQuotaExceeded
from toren.host.chat.access import (
    BUSY_TEXT,
    REFUSAL_TEXT,
    allow_listed,
    new_pairing_code,
    pairing_text,
)
from toren.host.chat.buttons import (
    KEY_BYTES,
    NOT_VALID_TEXT,
    button_data,
    parse_button,
    press_signed,
)
from toren.host.chat.context import name_with_extension
from toren.seams.channels import Channel, ChannelContext
from toren.seams.store.channels import (
    ChannelChats,
    ChannelInbox,
    ChannelOutbox,
    ChannelPairing,
    ChannelSend,
    ChannelUpdate,
)

log = logging.getLogger(__name__)

#: Settings every chat channel takes (a platform adds its own to ``settings_schema``).
COMMON_SETTINGS: dict[str, Any] = {
    "allow_from": {
        "description": "Platform user ids allowed to talk to the agent.",
        "type": "array", "items": {"type": ["string", "integer"]}, "maxItems": 10_000},
    "allow_from_env": {
        "description": "A variable holding more allowed user ids, comma-separated.",
        "type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
    "pairing": {
        "description": "Unknown people get a one-time code an operator approves with "
                       "`toren channels pair approve CODE` (default true); false: they get "
                       "one polite refusal.",
        "type": "boolean"},
    "when_busy": {
        "description": "A message while the agent is mid-turn: queue (the next turn, the "
                       "default) or reply (answered 'still working', not kept).",
        "enum": ["queue", "reply"]},
}

#: Seconds between typing indicators while a turn runs (platforms show one for ~5 s).
TYPING_EVERY_S = 4.0
#: Longest pause between retries of a send the platform refused for now (429, 5xx).
MAX_BACKOFF_S = 300.0
#: Crash point (``TOREN_CRASH_AT``) between storing a message's files and starting its turn.
FILES_STORED_CRASH_POINT = "after_channel_files_stored"
#: What a person is told when they send a file of a type that is not passed on.
FILE_TYPES_TEXT = "I can take photos, images (PNG, JPEG, GIF, WebP) and PDFs"


@dataclass
class ChatBot:
    """One agent's connection to the platform: its settings and what the platform needs
    (a token, a phone number id), made by ``ChatChannel.open_bot``."""

    agent: str
    settings: dict[str, Any]
    #: Whatever the platform plugin keeps per agent (an HTTP session, a token, an offset).
    state: dict[str, Any] = field(default_factory=dict)
    #: Whether this process holds the agent's poller lease now.
    leading: bool = False
    typing_at: dict[str, float] = field(default_factory=dict)


class ChatChannel(Channel):
    """The base of chat-app channels (Telegram, WhatsApp, a third party's).

    A subclass sets ``name``, ``max_message_chars`` and ``settings_schema`` (start from
    ``COMMON_SETTINGS``) and implements ``open_bot``, ``close_bot``, ``send_text`` and
    ``send_typing``; a polling platform sets ``polls`` and implements ``fetch_updates``; a
    webhook platform adds routes (``Channel.routes``) that call ``receive``. A platform whose
    people send photos and PDFs lists them in ``payload["files"]`` of a ``message`` update
    and implements ``download_file``. Platform errors are raised as ``ChannelError``
    (``retryable`` for 429 and 5xx, with ``retry_after_s``).
    """

    #: The platform's longest message; replies are split below it.
    max_message_chars: int = 4096
    #: Whether the process holding the lease long-polls the platform (``fetch_updates``).
    polls: bool = False
    #: Whether ``send_text`` renders ``payload["buttons"]`` as buttons (approvals use them).
    supports_buttons: bool = False
    #: Whether ``answer_button`` shows its note on the pressed button (Telegram's
    #: answerCallbackQuery), so a stranger's press is answered too; otherwise the note is a
    #: message in the chat, for allowed people only (a stranger's one refusal is a message's).
    notes_buttons_in_place: bool = False
    #: Times a file's download is tried (with backoff) when the platform fails for now (5xx,
    #: the network) before the person is told it could not be downloaded.
    download_attempts: int = 4

    def __init__(self) -> None:
        self.context: ChannelContext | None = None
        self.bots: dict[str, ChatBot] = {}
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._tasks: list[asyncio.Task[None]] = []
        self._wake: dict[str, asyncio.Event] = {}
        self._stopping = asyncio.Event()
        self._button_key_bytes: bytes | None = None
        # (agent, update id) -> the update's files taken so far (index -> stored id, or the
        # reason it was refused), kept until its turn starts: a turn that waits (the session
        # busy elsewhere) does not download and store them again at every tick
        self._files_taken: dict[tuple[str, str], dict[int, _TakenFile]] = {}
        # (agent, update id) -> (downloads failed for now, when to try again)
        self._download_retry: dict[tuple[str, str], tuple[int, float]] = {}

    # -- what a platform implements --------------------------------------------------------

    @abc.abstractmethod
    async def open_bot(self, bot: ChatBot) -> None:
        """Prepare ``bot.state`` (an HTTP session, credentials from the environment)."""

    @abc.abstractmethod
    async def close_bot(self, bot: ChatBot) -> None:
        """Release what ``open_bot`` took."""

    @abc.abstractmethod
    async def send_text(self, bot: ChatBot, chat_id: str, text: str,
                        payload: Mapping[str, Any]) -> None:
        """Send one message of at most ``max_message_chars`` (markdown, which the platform
        converts to what it renders); ``payload["buttons"]`` rows of ``{"text", "data"}``."""

    async def preflight(self, bot: ChatBot) -> None:
        """One cheap authenticated call (Telegram's getMe), made at start unless
        ``TOREN_SKIP_PREFLIGHT=1``: a permanent ``ChannelError`` (a revoked token) stops
        startup; a retryable one is only logged. The default makes none."""
        return None

    def polls_for(self, bot: ChatBot) -> bool:
        """Whether this agent's updates are long-polled (default: ``polls``); a platform with
        an optional webhook mode answers per agent."""
        return self.polls

    async def send_typing(self, bot: ChatBot, chat_id: str) -> None:
        """Show that the agent is working (best effort; the default does nothing)."""
        return None

    async def fetch_updates(self, bot: ChatBot) -> list[ChannelUpdate]:
        """Long-poll the platform for updates not yet acknowledged (``polls`` platforms).

        The base records each, then calls ``acknowledge``: nothing is acknowledged before it
        is in the database."""
        return []

    async def acknowledge(self, bot: ChatBot, updates: list[ChannelUpdate]) -> None:
        """Tell the platform the updates of the last ``fetch_updates`` are taken (``updates``,
        the ones it returned, are recorded by now; it is called after every fetch)."""
        return None

    async def download_file(self, bot: ChatBot, ref: str, *, max_bytes: int) -> bytes:
        """The bytes of a file a person sent, by the platform's reference (``ref`` of an item
        of ``payload["files"]``, as the platform's parser recorded it).

        Reading may stop once more than ``max_bytes`` arrived: what is returned past it is
        refused as too large, whatever its length. Raise ``ChannelError``: ``retryable`` (5xx,
        the network) for a download tried again later; with ``status=413`` for a file the
        platform will not hand over for its size (its message, a sentence for the person,
        says so); any other, and the person is told it could not be downloaded. The default
        takes no files."""
        raise ChannelError(f"the {self.name} channel does not take files")

    async def answer_button(self, bot: ChatBot, update: ChannelUpdate, text: str) -> None:
        """Acknowledge a button press with a short note. The default sends the note to the
        chat as a message (once per press); Telegram shows it on the button instead
        (answerCallbackQuery)."""
        await self._outbox.enqueue_channel_sends(self.name, bot.agent, [ChannelSend(
            key=f"button:{update.update_id}", chat_id=update.chat_id, text=text)])

    # -- Channel -----------------------------------------------------------------------------

    def check_settings(self, agent: str, settings: Mapping[str, Any]) -> list[tuple[str, str]]:
        if not settings.get("allow_from") and not settings.get("allow_from_env") \
                and settings.get("pairing") is False:
            return [("pairing", "pairing is off and allow_from/allow_from_env are empty, so "
                                "nobody could talk to the agent; list user ids in allow_from "
                                "or turn pairing on")]
        return []

    @property
    def _context(self) -> ChannelContext:
        if self.context is None:
            raise ChannelError(f"the {self.name} channel is not started (Channel.start)")
        return self.context

    @property
    def _inbox(self) -> ChannelInbox:
        return self._context.inbox

    @property
    def _chats(self) -> ChannelChats:
        return self._context.chats

    @property
    def _outbox(self) -> ChannelOutbox:
        return self._context.outbox

    async def start(self, context: ChannelContext) -> None:
        self.context = context
        self._stopping.clear()
        for agent, settings in context.channel_agents(self.name).items():
            bot = ChatBot(agent=agent, settings=settings)
            await self.open_bot(bot)
            self.bots[agent] = bot
            if not context.skip_preflight:
                await self._preflight(bot)
            self._wake[agent] = asyncio.Event()
            self._tasks.append(asyncio.create_task(self._lease_loop(bot),
                                                   name=f"{self.name}-lease-{agent}"))
            self._tasks.append(asyncio.create_task(self._work_loop(bot),
                                                   name=f"{self.name}-work-{agent}"))
            if self.polls_for(bot):
                self._tasks.append(asyncio.create_task(self._poll_loop(bot),
                                                       name=f"{self.name}-poll-{agent}"))

    async def _preflight(self, bot: ChatBot) -> None:
        try:
            await self.preflight(bot)
        except ChannelError as exc:
            if exc.retryable:
                log.warning("%s: preflight of %s failed for now: %s", self.name, bot.agent,
                            exc.message)
                return
            await self.stop()
            raise ChannelError(f"the {self.name} channel of agent {bot.agent} cannot start: "
                               f"{exc.message}. Check its credentials, or set "
                               "TOREN_SKIP_PREFLIGHT=1 to start anyway") from exc

    async def stop(self) -> None:
        self._stopping.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for bot in self.bots.values():
            if bot.leading:
                try:
                    await self._inbox.release_channel_lease(self.name, bot.agent,
                                                                    self.holder)
                except TorenError as exc:
                    log.warning("could not release the %s lease of %s: %s", self.name,
                                bot.agent, exc.message)
            await self.close_bot(bot)
        self.bots.clear()

    async def notify(self, session_id: str, agent: str, text: str) -> None:
        """Queue ``text`` (a background run's result) for the chat that owns the session."""
        if agent not in self.bots:
            return
        if await self._queue_notice(self._context, session_id, agent, text):
            self._wake[agent].set()

    async def notify_elsewhere(self, context: ChannelContext, session_id: str, agent: str,
                               text: str) -> None:
        """Queue ``text`` from a worker beside the server: the sends are durable rows, which
        the process holding this agent's lease sends on its next tick (at most half a
        second)."""
        await self._queue_notice(context, session_id, agent, text)

    async def _queue_notice(self, context: ChannelContext, session_id: str, agent: str,
                            text: str) -> bool:
        """Queue the notice's parts for the chat that owns the session, once per text (a
        redelivered notice is the same sends); whether the session has a chat here."""
        found = await context.chats.session_chat(self.name, session_id)
        if found is None:
            return False
        _agent, chat_id = found
        sends = _parts(f"notice:{session_id}:{_digest(text)}", chat_id, text,
                       self.max_message_chars)
        await context.outbox.enqueue_channel_sends(self.name, agent, sends)
        return True

    # -- intake --------------------------------------------------------------------------

    async def receive(self, update: ChannelUpdate) -> bool:
        """Record an update (a webhook calls this before answering the platform); ``False``
        for one recorded before. Wakes the lease holder if it is this process."""
        new = bool(await self._inbox.record_channel_update(_storable(update)))
        wake = self._wake.get(update.agent)
        if wake is not None:
            wake.set()
        return new

    # -- loops ---------------------------------------------------------------------------

    @property
    def _ttl_s(self) -> float:
        return self._context.lease_ttl_s

    async def _lease_loop(self, bot: ChatBot) -> None:
        """Take and renew the lease (every third of its life); one holder per deployment."""
        while not self._stopping.is_set():
            try:
                held = await self._inbox.claim_channel_lease(self.name, bot.agent,
                                                                     self.holder, self._ttl_s)
            except TorenError as exc:
                log.warning("%s lease of %s: %s", self.name, bot.agent, exc.message)
                held = False
            if held != bot.leading:
                log.info("%s: this process %s the poller of %s", self.name,
                         "is now" if held else "is no longer", bot.agent)
                bot.leading = held
                if held:
                    self._wake[bot.agent].set()
            await asyncio.sleep(self._ttl_s / 3)

    async def _poll_loop(self, bot: ChatBot) -> None:
        failures = 0
        while not self._stopping.is_set():
            if not bot.leading:
                await asyncio.sleep(min(1.0, self._ttl_s / 3))
                continue
            try:
                updates = await self.fetch_updates(bot)
                for update in updates:
                    await self._inbox.record_channel_update(_storable(update))
                # only now, with every update committed, may the platform forget them
                await self.acknowledge(bot, updates)
                if updates:
                    self._wake[bot.agent].set()
                failures = 0
            except (TorenError, OSError) as exc:
                failures += 1
                delay = _backoff(failures, getattr(exc, "retry_after_s", None))
                log.warning("%s: polling for %s failed (%s); retrying in %.1fs", self.name,
                            bot.agent, getattr(exc, "message", exc), delay)
                await asyncio.sleep(delay)

    async def _work_loop(self, bot: ChatBot) -> None:
        wake = self._wake[bot.agent]
        tick = min(0.5, self._context.poll_interval_s)
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=tick)
            wake.clear()
            if not bot.leading:
                continue
            try:
                await self._dispatch(bot)
                await self._collect(bot)
                await self._send_due(bot)
            except TorenError as exc:
                log.warning("%s: handling %s failed: %s", self.name, bot.agent, exc.message)
            except Exception:
                log.exception("%s: handling %s failed", self.name, bot.agent)

    # -- pending updates -> turns --------------------------------------------------------

    async def _dispatch(self, bot: ChatBot) -> None:
        busy_chats = {update.chat_id for update in
                      await self._inbox.delivered_channel_updates(self.name, bot.agent)}
        for update in await self._inbox.pending_channel_updates(self.name, bot.agent):
            if update.kind == "button":
                await self._press(bot, update)
                continue
            if not await self._allowed(bot, update):
                continue
            if update.chat_id in busy_chats:
                if bot.settings.get("when_busy") == "reply":
                    await self._inbox.answer_channel_update(
                        self.name, bot.agent, update.update_id, "busy",
                        [ChannelSend(key=f"busy:{update.update_id}", chat_id=update.chat_id,
                                     text=BUSY_TEXT)])
                continue  # queued: it becomes the chat's next turn
            await self._start_turn(bot, update)
            # started, or the session is busy elsewhere: the chat's later messages wait
            busy_chats.add(update.chat_id)

    async def _allowed(self, bot: ChatBot, update: ChannelUpdate) -> bool:
        """Whether the sender may reach the model; if not, the update is refused, with one
        pairing code or one polite refusal per person (outbox keys make them once-only)."""
        if allow_listed(bot.settings, update.user_id):
            return True
        status = await self._chats.channel_user_status(self.name, bot.agent, update.user_id)
        if status == "approved":
            return True
        sends: list[ChannelSend] = []
        if bot.settings.get("pairing", True) and status is None:
            pairing = await self._chats.request_pairing(ChannelPairing(
                channel=self.name, agent=bot.agent, user_id=update.user_id,
                chat_id=update.chat_id, code=new_pairing_code(), status="pending",
                display_name=str(update.payload.get("name", ""))[:200]))
            sends.append(ChannelSend(key=f"pairing:{update.user_id}", chat_id=update.chat_id,
                                     text=pairing_text(pairing.code)))
        elif not bot.settings.get("pairing", True) or status == "denied":
            sends.append(ChannelSend(key=f"refusal:{update.user_id}", chat_id=update.chat_id,
                                     text=REFUSAL_TEXT))
        await self._inbox.answer_channel_update(self.name, bot.agent, update.update_id, "refused",
                                          sends)
        log.info("%s: refused a message from %s to %s (not allowed)", self.name,
                 update.user_id, bot.agent)
        return False

    async def _start_turn(self, bot: ChatBot, update: ChannelUpdate) -> bool:
        context = self._context
        text, file_ids = update.text, []
        if update.payload.get("files"):
            files = await self._take_files(bot, update)
            if files is None:
                return False  # a download failed for now: tried again on a later tick
            file_ids = [taken.file_id for taken in files if taken.file_id]
            refused = [taken for taken in files if taken.refusal]
            if refused:
                note = ChannelSend(key=f"files:{update.update_id}", chat_id=update.chat_id,
                                   text="\n".join(f"Sorry, I could not take {taken.name}: "
                                                  f"{taken.refusal}" for taken in refused))
                if not file_ids and not text.strip():
                    # nothing left for the agent: the note is the whole answer
                    await self._inbox.answer_channel_update(
                        self.name, bot.agent, update.update_id, "handled", [note])
                    self._forget_files(bot, update)
                    return False
                await self._outbox.enqueue_channel_sends(self.name, bot.agent, [note])
                # the agent hears of them too, or it would answer as if it had seen them
                text = "\n\n".join(part for part in [text] + [
                    f"({taken.name} was sent too but could not be taken: {taken.refusal})"
                    for taken in refused] if part)
            if file_ids:
                self._crash_point(FILES_STORED_CRASH_POINT)
        for _attempt in range(2):
            session_id = await self._chats.chat_session(self.name, bot.agent, update.chat_id)
            if session_id is None:
                session_id = await context.start_session(
                    bot.agent, idempotency_key=f"{self.name}:{update.chat_id}:{update.update_id}",
                    subject=f"{self.name}:{update.chat_id}")
                await self._chats.bind_chat_session(self.name, bot.agent, update.chat_id,
                                                    session_id)
            try:
                # the key makes a retry (after a crash, even with the files stored again)
                # return the turn the first attempt started
                turn = await context.send_message(session_id, text,
                                                  idempotency_key=f"{self.name}:"
                                                                  f"{update.update_id}",
                                                  files=file_ids or None)
            except (SessionEnded, SessionNotFound):
                # the chat's session ended (closed, failed, cancelled): the chat gets a new one
                fresh = await context.start_session(
                    bot.agent, idempotency_key=f"{self.name}:{update.chat_id}:{update.update_id}",
                    subject=f"{self.name}:{update.chat_id}")
                await self._chats.bind_chat_session(self.name, bot.agent, update.chat_id, fresh)
                continue
            except SessionBusy:
                return False  # another surface took the turn; try again on the next tick
            except TorenError as exc:
                if exc.retryable:
                    raise
                # a message the session cannot take (unstorable text, too long): say so once
                # and move on, or it would block the chat's every later message
                await self._inbox.answer_channel_update(
                    self.name, bot.agent, update.update_id, "handled",
                    [ChannelSend(key=f"unusable:{update.update_id}", chat_id=update.chat_id,
                                 text=f"Sorry, I could not take that message: "
                                      f"{exc.message[:300]}")])
                self._forget_files(bot, update)
                return False
            await self._inbox.set_channel_update(self.name, bot.agent, update.update_id,
                                                 "delivered", session_id=session_id, turn=turn)
            self._forget_files(bot, update)
            await self._typing(bot, update.chat_id, force=True)
            return True
        return False

    async def _take_files(self, bot: ChatBot, update: ChannelUpdate) -> list[_TakenFile] | None:
        """Download and store each file of ``update`` (once per update in this process); what
        became of each: its stored id, or why it was refused (a type not taken, too large,
        refused by the upload checks or the storage quota, a download that failed). ``None``
        while a download failed for now and is to be tried again (after a backoff)."""
        key = (bot.agent, update.update_id)
        failures, due = self._download_retry.get(key, (0, 0.0))
        if time.monotonic() < due:
            return None
        taken = self._files_taken.setdefault(key, {})
        refs = _file_refs(update.payload)
        limit = self._context.max_file_bytes
        for index, ref in enumerate(refs):
            if index in taken:
                continue
            name, content_type, size = ref["name"], ref["content_type"], ref["size"]
            if content_type not in SHOWABLE_TYPES:
                taken[index] = _TakenFile(name, refusal=f"{FILE_TYPES_TEXT}, and this is "
                                                        f"{content_type or 'of no known type'}.")
                continue
            if size is not None and size > limit:
                taken[index] = _TakenFile(name, refusal=_too_large(size, limit))
                continue
            try:
                data = await self.download_file(bot, ref["ref"], max_bytes=limit)
            except ChannelError as exc:
                if exc.status == 413:  # the platform will not hand over a file that large
                    taken[index] = _TakenFile(name, refusal=_sentence(exc.message))
                    continue
                retry = self._download_failed(bot, update, name, failures, exc.message,
                                              exc.retryable, exc.retry_after_s)
                if retry:
                    return None
                taken[index] = _TakenFile(name, refusal="it could not be downloaded. Please "
                                                        "send it again.")
                continue
            except OSError as exc:
                if self._download_failed(bot, update, name, failures,
                                         f"{type(exc).__name__} (network)", True, None):
                    return None
                taken[index] = _TakenFile(name, refusal="it could not be downloaded. Please "
                                                        "send it again.")
                continue
            if len(data) > limit:
                taken[index] = _TakenFile(name, refusal=_too_large(None, limit))
                continue
            try:
                file_id = await self._context.add_file(
                    name=name, content_type=content_type, data=data,
                    uploaded_by=f"{self.name}:{update.user_id}")
            except FileTooLarge:
                taken[index] = _TakenFile(name, refusal=_too_large(len(data), limit))
            except BadFile as exc:
                # "<name>: the name says PDF but ...": the person's reply names it already
                reason = exc.message.split(": ", 1)[1] if ": " in exc.message else exc.message
                taken[index] = _TakenFile(name, refusal=_sentence(reason))
            except StorageQuotaExceeded:
                log.error("%s: a file from %s to %s was refused: the storage quota "
                          "(TOREN_MAX_TOTAL_FILE_BYTES) is used up", self.name,
                          update.user_id, bot.agent)
                taken[index] = _TakenFile(name, refusal="there is no room left for files "
                                                        "here. The operator has been told.")
            else:
                taken[index] = _TakenFile(name, file_id=file_id)
        self._download_retry.pop(key, None)
        return [taken[index] for index in range(len(refs))]

    def _download_failed(self, bot: ChatBot, update: ChannelUpdate, name: str,
                         failures: int, reason: str, retryable: bool,
                         retry_after_s: float | None) -> bool:
        """Whether a failed download is tried again (after a backoff, at most
        ``download_attempts`` times in all); otherwise the person is told."""
        if retryable and failures + 1 < self.download_attempts:
            delay = _backoff(failures + 1, retry_after_s)
            self._download_retry[(bot.agent, update.update_id)] = (
                failures + 1, time.monotonic() + delay)
            log.warning("%s: downloading %s of update %s for %s failed (%s); retrying in "
                        "%.1fs", self.name, name, update.update_id, bot.agent, reason, delay)
            return True
        log.warning("%s: giving up downloading %s of update %s for %s: %s", self.name, name,
                    update.update_id, bot.agent, reason)
        return False

    def _forget_files(self, bot: ChatBot, update: ChannelUpdate) -> None:
        self._files_taken.pop((bot.agent, update.update_id), None)
        self._download_retry.pop((bot.agent, update.update_id), None)

    def _crash_point(self, name: str) -> None:
        """A crash point of the runtime's context (SIGKILL tests); none in another one."""
        crash_point = getattr(self._context, "crash_point", None)
        if crash_point is not None:
            crash_point(name)

    async def _press(self, bot: ChatBot, update: ChannelUpdate) -> None:
        """A button: its data (``toren.host.chat.buttons``) decides an approval only if it was
        signed for this chat and the session it serves, and the presser may decide it."""
        allowed = await self._allowed_silently(bot, update.user_id)
        note = await self._decide_pressed(bot, update) if allowed else "Not allowed."
        # the note before the update is settled: a crash between the two answers the press
        # again (a platform's own acknowledgement fails harmlessly; a message is keyed)
        if allowed or self.notes_buttons_in_place:
            try:
                await self.answer_button(bot, update, note)
            except ChannelError as exc:
                log.info("%s: answering a button failed: %s", self.name, exc.message)
        await self._inbox.set_channel_update(self.name, bot.agent, update.update_id,
                                                    "handled")

    async def _decide_pressed(self, bot: ChatBot, update: ChannelUpdate) -> str:
        """Decide what a button press of an allowed person asks for; the note they read."""
        press = parse_button(update.text)
        record, session_id = None, None
        if press is not None:
            with contextlib.suppress(ApprovalNotFound):
                record = await self._context.get_approval(press.approval_id)
            session_id = await self._chats.chat_session(self.name, bot.agent,
                                                               update.chat_id)
        if (press is None or record is None or record.agent != bot.agent
                or record.run_id != session_id
                or not press_signed(await self._button_key(), press, channel=self.name,
                                    agent=bot.agent, chat_id=update.chat_id,
                                    session_id=record.run_id, digest=record.digest)):
            # made-up data, a button of another chat or session, another agent's approval:
            # which of them is not said (it would tell a prober which approval ids exist)
            log.warning("%s: refused a button press by %s in chat %s of %s: its data %r was "
                        "not signed for this chat's session", self.name, update.user_id,
                        update.chat_id, bot.agent, update.text[:80])
            return NOT_VALID_TEXT
        always = press.outcome == "always"
        try:
            # the MAC covered the digest the button was shown with: the decision names it
            await self._context.decide_approval(
                record.id, "approved" if always else press.outcome,
                decided_by=f"{self.name}:{update.user_id}", digest=record.digest,
                scope="run" if always else "call")
        except (ApprovalNotFound, ApprovalAlreadyDecided, NotAnApprover) as exc:
            return exc.message[:190]
        if always:
            return "Approved, and approved always for the same call in this chat's session."
        return "Approved." if press.outcome == "approved" else "Denied."

    async def _button_key(self) -> bytes:
        """The deployment's button key (``ChannelChats.chat_button_key``), read once."""
        if self._button_key_bytes is None:
            self._button_key_bytes = await self._chats.chat_button_key(
                secrets.token_bytes(KEY_BYTES))
        return self._button_key_bytes

    async def _allowed_silently(self, bot: ChatBot, user_id: str) -> bool:
        if allow_listed(bot.settings, user_id):
            return True
        status = await self._chats.channel_user_status(self.name, bot.agent, user_id)
        return bool(status == "approved")

    # -- finished turns -> outbox ----------------------------------------------------------

    async def _collect(self, bot: ChatBot) -> None:
        for update in await self._inbox.delivered_channel_updates(self.name, bot.agent):
            assert update.session_id is not None and update.turn is not None
            row_status = await self._context.session_status(update.session_id, bot.agent)
            if row_status in ("queued", "running", "waiting"):
                await self._typing(bot, update.chat_id)  # the row, not the transcript
                continue
            try:
                session = await self._context.get_session(update.session_id)
            except SessionNotFound:
                await self._inbox.set_channel_update(self.name, bot.agent, update.update_id,
                                               "answered")
                continue
            status = session["status"]
            if status == "awaiting_approval":
                await self._offer_approvals(bot, update, session["pending_approvals"])
                continue
            if status == "awaiting_input" and session.get("pending_questions"):
                await self._ask(bot, update, session["pending_questions"])
                continue  # the person's next message answers it; the turn then goes on
            ended = status in ev.TERMINAL_STATUSES
            if not ended and (status != "awaiting_input"
                              or session["turns_ended"] < update.turn):
                await self._typing(bot, update.chat_id)
                continue
            text = _reply_text(session["transcript"], update.turn)
            if ended and not text:
                reason = session.get("error") or session.get("stop_reason") or status
                text = (f"This conversation has ended ({reason}). Send a message to start a "
                        "new one.")
            text = text or "(no reply)"
            sends = _parts(f"reply:{update.session_id}:{update.turn}", update.chat_id, text,
                           self.max_message_chars)
            await self._inbox.answer_channel_update(self.name, bot.agent, update.update_id,
                                              "answered", sends)

    async def _offer_approvals(self, bot: ChatBot, update: ChannelUpdate,
                               approvals: list[dict[str, Any]]) -> None:
        assert update.session_id is not None
        sends = []
        for approval in approvals:
            args = str(approval.get("arguments", ""))[:500]
            text = (f"The agent wants to run {approval['tool']} with {args}. Allow it?")
            payload: dict[str, Any] = {}
            key = f"approval:{approval['id']}"
            if self.supports_buttons:
                signed = {outcome: button_data(
                    await self._button_key(), channel=self.name, agent=bot.agent,
                    chat_id=update.chat_id, session_id=update.session_id,
                    approval_id=approval["id"], outcome=outcome, digest=approval["digest"])
                    for outcome in ("approved", "always", "denied")}
                payload = {"buttons": [[{"text": "Approve", "data": signed["approved"]},
                                        {"text": "Approve always", "data": signed["always"]},
                                        {"text": "Deny", "data": signed["denied"]}]]}
                # a key of its own: an approval offered with buttons of an earlier version
                # (unsigned, or signed without the digest) is offered once more, with buttons
                # that work
                key += ":signed:digest"
            else:
                text += (f" An operator decides with `toren approvals approve "
                         f"{approval['id']}` (or deny).")
            sends.append(ChannelSend(key=key, chat_id=update.chat_id, text=text,
                                     payload=payload))
        if sends:
            await self._outbox.enqueue_channel_sends(self.name, bot.agent, sends)

    async def _ask(self, bot: ChatBot, update: ChannelUpdate,
                   questions: list[dict[str, Any]]) -> None:
        """Send the agent's open questions (``ask_user``) to the chat, each once (its key),
        with numbered choices, as the update's answer for now: the chat is free again, so
        the person's next message goes in and answers the question (``send_message``), and
        the turn's reply comes to that message."""
        sends = [send for question in questions for send in _parts(
            f"question:{question['id']}", update.chat_id,
            question_text(question["question"], question["choices"]), self.max_message_chars)]
        await self._inbox.answer_channel_update(self.name, bot.agent, update.update_id,
                                                "answered", sends)

    async def _typing(self, bot: ChatBot, chat_id: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - bot.typing_at.get(chat_id, 0.0) < TYPING_EVERY_S:
            return
        bot.typing_at[chat_id] = now
        try:
            await self.send_typing(bot, chat_id)
        except (ChannelError, OSError) as exc:
            log.debug("%s: typing indicator failed: %s", self.name, exc)

    # -- outbox -> platform ---------------------------------------------------------------

    async def _send_due(self, bot: ChatBot) -> None:
        due = await self._outbox.due_channel_sends(self.name, bot.agent)
        for index, send in enumerate(due):
            try:
                await self.send_text(bot, send.chat_id, send.text, send.payload)
            except ChannelError as exc:
                if not exc.retryable:
                    log.error("%s: giving up on message %s to %s: %s", self.name, send.key,
                              send.chat_id, exc.message)
                    await self._outbox.finish_channel_send(self.name, bot.agent, send.key,
                                                           error=exc.message)
                    continue
                delay = _backoff(send.attempts + 1, exc.retry_after_s)
                log.warning("%s: sending %s failed (%s); retrying in %.1fs", self.name,
                            send.key, exc.message, delay)
                await self._outbox.retry_channel_send(self.name, bot.agent, send.key, delay,
                                                      exc.message)
                # the platform asked this bot to slow down: the rest of the batch is given
                # back, due after the same pause (not held for the claim's whole minute), in
                # its order, and without counting an attempt it did not make
                rest = [later.key for later in due[index + 1:]]
                if rest:
                    await self._outbox.release_channel_sends(self.name, bot.agent, rest, delay)
                break
            await self._outbox.finish_channel_send(self.name, bot.agent, send.key)


def _storable(update: ChannelUpdate) -> ChannelUpdate:
    """The update with its texts cleaned of what Postgres cannot store (``storable_text``),
    those of its payload too, however nested (a file's name)."""
    return dataclasses.replace(update, text=storable_text(update.text),
                               chat_id=storable_text(update.chat_id),
                               user_id=storable_text(update.user_id),
                               update_id=storable_text(update.update_id),
                               payload=_storable_value(update.payload))


def _storable_value(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {storable_text(str(key)): _storable_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_storable_value(item) for item in value]
    return value


@dataclass(frozen=True)
class _TakenFile:
    """One file of a message: stored (``file_id``) or refused (``refusal``, told the person)."""

    name: str
    file_id: str = ""
    refusal: str = ""


def _file_refs(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``payload["files"]`` as ``{"ref", "name", "content_type", "size"}`` items, whatever a
    platform's parser (or an old row) left out."""
    refs = []
    files = payload.get("files")
    for index, item in enumerate(files if isinstance(files, list) else []):
        if not isinstance(item, dict):
            continue
        size = item.get("size")
        content_type = str(item.get("content_type") or "").lower()
        refs.append({"ref": str(item.get("ref", "")),
                     # named as it is stored (a platform's "image" of type image/png is
                     # image.png), in the replies too
                     "name": name_with_extension(str(item.get("name") or f"file-{index + 1}")
                                                 [:255], content_type),
                     "content_type": content_type,
                     "size": size if isinstance(size, int) and not isinstance(size, bool)
                     else None})
    return refs


def _too_large(size: int | None, limit: int) -> str:
    """Why a file of ``size`` bytes (``None``: a download that went past the limit) is
    refused."""
    if size is None:
        return f"it is larger than {_megabytes(limit)}, the most a file here may be."
    return f"it is {_megabytes(size)}, and files here may be at most {_megabytes(limit)}."


def _sentence(text: str) -> str:
    text = text.strip()[:300]
    return text if text.endswith((".", "!", "?")) else text + "."


def _megabytes(size: int) -> str:
    return f"{size / 1_000_000:,.1f} MB" if size >= 100_000 else f"{size:,} bytes"


def _reply_text(transcript: list[dict[str, Any]], turn: int) -> str:
    """The agent's answer in ``turn``: its last non-empty text of that turn."""
    texts = [entry["text"] for entry in transcript
             if entry["role"] == "assistant" and entry["turn"] == turn and entry.get("text")]
    return str(texts[-1]).strip() if texts else ""


def _parts(key: str, chat_id: str, text: str, limit: int) -> list[ChannelSend]:
    return [ChannelSend(key=f"{key}:{index}", chat_id=chat_id, text=part)
            for index, part in enumerate(split_text(text, limit))]


def _digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _backoff(failures: int, retry_after_s: float | None) -> float:
    """Exponential backoff with jitter, at least what the platform asked for."""
    delay = min(MAX_BACKOFF_S, 0.5 * 2.0 ** min(failures, 12)) * random.uniform(0.5, 1.0)
    return max(delay, retry_after_s or 0.0)
