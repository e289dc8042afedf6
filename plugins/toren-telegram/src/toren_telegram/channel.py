"""``TelegramChannel``: each agent's own bot; private chats are durable sessions."""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Mapping
from typing import Any

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
from toren_telegram.api import DEFAULT_API_URL, BotApi
from toren_telegram.markup import to_telegram_html

log = logging.getLogger(__name__)

#: Telegram's limit for one message's text (after entity parsing).
MAX_MESSAGE_CHARS = 4096
#: Largest webhook body accepted (an update is a few kilobytes).
MAX_WEBHOOK_BYTES = 256 * 1024
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"

_ENV_NAME = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": 200}


class TelegramChannel(ChatChannel):
    """The ``telegram`` channel: long polling with ``getUpdates`` (the default) or a webhook
    (``mode: webhook``) whose calls must carry the ``secret_token`` set with ``setWebhook``.
    """

    name = "telegram"
    description = "Telegram bots: a DM is a durable session (long polling or webhook)"
    max_message_chars = MAX_MESSAGE_CHARS
    polls = True
    supports_buttons = True
    notes_buttons_in_place = True
    settings_schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["bot_token_env"],
        "properties": COMMON_SETTINGS | {
            "bot_token_env": {
                "description": "The variable holding this agent's bot token (from @BotFather).",
                **_ENV_NAME},
            "mode": {"description": "polling (default) or webhook.",
                     "enum": ["polling", "webhook"]},
            "webhook_url": {
                "description": "Public HTTPS URL of /channels/telegram/<agent> (webhook mode).",
                "type": "string", "pattern": "^https?://", "maxLength": 2000},
            "webhook_secret_env": {
                "description": "The variable holding the webhook's secret_token (webhook mode).",
                **_ENV_NAME},
            "api_url": {"description": "The Bot API's base URL (default "
                                       "https://api.telegram.org; a local Bot API server or a "
                                       "test fake).",
                        "type": "string", "pattern": "^https?://", "maxLength": 2000},
            "poll_timeout_s": {"description": "Seconds a getUpdates long poll waits (default "
                                              "25).",
                               "type": "integer", "minimum": 0, "maximum": 50},
        },
    }

    def check_settings(self, agent: str, settings: Mapping[str, Any]) -> list[tuple[str, str]]:
        if settings.get("mode") == "webhook":
            for key in ("webhook_secret_env", "webhook_url"):
                if not settings.get(key):
                    return [(key, f"webhook mode needs {key}: Telegram's calls are checked "
                                  "against the secret, sent to the URL")]
        return super().check_settings(agent, settings)

    def required_env_for(self, settings: Mapping[str, Any]) -> list[str]:
        names = [settings["bot_token_env"]]
        if settings.get("mode") == "webhook":
            names.append(settings["webhook_secret_env"])
        if settings.get("allow_from_env"):
            names.append(settings["allow_from_env"])
        return names

    def polls_for(self, bot: ChatBot) -> bool:
        return bool(bot.settings.get("mode", "polling") == "polling")

    # -- per agent -------------------------------------------------------------------------

    async def open_bot(self, bot: ChatBot) -> None:
        session = aiohttp.ClientSession()
        bot.state["session"] = session
        bot.state["api"] = BotApi(session, os.environ[bot.settings["bot_token_env"]],
                                  bot.settings.get("api_url", DEFAULT_API_URL))
        bot.state["offset"] = None
        if bot.settings.get("mode") == "webhook":
            try:
                await bot.state["api"].call("setWebhook", {
                    "url": f"{bot.settings['webhook_url'].rstrip('/')}",
                    "secret_token": os.environ[bot.settings["webhook_secret_env"]],
                    "allowed_updates": ["message", "callback_query"]})
            except ChannelError as exc:
                log.warning("telegram: setWebhook for %s failed: %s", bot.agent, exc.message)

    async def preflight(self, bot: ChatBot) -> None:
        """``getMe``: a revoked or mistyped token stops startup (401)."""
        await bot.state["api"].call("getMe", timeout_s=10)

    async def close_bot(self, bot: ChatBot) -> None:
        await bot.state["session"].close()

    # -- polling ----------------------------------------------------------------------------

    async def fetch_updates(self, bot: ChatBot) -> list[ChannelUpdate]:
        timeout = int(bot.settings.get("poll_timeout_s", 25))
        params: dict[str, Any] = {"timeout": timeout,
                                  "allowed_updates": ["message", "callback_query"]}
        if bot.state["offset"] is not None:
            params["offset"] = bot.state["offset"]
        raw = await bot.state["api"].call("getUpdates", params, timeout_s=timeout + 10)
        updates = []
        for item in raw or []:
            if not isinstance(item, dict) or not isinstance(item.get("update_id"), int):
                continue
            bot.state["seen"] = max(bot.state.get("seen", -1), item["update_id"])
            update = parse_update(bot.agent, item)
            if update is not None:
                updates.append(update)
        return updates

    async def acknowledge(self, bot: ChatBot, updates: list[ChannelUpdate]) -> None:
        # the next getUpdates with a higher offset confirms everything below it to Telegram
        if bot.state.get("seen") is not None:
            bot.state["offset"] = bot.state["seen"] + 1

    # -- webhook ----------------------------------------------------------------------------

    def routes(self, app: web.Application, context: ChannelContext) -> None:
        """``POST /channels/telegram/<agent>``: Telegram's webhook calls (webhook mode)."""
        app.router.add_post("/channels/telegram/{agent}", self._webhook)

    async def _webhook(self, request: web.Request) -> web.Response:
        bot = self.bots.get(request.match_info["agent"])
        if bot is None or bot.settings.get("mode") != "webhook":
            return _error(404, "not_found", "no agent here takes Telegram webhook calls")
        secret = os.environ.get(bot.settings["webhook_secret_env"], "")
        presented = request.headers.get(SECRET_HEADER, "")
        if not secret or not hmac.compare_digest(presented.encode(), secret.encode()):
            return _error(401, "unauthorized", f"missing or wrong {SECRET_HEADER}")
        if request.content_length is not None and request.content_length > MAX_WEBHOOK_BYTES:
            return _error(413, "too_large", "an update is at most 256 KiB")
        raw = await request.content.read(MAX_WEBHOOK_BYTES + 1)
        if len(raw) > MAX_WEBHOOK_BYTES:
            return _error(413, "too_large", "an update is at most 256 KiB")
        try:
            item = await webhook_json(raw)
        except WebhookBodyError as exc:
            return _error(400, "bad_request", str(exc))
        if not isinstance(item, dict) or not isinstance(item.get("update_id"), int):
            return _error(400, "bad_request", "an update is an object with an update_id")
        update = parse_update(bot.agent, item)
        if update is not None:
            await self.receive(update)  # committed before Telegram hears 200
        return web.json_response({"ok": True})

    # -- sending ----------------------------------------------------------------------------

    async def send_text(self, bot: ChatBot, chat_id: str, text: str,
                        payload: Mapping[str, Any]) -> None:
        params: dict[str, Any] = {"chat_id": chat_id}
        if payload.get("buttons"):
            params["reply_markup"] = {"inline_keyboard": [
                [{"text": button["text"], "callback_data": button["data"][:64]}
                 for button in row] for row in payload["buttons"]]}
        rendered = to_telegram_html(text)
        if len(rendered) <= MAX_MESSAGE_CHARS:
            try:
                await bot.state["api"].call("sendMessage", params | {"text": rendered,
                                                                     "parse_mode": "HTML"})
                return
            except ChannelError as exc:
                if exc.retryable or "parse entities" not in exc.message:
                    raise
                # markup Telegram could not parse: the same text, plain
        await bot.state["api"].call("sendMessage", params | {"text": text})

    async def send_typing(self, bot: ChatBot, chat_id: str) -> None:
        await bot.state["api"].call("sendChatAction", {"chat_id": chat_id, "action": "typing"})

    async def answer_button(self, bot: ChatBot, update: ChannelUpdate, text: str) -> None:
        await bot.state["api"].call("answerCallbackQuery", {
            "callback_query_id": update.payload.get("callback_id", ""), "text": text[:190]})

    # -- files ------------------------------------------------------------------------------

    async def download_file(self, bot: ChatBot, ref: str, *, max_bytes: int) -> bytes:
        """``getFile`` for the file's path, then ``GET <api_url>/file/bot<token>/<path>``."""
        api: BotApi = bot.state["api"]
        try:
            found = await api.call("getFile", {"file_id": ref})
        except ChannelError as exc:
            if exc.status == 400 and "too big" in exc.message:
                raise ChannelError("it is larger than the 20 MB Telegram lets a bot download.",
                                   status=413) from None
            raise
        path = found.get("file_path") if isinstance(found, dict) else None
        if not isinstance(path, str) or not path:
            raise ChannelError("Telegram getFile gave no file_path")
        return await api.download(path, max_bytes=max_bytes)


