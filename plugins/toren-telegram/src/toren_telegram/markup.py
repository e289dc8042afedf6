"""Markdown as the model writes it -> the HTML subset Telegram renders (parse_mode=HTML)."""

from __future__ import annotations

import html
import re

_BLOCK = re.compile(r"```([A-Za-z0-9_+-]*)\n?(.*?)```", re.DOTALL)
_INLINE = re.compile(r"`([^`\n]+)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*|__(.+?)__", re.DOTALL)
_ITALIC = re.compile(r"(?<![\w*])\*(?!\s)([^*\n]+?)\*(?!\w)")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^\s)]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+)$", re.MULTILINE)


def to_telegram_html(text: str) -> str:
    """Code blocks, inline code, bold, italics, links and headings as Telegram HTML; every
    other character escaped, so no text can inject markup."""
    pieces: list[str] = []
    last = 0
    for match in _BLOCK.finditer(text):
        pieces.append(_inline(text[last:match.start()]))
        language, code = match.group(1), match.group(2)
        cls = f' class="language-{language}"' if language else ""
        pieces.append(f"<pre><code{cls}>{html.escape(code.rstrip(), quote=False)}</code></pre>")
        last = match.end()
    pieces.append(_inline(text[last:]))
    return "".join(pieces)


def _inline(text: str) -> str:
    codes: list[str] = []

    def keep_code(match: re.Match[str]) -> str:
        codes.append(f"<code>{html.escape(match.group(1), quote=False)}</code>")
        return f"\x00{len(codes) - 1}\x00"

    text = _INLINE.sub(keep_code, text)
    text = html.escape(text, quote=False)
    # the text is escaped already (quotes aside): the URL only needs its quotes escaped
    text = _LINK.sub(lambda m: f'<a href="{m.group(2).replace(chr(34), "&quot;")}">'
                               f'{m.group(1)}</a>', text)
    text = _HEADING.sub(r"<b>\1</b>", text)
    text = _BOLD.sub(lambda m: f"<b>{m.group(1) or m.group(2)}</b>", text)
    text = _ITALIC.sub(r"<i>\1</i>", text)
    return re.sub("\x00(\\d+)\x00", lambda m: codes[int(m.group(1))], text)
