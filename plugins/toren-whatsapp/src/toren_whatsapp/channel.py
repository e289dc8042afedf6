"""``WhatsAppChannel``: Cloud API webhooks on the Toren server, replies through the Graph API."""

from __future__ import annotations

import hmac
import logging
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

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
    read_at_most,
    webhook_json,
)
from toren_whatsapp.markup import to_whatsapp
from toren_whatsapp.signature import signature_valid

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://graph.facebook.com/v21.0"
#: The Cloud API's limit for a text message body.
MAX_MESSAGE_CHARS = 4096
#: Largest webhook body accepted (Meta batches a few messages per call).
MAX_WEBHOOK_BYTES = 1024 * 1024
SIGNATURE_HEADER = "X-Hub-Signature-256"
#: Longest ``hub.challenge`` echoed by the verification handshake (Meta sends a number).
MAX_CHALLENGE_CHARS = 200
_CHALLENGE = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_CHALLENGE_CHARS}}}")
#: Graph API error codes that mean "slow down" (besides HTTP 429).
_RATE_LIMIT_CODES = {4, 80007, 130429, 131048, 131056}
#: Bytes read per piece of a media download.
#: The message types whose media is passed on (with the key holding it).
MEDIA_TYPES = ("image", "document")

_ENV_NAME = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": 200}