def parse_update(agent: str, item: Mapping[str, Any]) -> ChannelUpdate | None:
    """A Bot API update as a ``ChannelUpdate``: a private chat's message (its text, or a photo
    or document with its caption: ``payload["files"]``), or a press of one of the bot's
    buttons; ``None`` for anything else (groups, stickers, voice, edits)."""
    update_id = item["update_id"]
    message = item.get("message")
    if isinstance(message, dict):
        chat, sender = message.get("chat"), message.get("from")
        text = message.get("text")
        if not isinstance(text, str):
            text = message.get("caption")
        text = text if isinstance(text, str) else ""
        files = message_files(message)
        if not (isinstance(chat, dict) and chat.get("type") == "private"
                and isinstance(sender, dict) and (text.strip() or files)):
            return None
        payload: dict[str, Any] = {"name": _name(sender)}
        if files:
            payload["files"] = files
        return ChannelUpdate(channel="telegram", agent=agent, update_id=str(update_id),
                             chat_id=str(chat.get("id")), user_id=str(sender.get("id")),
                             kind="message", text=text[:100_000], sort_key=update_id,
                             payload=payload)
    query = item.get("callback_query")
    if isinstance(query, dict) and isinstance(query.get("from"), dict):
        chat = (query.get("message") or {}).get("chat") or {}
        return ChannelUpdate(channel="telegram", agent=agent, update_id=str(update_id),
                             chat_id=str(chat.get("id", query["from"].get("id"))),
                             user_id=str(query["from"].get("id")), kind="button",
                             text=str(query.get("data", ""))[:200], sort_key=update_id,
                             payload={"callback_id": str(query.get("id", ""))})
    return None


