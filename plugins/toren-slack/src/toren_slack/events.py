"""Slack's events and interactions -> ``ChannelUpdate`` (pure functions).

Which Slack conversation is one Toren chat (one durable session):

- a DM with the app (``channel_type: im``, a ``D...`` channel): the channel is the chat;
- in a channel, an ``app_mention`` starts a thread (or joins the thread it was written in),
  and the thread is the chat: ``<channel>:<thread_ts>``. Later messages in that thread are
  the chat's too, without a mention, once the thread is a chat (the caller checks).

An update's id is the message's identity, ``<channel>:<ts>``: the same for Slack's retries of
an event (``X-Slack-Retry-Num``), for a redelivered Socket Mode envelope, and for the two
events Slack sends for one message that mentions the app in a thread (``app_mention`` and
``message``), so each message starts at most one turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toren.plugin import ChannelUpdate
from toren_slack.markup import unescape

CHANNEL = "slack"
#: Longest text taken from one message (Slack's own limit is 40,000 characters).
MAX_TEXT_CHARS = 100_000
#: Slack ids (users, channels, teams) are short upper-case letters and digits.
_ID = re.compile(r"[A-Z0-9]{2,40}")
#: A message timestamp: seconds, a dot, microseconds (``1700000000.000100``).
_TS = re.compile(r"([0-9]{1,12})\.([0-9]{1,9})")
#: Message subtypes that are a person writing (everything else, edits and deletions and joins
#: and bots, is not a message for the agent).
_PERSON_SUBTYPES = frozenset({None, "thread_broadcast", "file_share"})


@dataclass(frozen=True)
class EventUpdate:
    """An update from an event, and whether it counts only in a thread that is a chat
    already (a channel message without a mention)."""

    update: ChannelUpdate
    needs_known_thread: bool = False


def slack_id(value: Any) -> str | None:
    """``value`` if it looks like a Slack id, else ``None`` (a hostile id never becomes part
    of a chat id)."""
    return value if isinstance(value, str) and _ID.fullmatch(value) else None


def message_ts(value: Any) -> str | None:
    """``value`` if it is a Slack message timestamp, else ``None``."""
    return value if isinstance(value, str) and _TS.fullmatch(value) else None


def sort_key(ts: str | None) -> int:
    """A message timestamp as microseconds: orders a chat's messages as Slack did."""
    match = _TS.fullmatch(ts or "")
    if match is None:
        return 0
    return int(match.group(1)) * 1_000_000 + int(match.group(2).ljust(6, "0")[:6])


def chat_of(channel: str, thread_ts: str | None) -> str:
    """The chat id of a conversation: the DM's channel, or ``<channel>:<thread_ts>``."""
    if channel.startswith("D") or thread_ts is None:
        return channel
    return f"{channel}:{thread_ts}"


def split_chat(chat_id: str) -> tuple[str, str | None]:
    """``(channel, thread_ts)`` of a chat id (``thread_ts`` ``None`` for a DM)."""
    channel, _, thread_ts = chat_id.partition(":")
    return channel, thread_ts or None


def bot_user_of(body: Mapping[str, Any]) -> str | None:
    """The app's own user id, as an ``event_callback`` names it (``authorizations``)."""
    for authorization in body.get("authorizations") or ():
        if isinstance(authorization, dict) and authorization.get("is_bot"):
            found = slack_id(authorization.get("user_id"))
            if found:
                return found
    return None


def parse_event(agent: str, body: Mapping[str, Any], bot_user: str | None
                ) -> EventUpdate | None:
    """The update in an ``event_callback`` body, or ``None`` for an event that is not a person
    writing to the agent: the app's own and other bots' messages, edits, deletions, joins,
    channel messages outside threads, empty texts and malformed events.

    ``bot_user`` is the app's user id: its mention is taken out of the text, and a channel
    message mentioning it is left to the ``app_mention`` event of the same message.
    """
    event = body.get("event")
    if not isinstance(event, dict) or event.get("bot_id") or event.get("subtype") \
            not in _PERSON_SUBTYPES:
        return None
    kind = event.get("type")
    channel, user = slack_id(event.get("channel")), slack_id(event.get("user"))
    ts, thread_ts = message_ts(event.get("ts")), message_ts(event.get("thread_ts"))
    text = event.get("text")
    if (kind not in ("message", "app_mention") or channel is None or user is None or ts is None
            or not isinstance(text, str) or (bot_user is not None and user == bot_user)):
        return None
    mention = re.compile(rf"<@{bot_user}(\|[^>]*)?>\s*") if bot_user else None
    needs_thread = False
    if kind == "message":
        if event.get("channel_type") == "im" or channel.startswith("D"):
            chat_id = channel
        elif thread_ts is None or (mention is not None and mention.search(text)):
            return None  # outside a thread, or the app_mention event of the same message
        else:
            chat_id, needs_thread = chat_of(channel, thread_ts), True
    else:
        chat_id = chat_of(channel, thread_ts or ts)
    if mention is not None:
        text = mention.sub("", text)
    text = unescape(text).strip()[:MAX_TEXT_CHARS]
    if not text:
        return None
    profile = event.get("user_profile")
    name = ""
    if isinstance(profile, dict):
        name = str(profile.get("display_name") or profile.get("real_name") or "")[:200]
    update = ChannelUpdate(channel=CHANNEL, agent=agent, update_id=f"{channel}:{ts}",
                           chat_id=chat_id, user_id=user, kind="message", text=text,
                           sort_key=sort_key(ts), payload={"name": name})
    return EventUpdate(update, needs_known_thread=needs_thread)


def parse_interaction(agent: str, payload: Mapping[str, Any]) -> ChannelUpdate | None:
    """A press of one of the approval buttons (``block_actions``) as a ``button`` update whose
    text is the button's value; ``None`` for anything else. The press's chat is the chat the
    message with the buttons was posted in (its DM, or its thread)."""
    if payload.get("type") != "block_actions":
        return None
    user = payload.get("user")
    channel = payload.get("channel")
    container = payload.get("container")
    message = payload.get("message")
    actions = payload.get("actions")
    if not (isinstance(user, dict) and isinstance(actions, list) and actions
            and isinstance(actions[0], dict)):
        return None
    user_id = slack_id(user.get("id"))
    channel_id = slack_id(channel.get("id")) if isinstance(channel, dict) else None
    if channel_id is None and isinstance(container, dict):
        channel_id = slack_id(container.get("channel_id"))
    value = actions[0].get("value")
    trigger = payload.get("trigger_id")
    action_ts = message_ts(actions[0].get("action_ts"))
    # each press has a trigger id of its own (action_ts for the odd payload without one)
    press_id = trigger[:100] if isinstance(trigger, str) and trigger else action_ts
    if (user_id is None or channel_id is None or not isinstance(value, str) or not value
            or not press_id):
        return None
    thread_ts = None
    for holder in (message, container):
        if isinstance(holder, dict) and thread_ts is None:
            thread_ts = message_ts(holder.get("thread_ts"))
    return ChannelUpdate(channel=CHANNEL, agent=agent, update_id=f"press:{press_id}",
                         chat_id=chat_of(channel_id, thread_ts), user_id=user_id,
                         kind="button", text=value[:200], sort_key=sort_key(action_ts),
                         payload={"name": str(user.get("name") or "")[:200],
                                  "channel": channel_id, "thread_ts": thread_ts or ""})