class WhatsAppChannel(ChatChannel):
    """The ``whatsapp`` channel. Meta calls ``/channels/whatsapp/<agent>`` on the Toren server
    (verification handshake on GET, signed messages on POST); the lease holder sends replies
    through ``POST /<phone_number_id>/messages``."""

    name = "whatsapp"
    description = "WhatsApp Cloud API: a chat is a durable session (webhook on the Toren server)"
    max_message_chars = MAX_MESSAGE_CHARS
    supports_buttons = True
    settings_schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["phone_number_id", "access_token_env", "app_secret_env",
                     "verify_token_env"],
        "properties": COMMON_SETTINGS | {
            "phone_number_id": {"description": "The business phone number's id (Meta's App "
                                               "Dashboard, WhatsApp > API Setup).",
                                "type": ["string", "integer"]},
            "access_token_env": {"description": "The variable holding the Graph API access "
                                                "token.", **_ENV_NAME},
            "app_secret_env": {"description": "The variable holding the app secret that signs "
                                              "webhook calls (X-Hub-Signature-256).",
                               **_ENV_NAME},
            "verify_token_env": {"description": "The variable holding the verify token typed "
                                                "into the webhook's settings at Meta.",
                                 **_ENV_NAME},
            "api_url": {"description": "The Graph API's base URL, version included (default "
                                       "https://graph.facebook.com/v21.0).",
                        "type": "string", "pattern": "^https?://", "maxLength": 2000},
        },
    }

    def required_env_for(self, settings: Mapping[str, Any]) -> list[str]:
        names = [settings["access_token_env"], settings["app_secret_env"],
                 settings["verify_token_env"]]
        if settings.get("allow_from_env"):
            names.append(settings["allow_from_env"])
        return names

    async def open_bot(self, bot: ChatBot) -> None:
        bot.state["session"] = aiohttp.ClientSession()
        bot.state["number_url"] = (f"{bot.settings.get('api_url', DEFAULT_API_URL).rstrip('/')}/"
                                   f"{bot.settings['phone_number_id']}")
        bot.state["url"] = f"{bot.state['number_url']}/messages"

    async def preflight(self, bot: ChatBot) -> None:
        """``GET /<phone_number_id>``: a bad token or a number it cannot use stops startup."""
        token = os.environ.get(bot.settings["access_token_env"], "")
        try:
            async with bot.state["session"].get(
                    bot.state["number_url"], headers={"Authorization": f"Bearer {token}"},
                    timeout=aiohttp.ClientTimeout(total=10)) as response:
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ChannelError(f"WhatsApp preflight: {type(exc).__name__} (network)",
                               retryable=True) from None
        if status >= 400:
            raise ChannelError(f"the Graph API answered {status} for phone number id "
                               f"{bot.settings['phone_number_id']}",
                               retryable=status == 429 or status >= 500, status=status)

    async def close_bot(self, bot: ChatBot) -> None:
        await bot.state["session"].close()

    # -- webhook ----------------------------------------------------------------------------

    def routes(self, app: web.Application, context: ChannelContext) -> None:
        """``GET /channels/whatsapp/<agent>``: Meta's verification handshake;
        ``POST``: signed message notifications, recorded before they are answered 200."""
        app.router.add_get("/channels/whatsapp/{agent}", self._verify)
        app.router.add_post("/channels/whatsapp/{agent}", self._notification)

    async def _verify(self, request: web.Request) -> web.Response:
        bot = self.bots.get(request.match_info["agent"])
        if bot is None:
            return _error(404, "not_found", "no agent here takes WhatsApp webhook calls")
        expected = os.environ.get(bot.settings["verify_token_env"], "")
        query = request.query
        token = query.get("hub.verify_token", "")
        if (query.get("hub.mode") != "subscribe" or not expected
                or not hmac.compare_digest(token.encode(), expected.encode())):
            return _error(403, "forbidden", "hub.mode must be subscribe and hub.verify_token "
                                            "the agent's verify token")
        challenge = query.get("hub.challenge", "")
        if not _CHALLENGE.fullmatch(challenge):
            return _error(400, "bad_request", "hub.challenge must be 1 to "
                                              f"{MAX_CHALLENGE_CHARS} letters, digits, '.', "
                                              "'_' or '-' (Meta sends digits)")
        # echoed as plain text the browser may not sniff as anything else (HTML, script)
        return web.Response(text=challenge, content_type="text/plain",
                            headers={"X-Content-Type-Options": "nosniff"})

    async def _notification(self, request: web.Request) -> web.Response:
        bot = self.bots.get(request.match_info["agent"])
        if bot is None:
            return _error(404, "not_found", "no agent here takes WhatsApp webhook calls")
        if request.content_length is not None and request.content_length > MAX_WEBHOOK_BYTES:
            return _error(413, "too_large", "a notification is at most 1 MiB")
        raw = await request.content.read(MAX_WEBHOOK_BYTES + 1)
        if len(raw) > MAX_WEBHOOK_BYTES:
            return _error(413, "too_large", "a notification is at most 1 MiB")
        secret = os.environ.get(bot.settings["app_secret_env"], "")
        # over the raw bytes, before parsing: a re-serialised body would not match
        if not signature_valid(raw, request.headers.get(SIGNATURE_HEADER), secret):
            return _error(401, "bad_signature", f"missing or wrong {SIGNATURE_HEADER}")
        try:
            body = await webhook_json(raw)
        except WebhookBodyError as exc:
            return _error(400, "bad_request", str(exc))
        updates = parse_notification(bot.agent, str(bot.settings["phone_number_id"]), body)
        # in the order they were sent (Meta's batches need not be), so the turns are too
        for update in sorted(updates, key=lambda update: update.sort_key):
            await self.receive(update)  # committed before Meta hears 200
        return web.json_response({"received": len(updates)})

    # -- sending ----------------------------------------------------------------------------

    async def send_text(self, bot: ChatBot, chat_id: str, text: str,
                        payload: Mapping[str, Any]) -> None:
        body: dict[str, Any] = {"messaging_product": "whatsapp", "recipient_type": "individual",
                                "to": chat_id}
        buttons = [button for row in payload.get("buttons") or () for button in row][:3]
        if buttons:
            body |= {"type": "interactive", "interactive": {
                "type": "button", "body": {"text": to_whatsapp(text)[:1024]},
                "action": {"buttons": [{"type": "reply", "reply": {
                    "id": button["data"][:256], "title": button["text"][:20]}}
                    for button in buttons]}}}
        else:
            body |= {"type": "text", "text": {"body": to_whatsapp(text)[:MAX_MESSAGE_CHARS],
                                              "preview_url": False}}
        token = os.environ.get(bot.settings["access_token_env"], "")
        try:
            async with bot.state["session"].post(
                    bot.state["url"], json=body, headers={"Authorization": f"Bearer {token}"},
                    timeout=aiohttp.ClientTimeout(total=30)) as response:
                status = response.status
                try:
                    answer = await response.json(content_type=None)
                except ValueError:
                    answer = None
                retry_after = response.headers.get("Retry-After")
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ChannelError(f"WhatsApp send: {type(exc).__name__} (network)",
                               retryable=True) from None
        if 200 <= status < 300:
            return
        error = answer.get("error", {}) if isinstance(answer, dict) else {}
        code = error.get("code") if isinstance(error, dict) else None
        message = str(error.get("message", ""))[:300] if isinstance(error, dict) else ""
        retryable = status == 429 or status >= 500 or code in _RATE_LIMIT_CODES
        raise ChannelError(f"WhatsApp send answered {status}: {message or 'no message'}",
                           retryable=retryable, status=status,
                           retry_after_s=_seconds(retry_after))

    # -- media ------------------------------------------------------------------------------

    async def download_file(self, bot: ChatBot, ref: str, *, max_bytes: int) -> bytes:
        """``GET /<media id>`` for the media's URL (valid for minutes), then ``GET`` that URL
        with the same bearer token, as the Cloud API asks."""
        token = os.environ.get(bot.settings["access_token_env"], "")
        headers = {"Authorization": f"Bearer {token}"}
        api_url = bot.settings.get("api_url", DEFAULT_API_URL).rstrip("/")
        session: aiohttp.ClientSession = bot.state["session"]
        try:
            async with session.get(f"{api_url}/{quote(ref, safe='')}", headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=30)) as response:
                status = response.status
                try:
                    media = await response.json(content_type=None)
                except ValueError:
                    media = None
            if status != 200 or not isinstance(media, dict) \
                    or not isinstance(media.get("url"), str):
                raise ChannelError(f"WhatsApp media lookup answered {status}",
                                   retryable=status == 429 or status >= 500, status=status)
            size = media.get("file_size")
            if isinstance(size, int) and not isinstance(size, bool) and size > max_bytes:
                raise ChannelError(f"it is {_megabytes(size)}, and files here may be at most "
                                   f"{_megabytes(max_bytes)}.", status=413)
            async with session.get(media["url"], headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=120)) as response:
                if response.status != 200:
                    raise ChannelError(f"WhatsApp media download answered {response.status}",
                                       retryable=response.status == 429
                                       or response.status >= 500, status=response.status)
                return await read_at_most(response, max_bytes)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ChannelError(f"WhatsApp media download: {type(exc).__name__} (network)",
                               retryable=True) from None


