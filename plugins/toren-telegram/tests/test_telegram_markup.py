"""Markdown -> Telegram HTML, and Bot API updates -> ChannelUpdate (pure functions)."""

from __future__ import annotations

from toren_telegram.channel import parse_update
from toren_telegram.markup import to_telegram_html


def test_markdown_becomes_telegram_html_and_text_cannot_inject_markup() -> None:
    assert to_telegram_html("**bold** and *it* and `a<b>`") == (
        "<b>bold</b> and <i>it</i> and <code>a&lt;b&gt;</code>")
    assert to_telegram_html("# Title\n[docs](https://x.test/a?b=1&c=2)") == (
        '<b>Title</b>\n<a href="https://x.test/a?b=1&amp;c=2">docs</a>')
    assert to_telegram_html("```python\nif a < b:\n    pass\n```") == (
        '<pre><code class="language-python">if a &lt; b:\n    pass</code></pre>')
    assert to_telegram_html("<script>alert(1)</script> & 2 * 3 * 4") == (
        "&lt;script&gt;alert(1)&lt;/script&gt; &amp; 2 * 3 * 4")


def test_only_private_text_messages_and_button_presses_are_taken() -> None:
    private = {"update_id": 5, "message": {"text": "hi", "chat": {"id": 7, "type": "private"},
                                           "from": {"id": 7, "first_name": "Ann",
                                                    "username": "ann"}}}
    update = parse_update("bot", private)
    assert update is not None
    assert (update.update_id, update.chat_id, update.user_id, update.kind, update.text,
            update.sort_key, update.payload) == ("5", "7", "7", "message", "hi", 5,
                                                 {"name": "Ann (@ann)"})
    group = {"update_id": 6, "message": {"text": "hi", "chat": {"id": -1, "type": "group"},
                                         "from": {"id": 7}}}
    sticker = {"update_id": 7, "message": {"sticker": {}, "chat": {"id": 7, "type": "private"},
                                           "from": {"id": 7}}}
    edited = {"update_id": 8, "edited_message": {"text": "x"}}
    hostile = {"update_id": 9, "message": {"text": ["not", "text"], "chat": "x", "from": 3}}
    assert [parse_update("bot", item) for item in (group, sticker, edited, hostile)] == [
        None, None, None, None]
    press = parse_update("bot", {"update_id": 10, "callback_query": {
        "id": "q1", "data": "a:123", "from": {"id": 7},
        "message": {"chat": {"id": 7, "type": "private"}}}})
    assert press is not None and (press.kind, press.text, press.payload) == (
        "button", "a:123", {"callback_id": "q1"})
