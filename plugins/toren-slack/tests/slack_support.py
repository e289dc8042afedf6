"""Helpers the slack tests share (a module name of its own: pytest imports every plugin's
tests in one process, where two ``conftest`` or ``support`` modules would collide): Slack's
payloads as it sends them, signed requests, and ``toren dev`` processes serving agent ``bot``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import psycopg
from fake_slack import APP_TOKEN, BOT_ID, BOT_TOKEN, BOT_USER, TEAM, FakeSlack
from toren_slack.signature import sign

from toren.testing import OutputProcess

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
#: The person every test allow-lists, their DM with the app, and a channel the app is in.
FRIEND = "U0FRIEND1"
STRANGER = "U0STRANGE"
DM = "D0DMFRIEND"
GENERAL = "C0GENERAL"
TOREN = Path(sys.executable).parent / "toren"
_event_ids = itertools.count(1)


def slack_settings(fake: FakeSlack, **overrides: Any) -> dict[str, Any]:
    """The slack channel's settings for agent ``bot``, pointed at ``fake``."""
    return {"bot_token_env": "TEST_SLACK_BOT_TOKEN",
            "signing_secret_env": "TEST_SLACK_SIGNING_SECRET",
            "api_url": fake.url, "allow_from": [FRIEND]} | overrides


def socket_settings(fake: FakeSlack, **overrides: Any) -> dict[str, Any]:
    return slack_settings(fake, mode="socket", app_token_env="TEST_SLACK_APP_TOKEN",
                          **overrides)


# -- what Slack sends ------------------------------------------------------------------------

def callback(event: dict[str, Any], event_id: str | None = None) -> dict[str, Any]:
    """An ``event_callback`` body around ``event``, as the Events API posts it."""
    return {"token": "verification-token-unused", "team_id": TEAM, "api_app_id": "A0APP001",
            "event": event, "type": "event_callback",
            "event_id": event_id or f"Ev{next(_event_ids):08d}",
            "event_time": int(time.time()), "authorizations": [
                {"enterprise_id": None, "team_id": TEAM, "user_id": BOT_USER, "is_bot": True,
                 "is_enterprise_install": False}],
            "is_ext_shared_channel": False}


def dm(text: str, ts: str, *, user: str = FRIEND, channel: str = DM) -> dict[str, Any]:
    """A ``message.im`` event: ``user`` writes to the app in their DM."""
    return callback({"type": "message", "channel": channel, "user": user, "text": text,
                     "ts": ts, "event_ts": ts, "channel_type": "im", "team": TEAM})


def mention(text: str, ts: str, *, user: str = FRIEND, channel: str = GENERAL,
            thread_ts: str | None = None) -> dict[str, Any]:
    """An ``app_mention`` event: ``user`` writes ``<@app> text`` in ``channel``."""
    event = {"type": "app_mention", "channel": channel, "user": user,
             "text": f"<@{BOT_USER}> {text}", "ts": ts, "event_ts": ts, "team": TEAM}
    if thread_ts:
        event["thread_ts"] = thread_ts
    return callback(event)


def channel_message(text: str, ts: str, *, user: str = FRIEND, channel: str = GENERAL,
                    thread_ts: str | None = None, **extra: Any) -> dict[str, Any]:
    """A ``message.channels`` event (any message in a channel the app is in)."""
    event = {"type": "message", "channel": channel, "user": user, "text": text, "ts": ts,
             "event_ts": ts, "channel_type": "channel", "team": TEAM} | extra
    if thread_ts:
        event["thread_ts"] = thread_ts
    return callback(event)


def own_message(text: str, ts: str, channel: str = DM) -> dict[str, Any]:
    """The event of a message the app itself posted (Slack sends those too)."""
    return callback({"type": "message", "channel": channel, "user": BOT_USER, "bot_id": BOT_ID,
                     "text": text, "ts": ts, "event_ts": ts, "channel_type": "im"})


