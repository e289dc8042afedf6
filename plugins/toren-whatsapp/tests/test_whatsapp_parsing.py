"""Signatures, notifications and formatting of the whatsapp channel (pure functions)."""

from __future__ import annotations

from toren_whatsapp.channel import parse_notification
from toren_whatsapp.markup import to_whatsapp
from toren_whatsapp.signature import sign, signature_valid


def test_the_signature_is_an_hmac_of_the_raw_body_with_the_app_secret() -> None:
    body = b'{"object":"whatsapp_business_account"}'
    header = sign(body, "secret")
    assert header.startswith("sha256=") and len(header) == 7 + 64
    assert signature_valid(body, header, "secret")
    assert not signature_valid(body + b" ", header, "secret")
    assert not signature_valid(body, header, "other")
    assert not signature_valid(body, header.upper(), "secret")
    assert not signature_valid(body, None, "secret")
    assert not signature_valid(body, header, "")  # no secret configured: nothing passes
    assert not signature_valid(body, "sha256=\u00e9" * 3, "secret")


def test_a_notification_yields_texts_and_button_replies_for_this_number_only() -> None:
    value = {"metadata": {"phone_number_id": "42"},
             "contacts": [{"wa_id": "1555", "profile": {"name": "Ann"}}],
             "messages": [
                 {"from": "1555", "id": "wamid.1", "timestamp": "17", "type": "text",
                  "text": {"body": "hello"}},
                 {"from": "1555", "id": "wamid.2", "timestamp": "18", "type": "interactive",
                  "interactive": {"type": "button_reply",
                                  "button_reply": {"id": "a:9", "title": "Approve"}}},
                 {"from": "1555", "id": "wamid.3", "timestamp": "19", "type": "image"},
                 {"from": "1555", "type": "text", "text": {"body": "no id"}},
                 "garbage"]}
    body = {"object": "whatsapp_business_account", "entry": [
        {"changes": [{"value": value}, {"value": value | {"metadata": {
            "phone_number_id": "other"}}}, "garbage"]}, "garbage"]}
    updates = parse_notification("bot", "42", body)
    assert [(u.update_id, u.kind, u.text, u.sort_key, u.payload["name"]) for u in updates] == [
        ("wamid.1", "message", "hello", 17, "Ann"), ("wamid.2", "button", "a:9", 18, "Ann")]
    for hostile in (None, [], {"object": "page"}, {"object": "whatsapp_business_account",
                                                   "entry": "x"}):
        try:
            assert parse_notification("bot", "42", hostile) == []
        except (AttributeError, TypeError) as exc:  # a crash is a 500 to Meta: a bug
            raise AssertionError(f"{hostile!r} crashed the parser") from exc


def test_markdown_becomes_whatsapp_formatting_outside_code() -> None:
    assert to_whatsapp("# Plan\n**bold** ~~gone~~ [site](https://x.test)") == (
        "*Plan*\n*bold* ~gone~ site (https://x.test)")
    assert to_whatsapp("```\n**kept**\n```") == "```\n**kept**\n```"