def message_files(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The files of a message as ``ChatChannel`` takes them (``{"ref", "name",
    "content_type", "size"}``): a photo's largest size (Telegram sends each photo as JPEG in
    several sizes), or a document with the type Telegram gives it (the base refuses, with a
    reply, a type other than an image or a PDF)."""
    message_id = message.get("message_id", "")
    photo = message.get("photo")
    if isinstance(photo, list):
        sizes = [size for size in photo if isinstance(size, dict)
                 and isinstance(size.get("file_id"), str) and size["file_id"]]
        if sizes:
            largest = max(sizes, key=lambda size: (_int(size.get("width")) or 0)
                          * (_int(size.get("height")) or 0))
            return [{"ref": largest["file_id"][:1000], "name": f"photo-{message_id}.jpg",
                     "content_type": "image/jpeg", "size": _int(largest.get("file_size"))}]
    document = message.get("document")
    if isinstance(document, dict) and isinstance(document.get("file_id"), str) \
            and document["file_id"]:
        content_type = str(document.get("mime_type") or "").lower()[:200]
        content_type = "image/jpeg" if content_type == "image/jpg" else content_type
        name = document.get("file_name")
        return [{"ref": document["file_id"][:1000],
                 "name": name[:1000] if isinstance(name, str) and name.strip()
                 else f"document-{message_id}",
                 "content_type": content_type, "size": _int(document.get("file_size"))}]
    return []


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _name(sender: Mapping[str, Any]) -> str:
    parts = [sender.get("first_name"), sender.get("last_name")]
    name = " ".join(str(part) for part in parts if part)
    if sender.get("username"):
        name += f" (@{sender['username']})"
    return name[:200]


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)