def press(value: str, *, user: str = FRIEND, channel: str = DM,
          thread_ts: str | None = None, trigger: str | None = None) -> dict[str, Any]:
    """A ``block_actions`` payload: ``user`` pressed a button whose value is ``value``."""
    message: dict[str, Any] = {"type": "message", "ts": "1700000500.000200",
                               "user": BOT_USER, "bot_id": BOT_ID, "text": "Allow it?"}
    container: dict[str, Any] = {"type": "message", "message_ts": message["ts"],
                                 "channel_id": channel, "is_ephemeral": False}
    if thread_ts:
        message["thread_ts"] = container["thread_ts"] = thread_ts
    return {"type": "block_actions", "user": {"id": user, "username": "ann", "name": "ann",
                                              "team_id": TEAM},
            "api_app_id": "A0APP001", "token": "unused", "container": container,
            "trigger_id": trigger or f"{next(_event_ids)}.1234.abcdef",
            "team": {"id": TEAM, "domain": "test"}, "channel": {"id": channel, "name": "x"},
            "message": message, "response_url": "https://hooks.slack.test/actions/1",
            "actions": [{"action_id": "toren_button_0", "block_id": "toren_buttons",
                         "text": {"type": "plain_text", "text": "Approve"}, "value": value,
                         "type": "button", "action_ts": "1700000600.000300"}]}


def press_form(payload: dict[str, Any]) -> bytes:
    """The interactivity request's body: ``payload=<json>``, form-encoded."""
    return urlencode({"payload": json.dumps(payload)}).encode()


def signed_headers(raw: bytes, *, secret: str = SIGNING_SECRET,
                   timestamp: str | None = None) -> dict[str, str]:
    timestamp = timestamp or str(int(time.time()))
    return {"X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": sign(raw, timestamp, secret)}


async def post(http: aiohttp.ClientSession, url: str, body: dict[str, Any] | bytes, *,
               headers: dict[str, str] | None = None, **signing: Any) -> int:
    """POST ``body`` (an event as JSON, or raw bytes) to ``url``, signed as Slack signs
    (``signing``: ``secret=``, ``timestamp=``) unless ``headers`` are given; the status."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    content_type = ("application/x-www-form-urlencoded" if raw.startswith(b"payload=")
                    else "application/json")
    sent = {"Content-Type": content_type} | (
        headers if headers is not None else signed_headers(raw, **signing))
    async with http.post(url, data=raw, headers=sent) as response:
        await response.read()
        return response.status


async def until(predicate: Callable[[], object], within: float = 30.0) -> None:
    """Wait until ``predicate()`` is true; fail the test after ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    assert predicate(), "timed out"


def rows(database_url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(query, params).fetchall()


# -- toren dev processes -----------------------------------------------------------------------

@dataclass
class Dev:
    """A ``toren dev`` process serving agent ``bot``, and where its webhooks are."""

    process: OutputProcess
    url: str

    @property
    def events(self) -> str:
        return f"{self.url}/channels/slack/bot/events"

    @property
    def interactivity(self) -> str:
        return f"{self.url}/channels/slack/bot/interactivity"


def dev_env(database_url: str, home: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("TOREN_", "TEST_SLACK_")) and key != "DATABASE_URL"}
    return env | {"DATABASE_URL": database_url, "TOREN_LOAD_PLUGINS": "toren-slack",
                  "TEST_SLACK_BOT_TOKEN": BOT_TOKEN, "TEST_SLACK_APP_TOKEN": APP_TOKEN,
                  "TEST_SLACK_SIGNING_SECRET": SIGNING_SECRET, "TOREN_LEASE_TTL": "2",
                  "TOREN_POLL_INTERVAL": "0.2", "TOREN_HOME": str(home),
                  "NO_COLOR": "1"} | extra


def start_dev(directory: Path, env: dict[str, str], stderr: Path) -> Dev:
    process = OutputProcess([str(TOREN), "dev", "--dir", str(directory), "--port", "0",
                             "--json"], env=env, stderr_path=stderr)
    try:
        ready = process.next_json(timeout=60)
    except BaseException:
        process.stop()
        raise
    if "url" not in ready:  # {"error": {...}}: it could not start, and exits
        try:
            code = process.proc.wait(timeout=30)
        finally:
            process.stop()
        raise AssertionError(f"toren dev exited with {code}: {ready}")
    return Dev(process, ready["url"])


def lease_holder_pid(database_url: str) -> int | None:
    found = rows(database_url, "SELECT holder FROM toren_control.channel_leases "
                               "WHERE channel = 'slack' AND agent = 'bot' "
                               "AND expires_at > now()")
    return int(found[0][0].split(":")[1]) if found else None