def parse_notification(agent: str, phone_number_id: str, body: Any) -> list[ChannelUpdate]:
    """The text messages, images and documents (with their captions) and button replies in
    a Cloud API notification that were sent to ``phone_number_id`` (statuses, other media
    and other numbers' messages are skipped)."""
    updates: list[ChannelUpdate] = []
    if not isinstance(body, dict) or body.get("object") != "whatsapp_business_account":
        return updates
    for entry in body.get("entry") or []:
        for change in (entry.get("changes") or []) if isinstance(entry, dict) else []:
            value = change.get("value") if isinstance(change, dict) else None
            if not isinstance(value, dict):
                continue
            metadata = value.get("metadata") or {}
            if str(metadata.get("phone_number_id", "")) != phone_number_id:
                continue
            names = {str(contact.get("wa_id")): str((contact.get("profile") or {})
                                                    .get("name", ""))
                     for contact in value.get("contacts") or [] if isinstance(contact, dict)}
            for message in value.get("messages") or []:
                update = _message_update(agent, message, names)
                if update is not None:
                    updates.append(update)
    return updates


def _message_update(agent: str, message: Any, names: dict[str, str]) -> ChannelUpdate | None:
    if not isinstance(message, dict) or not message.get("id") or not message.get("from"):
        return None
    sender = str(message["from"])
    try:
        sort_key = int(message.get("timestamp", 0))
    except (TypeError, ValueError):
        sort_key = 0
    kind, text = "message", None
    payload: dict[str, Any] = {"name": names.get(sender, "")[:200]}
    if message.get("type") == "text":
        body = (message.get("text") or {}).get("body")
        if isinstance(body, str) and body.strip():
            text = body[:100_000]
    elif message.get("type") == "interactive":
        reply = (message.get("interactive") or {}).get("button_reply") or {}
        if reply.get("id"):
            kind, text = "button", str(reply["id"])[:200]
    elif message.get("type") in MEDIA_TYPES:
        media = message.get(message["type"])
        if isinstance(media, dict) and isinstance(media.get("id"), str) and media["id"]:
            caption = media.get("caption")
            text = caption[:100_000] if isinstance(caption, str) else ""
            payload["files"] = [_media_file(message["type"], media, sort_key)]
    if text is None:
        return None
    return ChannelUpdate(channel="whatsapp", agent=agent, update_id=str(message["id"])[:200],
                         chat_id=sender, user_id=sender, kind=kind, text=text,
                         sort_key=sort_key, payload=payload)


def _media_file(kind: str, media: dict[str, Any], sort_key: int) -> dict[str, Any]:
    """An image's or a document's media as ``ChatChannel`` takes a file: the media id to
    download it by, a name (a document's own; the base adds the extension of the type),
    the type WhatsApp says (a type other than an image or a PDF is refused with a reply).
    WhatsApp does not say the size until the media is looked up."""
    filename = media.get("filename")
    name = (filename[:1000] if kind == "document" and isinstance(filename, str)
            and filename.strip() else f"{kind}-{sort_key}")
    return {"ref": media["id"][:1000], "name": name,
            "content_type": str(media.get("mime_type") or "").split(";")[0].strip()
            .lower()[:200], "size": None}


def _megabytes(size: int) -> str:
    return f"{size / 1_000_000:,.1f} MB" if size >= 100_000 else f"{size:,} bytes"


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)
