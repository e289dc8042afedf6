"""Signatures, events, interactions, formatting, settings and the app manifest of the slack
channel (pure functions), and the rule that its source uses the public plugin API only."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_slack import BOT_USER
from slack_sdk.signature import SignatureVerifier
from slack_support import DM, FRIEND, GENERAL, callback, channel_message, dm, mention, press
from toren_slack.channel import SlackChannel
from toren_slack.events import parse_event, parse_interaction, sort_key, split_chat
from toren_slack.markup import to_mrkdwn, unescape
from toren_slack.signature import sign, signature_valid

from toren.plugin import ChatBot

PLUGIN = Path(__file__).resolve().parents[1]
#: What a plugin's source may import of Toren (docs/reference/plugin-api.md).
PUBLIC = {"toren", "toren.plugin", "toren.plugin.drivers", "toren.plugin.cli"}


def kernel_imports(source: str, filename: str = "<source>") -> list[str]:
    """Each import of a ``toren.`` module that is not the public plugin API, as
    ``file:line: statement`` (imports inside functions and TYPE_CHECKING blocks count)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        if any(module.split(".")[0] == "toren" and module not in PUBLIC for module in modules):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_source_imports_only_the_public_plugin_api() -> None:
    sources = sorted((PLUGIN / "src").rglob("*.py"))
    assert len(sources) >= 7
    found = [hit for path in sources for hit in kernel_imports(path.read_text(), str(path))]
    assert found == [], "toren_slack may import toren, toren.plugin(.drivers, .cli) only"
    # and the check finds what it is for, wherever it hides
    assert kernel_imports("from toren.host.chat import ChatChannel\n"
                          "def f():\n    import toren.core.events\n"
                          "if TYPE_CHECKING:\n    from toren.seams.channels import X\n") == [
        "<source>:1: from toren.host.chat import ChatChannel",
        "<source>:3: import toren.core.events",
        "<source>:5: from toren.seams.channels import X"]
    assert kernel_imports("import toren\nfrom toren.plugin import ChatChannel\n"
                          "from toren_slack.events import CHANNEL\n") == []


def test_the_entry_point_declares_the_plugin_api_it_was_written_for() -> None:
    from toren_slack import plugin

    assert plugin.TOREN_PLUGIN_API == ">=1.0,<2"
    config = (PLUGIN / "pyproject.toml").read_text()
    assert '[project.entry-points.toren]\nslack = "toren_slack.plugin"' in config


def test_the_signature_is_slacks_hmac_of_the_raw_body_and_a_fresh_timestamp() -> None:
    body, timestamp, secret = b'{"type":"event_callback"}', "1700000000", "s3cret"
    header = sign(body, timestamp, secret)
    # Slack's own reference implementation computes the same header
    assert header == SignatureVerifier(secret).generate_signature(timestamp=timestamp,
                                                                  body=body)
    assert signature_valid(body, timestamp, header, secret, now=1700000000 + 299)
    assert not signature_valid(body, timestamp, header, secret, now=1700000000 + 301)
    assert not signature_valid(body, timestamp, header, secret, now=1700000000 - 301)
    assert not signature_valid(body + b" ", timestamp, header, secret, now=1700000000)
    assert not signature_valid(body, "1700000001", header, secret, now=1700000000)
    assert not signature_valid(body, timestamp, header, "other", now=1700000000)
    assert not signature_valid(body, timestamp, header.upper(), secret, now=1700000000)
    assert not signature_valid(body, timestamp, header, "", now=1700000000)
    for bad_timestamp in (None, "", "1e9", "-1", "17000000000000", " 1700000000"):
        assert not signature_valid(body, bad_timestamp, header, secret, now=1700000000)
    assert not signature_valid(body, timestamp, None, secret, now=1700000000)
    assert not signature_valid(body, timestamp, "v0=\u00e9" * 3, secret, now=1700000000)
    # bytes that are not UTF-8 are signed as they are (the SDK's verifier would raise)
    assert signature_valid(b"\xff\xfe", timestamp, sign(b"\xff\xfe", timestamp, secret),
                           secret, now=1700000000)


def event(body: dict[str, Any]) -> tuple[str, str, str, str, int, bool]:
    parsed = parse_event("bot", body, BOT_USER)
    assert parsed is not None, body
    update = parsed.update
    return (update.update_id, update.chat_id, update.user_id, update.text, update.sort_key,
            parsed.needs_known_thread)


