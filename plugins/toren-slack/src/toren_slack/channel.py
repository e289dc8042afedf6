"""``SlackChannel``: a DM with the app, or a thread started by mentioning it, is a durable
session; events come over the Events API (webhooks on the Toren server) or Socket Mode."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

import aiohttp
from aiohttp import web

from toren.plugin import (
    COMMON_SETTINGS,
    ChannelContext,
    ChannelError,
    ChannelUpdate,
    ChatBot,
    ChatChannel,
    WebhookBodyError,
    webhook_json,
)
from toren_slack.api import DEFAULT_API_URL, call, web_client
from toren_slack.events import (
    CHANNEL,
    bot_user_of,
    parse_event,
    parse_interaction,
    slack_id,
    split_chat,
)
from toren_slack.markup import to_mrkdwn
from toren_slack.signature import signature_valid
from toren_slack.socket_mode import SocketModeLink

log = logging.getLogger(__name__)

#: Longest message part sent: Slack truncates a message's text at 40,000 characters and
#: advises 4,000; a section block takes 3,000 (approvals use one).
MAX_MESSAGE_CHARS = 3900
MAX_SECTION_CHARS = 3000
#: Largest request body accepted on the webhook routes (an event is a few kilobytes).
MAX_WEBHOOK_BYTES = 256 * 1024
SIGNATURE_HEADER = "X-Slack-Signature"
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
#: Longest ``challenge`` echoed by the URL verification (Slack sends about 50 characters).
MAX_CHALLENGE_CHARS = 200
_CHALLENGE = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_CHALLENGE_CHARS}}}")
#: Seconds one Socket Mode fetch waits for an envelope before it returns empty-handed.
SOCKET_WAIT_S = 10.0
#: Recently started threads this process remembers (see ``_thread_is_chat``).
MAX_REMEMBERED_THREADS = 1000

_ENV_NAME = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": 200}


class SlackChannel(ChatChannel):
    """The ``slack`` channel. Events API (``mode: events``, the default): Slack calls
    ``/channels/slack/<agent>/events`` and ``/interactivity`` on the Toren server, each
    request signed with the app's signing secret. Socket Mode (``mode: socket``): the process
    holding the agent's lease opens a WebSocket with the app-level token. Either way replies
    go out through ``chat.postMessage`` from the lease holder."""

    name = CHANNEL
    description = "Slack apps: a DM or a mention's thread is a durable session"
    max_message_chars = MAX_MESSAGE_CHARS
    supports_buttons = True
    # presses are answered with an ephemeral message only the presser sees
    notes_buttons_in_place = True
    settings_schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["bot_token_env"],
        "properties": COMMON_SETTINGS | {
            "bot_token_env": {"description": "The variable holding the app's bot token "
                                             "(xoxb-..., OAuth & Permissions).",
                              **_ENV_NAME},
            "signing_secret_env": {"description": "The variable holding the app's signing "
                                                  "secret, which signs every request Slack "
                                                  "sends (events mode).",
                                   **_ENV_NAME},
            "mode": {"description": "events (the Events API calls the Toren server, the "
                                    "default) or socket (Socket Mode: no public URL needed).",
                     "enum": ["events", "socket"]},
            "app_token_env": {"description": "The variable holding the app-level token "
                                             "(xapp-..., with connections:write) that opens "
                                             "Socket Mode connections (socket mode).",
                              **_ENV_NAME},
            "api_url": {"description": "The Web API's base URL (default "
                                       "https://slack.com/api/; a proxy or a test fake).",
                        "type": "string", "pattern": "^https?://", "maxLength": 2000},
        },
    }

    def check_settings(self, agent: str, settings: Mapping[str, Any]) -> list[tuple[str, str]]:
        if settings.get("mode", "events") == "events" and not settings.get("signing_secret_env"):
            return [("signing_secret_env", "events mode needs signing_secret_env: every request "
                                           "Slack sends is checked against the app's signing "
                                           "secret (or set mode: socket and app_token_env)")]
        if settings.get("mode") == "socket" and not settings.get("app_token_env"):
            return [("app_token_env", "socket mode needs app_token_env, the variable holding "
                                      "an app-level token (xapp-...) with connections:write")]
        return super().check_settings(agent, settings)

    def required_env_for(self, settings: Mapping[str, Any]) -> list[str]:
        names = [settings["bot_token_env"]]
        if settings.get("mode") == "socket":
            names.append(settings["app_token_env"])
        else:
            names.append(settings["signing_secret_env"])
        if settings.get("allow_from_env"):
            names.append(settings["allow_from_env"])
        return names

    def polls_for(self, bot: ChatBot) -> bool:
        return bool(bot.settings.get("mode") == "socket")

    # -- per agent -------------------------------------------------------------------------

    async def open_bot(self, bot: ChatBot) -> None:
        session = aiohttp.ClientSession()
        api_url = bot.settings.get("api_url", DEFAULT_API_URL)
        bot.state["session"] = session
        bot.state["client"] = web_client(session, os.environ[bot.settings["bot_token_env"]],
                                         api_url)
        bot.state["threads"] = {}  # chat id -> when this process saw it start
        bot.state["unacked"] = []  # Socket Mode envelopes fetched and not yet acknowledged
        if bot.settings.get("mode") == "socket":
            app_client = web_client(session, os.environ[bot.settings["app_token_env"]],
                                    api_url)
            bot.state["app_client"] = app_client
            bot.state["socket"] = SocketModeLink(session, app_client)

    async def preflight(self, bot: ChatBot) -> None:
        """``auth.test`` with the bot token (and, in socket mode, ``apps.connections.open``
        with the app token): a revoked or mistyped token stops startup."""
        answer = await call(bot.state["client"], "auth.test")
        bot.state["bot_user"] = slack_id(answer.get("user_id"))
        if bot.settings.get("mode") == "socket":
            await call(bot.state["app_client"], "apps.connections.open")

    async def close_bot(self, bot: ChatBot) -> None:
        if "socket" in bot.state:
            await bot.state["socket"].close()
        await bot.state["session"].close()

    async def _bot_user(self, bot: ChatBot, body: Mapping[str, Any]) -> str | None:
        """The app's user id: from the event's ``authorizations``, else ``auth.test``'s
        (asked once, if preflight was skipped)."""
        found = bot_user_of(body)
        if found is None and bot.state.get("bot_user") is None:
            try:
                answer = await call(bot.state["client"], "auth.test")
                bot.state["bot_user"] = slack_id(answer.get("user_id"))
            except ChannelError as exc:
                log.warning("slack: auth.test for %s failed: %s", bot.agent, exc.message)
        return found or bot.state.get("bot_user")

    # -- events, from either transport -------------------------------------------------------

    async def _event_update(self, bot: ChatBot, body: Mapping[str, Any]
                            ) -> ChannelUpdate | None:
        parsed = parse_event(bot.agent, body, await self._bot_user(bot, body))
        if parsed is None:
            return None
        update = parsed.update
        if parsed.needs_known_thread and not await self._thread_is_chat(bot, update.chat_id):
            return None  # people talking in a thread the agent is not part of
        if not parsed.needs_known_thread and update.chat_id != split_chat(update.chat_id)[0]:
            threads: dict[str, float] = bot.state["threads"]
            threads[update.chat_id] = time.monotonic()
            if len(threads) > MAX_REMEMBERED_THREADS:
                del threads[min(threads, key=threads.__getitem__)]
        return update

    async def _thread_is_chat(self, bot: ChatBot, chat_id: str) -> bool:
        """Whether a thread is one of the agent's chats: bound to a session, or started by a
        mention this process took moments ago (its session may not be bound yet)."""
        if chat_id in bot.state["threads"]:
            return True
        if self.context is None:
            return False
        return await self.context.chats.chat_session(self.name, bot.agent, chat_id) is not None

    # -- Events API (webhooks) ----------------------------------------------------------------

    def routes(self, app: web.Application, context: ChannelContext) -> None:
        """``POST /channels/slack/<agent>/events`` (the Events API's request URL) and
        ``POST /channels/slack/<agent>/interactivity`` (button presses): signed requests,
        recorded before they are answered 200."""
        app.router.add_post("/channels/slack/{agent}/events", self._events)
        app.router.add_post("/channels/slack/{agent}/interactivity", self._interactivity)

    async def _signed_body(self, request: web.Request) -> tuple[ChatBot, bytes] | web.Response:
        """The agent's bot and the raw body of a request Slack signed, or the answer refusing
        it (404, 413, 401: which of the signature's checks failed is not said)."""
        bot = self.bots.get(request.match_info["agent"])
        if bot is None or bot.settings.get("mode", "events") != "events":
            return _error(404, "not_found", "no agent here takes Slack Events API requests")
        if request.content_length is not None and request.content_length > MAX_WEBHOOK_BYTES:
            return _error(413, "too_large", "a request is at most 256 KiB")
        raw = await request.content.read(MAX_WEBHOOK_BYTES + 1)
        if len(raw) > MAX_WEBHOOK_BYTES:
            return _error(413, "too_large", "a request is at most 256 KiB")
        secret = os.environ.get(bot.settings["signing_secret_env"], "")
        # over the raw bytes, before parsing: a re-serialised body would not match
        if not signature_valid(raw, request.headers.get(TIMESTAMP_HEADER),
                               request.headers.get(SIGNATURE_HEADER), secret, time.time()):
            return _error(401, "bad_signature", f"missing or wrong {SIGNATURE_HEADER}, or "
                                                f"a {TIMESTAMP_HEADER} more than 5 minutes off")
        return bot, raw

    async def _events(self, request: web.Request) -> web.Response:
        signed = await self._signed_body(request)
        if isinstance(signed, web.Response):
            return signed
        bot, raw = signed
        try:
            body = await webhook_json(raw)
        except WebhookBodyError as exc:
            return _error(400, "bad_request", str(exc))
        if not isinstance(body, dict):
            return _error(400, "bad_request", "the body is not a JSON object")
        if body.get("type") == "url_verification":
            challenge = body.get("challenge")
            if not isinstance(challenge, str) or not _CHALLENGE.fullmatch(challenge):
                return _error(400, "bad_request", f"challenge must be 1 to "
                                                  f"{MAX_CHALLENGE_CHARS} letters, digits, "
                                                  "'.', '_' or '-'")
            return web.json_response({"challenge": challenge})
        if body.get("type") != "event_callback":
            return web.json_response({"ok": True})  # app_rate_limited and the like
        if not isinstance(body.get("event"), dict) or not isinstance(body.get("event_id"), str):
            return _error(400, "bad_request", "an event_callback has an event object and an "
                                              "event_id")
        update = await self._event_update(bot, body)
        if update is not None:
            await self.receive(update)  # committed before Slack hears 200
        return web.json_response({"ok": True})

    async def _interactivity(self, request: web.Request) -> web.Response:
        signed = await self._signed_body(request)
        if isinstance(signed, web.Response):
            return signed
        bot, raw = signed
        try:
            form = parse_qs(raw.decode("utf-8"), max_num_fields=10, strict_parsing=False)
        except (UnicodeDecodeError, ValueError):
            return _error(400, "bad_request", "the body is not a form (payload=...)")
        payload_text = (form.get("payload") or [""])[0]
        try:
            payload = await webhook_json(payload_text.encode("utf-8", "surrogatepass"))
        except WebhookBodyError as exc:
            return _error(400, "bad_request", f"payload: {exc}")
        if not isinstance(payload, dict):
            return _error(400, "bad_request", "payload is not a JSON object")
        update = parse_interaction(bot.agent, payload)
        if update is not None:
            await self.receive(update)
        return web.Response(status=200)

    # -- Socket Mode (the lease holder polls) -------------------------------------------------

    async def fetch_updates(self, bot: ChatBot) -> list[ChannelUpdate]:
        """The updates of Socket Mode envelopes; envelopes fetched before whose
        acknowledgement never came (recording failed) are handed over again first."""
        unacked: list[tuple[str, ChannelUpdate | None]] = bot.state["unacked"]
        if not unacked:
            for envelope in await bot.state["socket"].receive(SOCKET_WAIT_S):
                unacked.append((envelope["envelope_id"],
                                await self._envelope_update(bot, envelope)))
        return [update for _envelope_id, update in unacked if update is not None]

    async def acknowledge(self, bot: ChatBot, updates: list[ChannelUpdate]) -> None:
        """Every envelope of the last fetch is recorded by now (or was not for the agent):
        only now does Slack hear so."""
        unacked: list[tuple[str, ChannelUpdate | None]] = bot.state["unacked"]
        envelope_ids = [envelope_id for envelope_id, _update in unacked]
        unacked.clear()
        await bot.state["socket"].acknowledge(envelope_ids)

    async def _envelope_update(self, bot: ChatBot, envelope: Mapping[str, Any]
                               ) -> ChannelUpdate | None:
        payload = envelope.get("payload")
        if not isinstance(payload, dict):
            return None
        if envelope.get("type") == "events_api" and payload.get("type") == "event_callback":
            return await self._event_update(bot, payload)
        if envelope.get("type") == "interactive":
            return parse_interaction(bot.agent, payload)
        return None

    # -- sending ----------------------------------------------------------------------------

    async def send_text(self, bot: ChatBot, chat_id: str, text: str,
                        payload: Mapping[str, Any]) -> None:
        channel, thread_ts = split_chat(chat_id)
        rendered = to_mrkdwn(text)
        params: dict[str, Any] = {"channel": channel, "text": rendered, "unfurl_links": False,
                                  "unfurl_media": False}
        if thread_ts is not None:
            params["thread_ts"] = thread_ts
        buttons = [button for row in payload.get("buttons") or () for button in row]
        if buttons:
            params["blocks"] = [
                {"type": "section", "text": {"type": "mrkdwn",
                                             "text": rendered[:MAX_SECTION_CHARS]}},
                {"type": "actions", "block_id": "toren_buttons", "elements": [
                    {"type": "button", "action_id": f"toren_button_{index}",
                     "text": {"type": "plain_text", "text": str(button["text"])[:75]},
                     "value": str(button["data"])[:2000]}
                    for index, button in enumerate(buttons[:5])]}]
        await call(bot.state["client"], "chat.postMessage", **params)

    async def answer_button(self, bot: ChatBot, update: ChannelUpdate, text: str) -> None:
        """The note is an ephemeral message in the chat: only the presser sees it."""
        channel = str(update.payload.get("channel") or split_chat(update.chat_id)[0])
        params: dict[str, Any] = {"channel": channel, "user": update.user_id,
                                  "text": to_mrkdwn(text)}
        thread_ts = update.payload.get("thread_ts") or split_chat(update.chat_id)[1]
        if thread_ts:
            params["thread_ts"] = thread_ts
        await call(bot.state["client"], "chat.postEphemeral", **params)


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)
