"""``ParleyChannel``: the ``parley`` chat channel, a whole platform plugin in one file.

Parley is a small chat service (tests/fake_parley.py is one you can run): a bot has a token;
people post messages to it; the bot long-polls ``GET /updates?offset=N`` and answers with
``POST /messages``, which may carry buttons. What makes a chat durable (updates recorded
before they are acknowledged, a keyed outbox, pairing, one poller per deployment) comes from
``toren.plugin.ChatChannel``; this module only speaks Parley's wire format.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import aiohttp

from toren.plugin import COMMON_SETTINGS, ChannelError, ChannelUpdate, ChatBot, ChatChannel

_ENV_NAME = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": 200}


class ParleyChannel(ChatChannel):
    """Each agent that lists ``parley`` is one Parley bot; each person's chat a session."""

    name = "parley"
    description = "Parley bots: each person's chat is a durable session (long polling)"
    max_message_chars = 2000  # Parley refuses longer messages; replies are split below it
    polls = True  # this process long-polls while it holds the agent's poller lease
    supports_buttons = True  # approvals are offered as Approve / Deny buttons
    settings_schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["url", "token_env"],
        "properties": COMMON_SETTINGS | {
            "url": {"description": "The Parley server's base URL.",
                    "type": "string", "pattern": "^https?://", "maxLength": 2000},
            "token_env": {"description": "The variable holding this agent's bot token.",
                          **_ENV_NAME},
            "poll_timeout_s": {"description": "Seconds a long poll waits (default 25).",
                               "type": "integer", "minimum": 0, "maximum": 50},
        },
    }

    def required_env_for(self, settings: Mapping[str, Any]) -> list[str]:
        names = [settings["token_env"]]
        if settings.get("allow_from_env"):
            names.append(settings["allow_from_env"])
        return names

    async def open_bot(self, bot: ChatBot) -> None:
        token = os.environ[bot.settings["token_env"]]  # checked at startup: required_env_for
        bot.state["http"] = aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"})
        bot.state["url"] = bot.settings["url"].rstrip("/")
        bot.state["offset"] = 0

    async def close_bot(self, bot: ChatBot) -> None:
        await bot.state["http"].close()

    async def preflight(self, bot: ChatBot) -> None:
        """``GET /me``: a wrong token stops startup (401) instead of failing every poll."""
        await call(bot, "GET", "/me", timeout_s=10)

    async def fetch_updates(self, bot: ChatBot) -> list[ChannelUpdate]:
        wait = int(bot.settings.get("poll_timeout_s", 25))
        body = await call(bot, "GET", "/updates", timeout_s=wait + 10,
                          params={"offset": bot.state["offset"], "timeout": wait})
        updates = []
        for item in body.get("updates", []):
            if isinstance(item, dict) and isinstance(item.get("id"), int):
                bot.state["seen"] = max(bot.state.get("seen", -1), item["id"])
                update = parse_update(bot.agent, item)
                if update is not None:
                    updates.append(update)
        return updates

    async def acknowledge(self, bot: ChatBot, updates: list[ChannelUpdate]) -> None:
        # called once the updates are in the database: the next poll's offset tells Parley
        # to forget everything below it
        if "seen" in bot.state:
            bot.state["offset"] = bot.state["seen"] + 1

    async def send_text(self, bot: ChatBot, chat_id: str, text: str,
                        payload: Mapping[str, Any]) -> None:
        message: dict[str, Any] = {"chat": chat_id, "text": text}
        if payload.get("buttons"):
            message["buttons"] = payload["buttons"]  # rows of {"text", "data"}, passed as is
        await call(bot, "POST", "/messages", json=message)

    async def send_typing(self, bot: ChatBot, chat_id: str) -> None:
        await call(bot, "POST", "/typing", json={"chat": chat_id})


def parse_update(agent: str, item: Mapping[str, Any]) -> ChannelUpdate | None:
    """A Parley update as a ``ChannelUpdate``: a text message, or a press of one of the bot's
    buttons (``press`` holds the button's data); ``None`` for anything else."""
    user, chat = item.get("user"), item.get("chat")
    if not isinstance(user, dict) or not isinstance(chat, str):
        return None
    text, press = item.get("text"), item.get("press")
    if isinstance(text, str) and text.strip():
        kind, text = "message", text[:100_000]
    elif isinstance(press, str):
        kind, text = "button", press[:200]
    else:
        return None
    return ChannelUpdate(channel="parley", agent=agent, update_id=str(item["id"]),
                         chat_id=chat, user_id=str(user.get("id")), kind=kind, text=text,
                         sort_key=item["id"], payload={"name": str(user.get("name", ""))[:200]})


async def call(bot: ChatBot, method: str, path: str, *, timeout_s: float = 30.0,
               **request: Any) -> dict[str, Any]:
    """One call to the bot's Parley server: its JSON answer, or ``ChannelError``, retryable
    for 429, 5xx and network failures (with the ``Retry-After`` Parley asked for)."""
    try:
        async with bot.state["http"].request(method, bot.state["url"] + path,
                                             timeout=aiohttp.ClientTimeout(total=timeout_s),
                                             **request) as response:
            status, retry_after = response.status, response.headers.get("Retry-After")
            try:
                body = await response.json(content_type=None)
            except ValueError:
                body = None
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise ChannelError(f"Parley {method} {path}: {type(exc).__name__} (network)",
                           retryable=True) from exc
    if status == 200 and isinstance(body, dict):
        return body
    error = str(body.get("error", ""))[:300] if isinstance(body, dict) else ""
    raise ChannelError(f"Parley {method} {path} answered {status}: {error or 'no details'}",
                       retryable=status == 429 or status >= 500, status=status,
                       retry_after_s=float(retry_after) if (retry_after or "").isdigit() else None)