def test_a_dm_is_a_chat_and_a_mention_starts_a_thread_that_is_one() -> None:
    assert event(dm("hi &lt;there&gt; &amp; all", "1700000001.000100")) == (
        f"{DM}:1700000001.000100", DM, FRIEND, "hi <there> & all", 1700000001000100, False)
    assert event(mention("what's up", "1700000002.5")) == (
        f"{GENERAL}:1700000002.5", f"{GENERAL}:1700000002.5", FRIEND, "what's up",
        1700000002500000, False)
    # a mention inside someone's thread joins that thread
    assert event(mention("me too", "1700000003.000100", thread_ts="1700000002.5"))[1] == (
        f"{GENERAL}:1700000002.5")
    # a thread's messages count only once the thread is a chat (the caller checks)
    assert event(channel_message("more", "1700000004.000100", thread_ts="1700000002.5")) == (
        f"{GENERAL}:1700000004.000100", f"{GENERAL}:1700000002.5", FRIEND, "more",
        1700000004000100, True)
    # the message event of a mention in a thread is left to its app_mention event
    assert parse_event("bot", channel_message(f"<@{BOT_USER}> more", "1700000005.000100",
                                              thread_ts="1700000002.5"), BOT_USER) is None
    # the same message by either event is one update id: one turn
    inside = mention("x", "1700000006.000100", thread_ts="1700000002.5")
    assert event(inside)[0] == f"{GENERAL}:1700000006.000100"
    # the authorizations' bot user wins; a mention of someone else stays in the text
    assert event(dm(f"ask <@{BOT_USER}> and <@U0OTHER01>", "1.2"))[3] == (
        "ask and <@U0OTHER01>")


@pytest.mark.parametrize("body", [
    channel_message("lunch?", "1700000001.000100"),  # a channel, outside a thread
    callback({"type": "message", "channel": DM, "user": BOT_USER, "text": "mine", "ts": "1.1",
              "channel_type": "im"}),
    callback({"type": "message", "channel": DM, "user": FRIEND, "bot_id": "B1", "text": "x",
              "ts": "1.1", "channel_type": "im"}),
    callback({"type": "message", "subtype": "message_changed", "channel": DM, "ts": "1.1",
              "message": {"text": "edited", "user": FRIEND}, "channel_type": "im"}),
    callback({"type": "message", "subtype": "channel_join", "channel": DM, "user": FRIEND,
              "text": "joined", "ts": "1.1", "channel_type": "im"}),
    callback({"type": "reaction_added", "user": FRIEND, "item": {}}),
    dm(f"<@{BOT_USER}>", "1.1"),  # nothing but the mention
    dm("   ", "1.1"),
    callback({"type": "message", "channel": "D1:2", "user": FRIEND, "text": "x", "ts": "1.1",
              "channel_type": "im"}),  # an id that would break the chat id
    callback({"type": "message", "channel": DM, "user": "u; drop", "text": "x", "ts": "1.1"}),
    callback({"type": "message", "channel": DM, "user": FRIEND, "text": ["x"], "ts": "1.1"}),
    callback({"type": "message", "channel": DM, "user": FRIEND, "text": "x", "ts": "yesterday"}),
    callback("not an event"),  # type: ignore[arg-type]
    {"type": "event_callback"},
])
def test_what_is_not_a_person_writing_to_the_agent_is_no_update(body: dict[str, Any]) -> None:
    assert parse_event("bot", body, BOT_USER) is None


def test_a_button_press_is_a_button_update_in_the_chat_it_was_shown_in() -> None:
    update = parse_interaction("bot", press("a:1:x", trigger="1.2.abc", channel=GENERAL,
                                            thread_ts="1700000002.5"))
    assert update is not None
    assert (update.update_id, update.chat_id, update.user_id, update.kind, update.text) == (
        "press:1.2.abc", f"{GENERAL}:1700000002.5", FRIEND, "button", "a:1:x")
    assert update.payload["channel"] == GENERAL and update.payload["thread_ts"] == (
        "1700000002.5")
    in_dm = parse_interaction("bot", press("d:1:x", channel=DM))
    assert in_dm is not None and in_dm.chat_id == DM
    for hostile in ({"type": "view_submission"}, {"type": "block_actions"},
                    press(""), press("a", user="nobody!"), press("a") | {"actions": ["x"]},
                    press("a") | {"channel": "x", "container": {}},
                    press("a") | {"trigger_id": None, "actions": [{"value": "a"}]}):
        assert parse_interaction("bot", hostile) is None, hostile


def test_chat_ids_and_sort_keys() -> None:
    assert split_chat(DM) == (DM, None)
    assert split_chat(f"{GENERAL}:1700000002.5") == (GENERAL, "1700000002.5")
    assert sort_key("1700000002.000100") < sort_key("1700000002.1") < sort_key("1700000003.0")
    assert sort_key(None) == sort_key("x") == 0


def test_markdown_becomes_mrkdwn_and_text_cannot_mention_anyone() -> None:
    assert to_mrkdwn("# Plan\n**bold**, *it* and ~~gone~~: [site](https://x.test/?a=1&b=2)"
                     ) == "*Plan*\n*bold*, _it_ and ~gone~: <https://x.test/?a=1&amp;b=2|site>"
    assert to_mrkdwn("- one\n* two") == "\u2022 one\n\u2022 two"
    assert to_mrkdwn("```python\nif a < b: **x**\n```") == "```\nif a &lt; b: **x**\n```"
    assert to_mrkdwn("`<b>` and <!channel> <@U123> & 2 * 3 * 4") == (
        "`&lt;b&gt;` and &lt;!channel&gt; &lt;@U123&gt; &amp; 2 * 3 * 4")
    assert unescape(to_mrkdwn("a < b & c > d")) == "a < b & c > d"


def test_settings_name_what_each_mode_needs() -> None:
    channel = SlackChannel()
    events = {"bot_token_env": "BOT", "signing_secret_env": "SIGNING"}
    socket = {"bot_token_env": "BOT", "mode": "socket", "app_token_env": "APP",
              "allow_from_env": "ALLOWED"}
    assert channel.required_env_for(events) == ["BOT", "SIGNING"]
    assert channel.required_env_for(socket) == ["BOT", "APP", "ALLOWED"]
    assert channel.check_settings("bot", events) == []
    assert channel.check_settings("bot", socket) == []
    [(field, message)] = channel.check_settings("bot", {"bot_token_env": "BOT"})
    assert field == "signing_secret_env" and "mode: socket" in message
    [(field, _message)] = channel.check_settings("bot", {"bot_token_env": "BOT",
                                                         "mode": "socket"})
    assert field == "app_token_env"
    [(field, _message)] = channel.check_settings("bot", events | {"pairing": False})
    assert field == "pairing"  # the base's rule: nobody could talk to the agent
    properties = channel.settings_schema["properties"]
    assert {"allow_from", "pairing", "when_busy", "bot_token_env", "signing_secret_env",
            "mode", "app_token_env", "api_url"} <= set(properties)
    assert channel.max_message_chars <= 4000 and channel.supports_buttons


def test_the_app_manifest_asks_for_what_the_channel_uses_and_the_docs_show_it() -> None:
    text = (PLUGIN / "slack-manifest.yaml").read_text()
    manifest = yaml.safe_load(text)
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert {"chat:write", "im:history", "im:read", "app_mentions:read", "channels:history",
            "groups:history"} <= scopes
    events = manifest["settings"]["event_subscriptions"]
    assert {"app_mention", "message.im", "message.channels"} <= set(events["bot_events"])
    assert events["request_url"].endswith("/channels/slack/AGENT/events")
    interactivity = manifest["settings"]["interactivity"]
    assert interactivity["is_enabled"] is True
    assert interactivity["request_url"].endswith("/channels/slack/AGENT/interactivity")
    assert manifest["features"]["app_home"]["messages_tab_enabled"] is True
    assert manifest["settings"]["socket_mode_enabled"] is False
    docs = (PLUGIN.parents[1] / "docs" / "channels" / "slack.md").read_text()
    assert text.strip() in docs  # the page shows the file as it is


async def test_socket_mode_envelopes_carry_events_and_presses_alike() -> None:
    channel = SlackChannel()
    bot = ChatBot(agent="bot", settings={"bot_token_env": "BOT", "mode": "socket"},
                  state={"threads": {}, "bot_user": BOT_USER})
    events = {"envelope_id": "e1", "type": "events_api", "payload": dm("hi", "1.5")}
    interactive = {"envelope_id": "e2", "type": "interactive",
                   "payload": press("a:1:x", trigger="9.9.z")}
    update = await channel._envelope_update(bot, events)
    assert update is not None and (update.kind, update.text, update.chat_id) == (
        "message", "hi", DM)
    update = await channel._envelope_update(bot, interactive)
    assert update is not None and (update.kind, update.text, update.update_id) == (
        "button", "a:1:x", "press:9.9.z")
    for other in ({"envelope_id": "e3", "type": "slash_commands", "payload": {"x": 1}},
                  {"envelope_id": "e4", "type": "events_api", "payload": "x"},
                  {"envelope_id": "e5", "type": "events_api",
                   "payload": {"type": "app_rate_limited"}}):
        assert await channel._envelope_update(bot, other) is None
