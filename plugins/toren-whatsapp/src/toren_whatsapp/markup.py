"""Markdown as the model writes it -> WhatsApp's own formatting (*bold*, _italic_, ~strike~)."""

from __future__ import annotations

import re

_BOLD = re.compile(r"\*\*(.+?)\*\*|__(.+?)__", re.DOTALL)
_STRIKE = re.compile(r"~~(.+?)~~")
_HEADING = re.compile(r"^#{1,6}\s+(.+)$", re.MULTILINE)
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^\s)]+)\)")


def to_whatsapp(text: str) -> str:
    """Bold, strike-through, headings and links rewritten; code blocks (```) are kept, since
    WhatsApp renders them as they are."""
    parts = text.split("```")
    for index in range(0, len(parts), 2):  # outside code blocks only
        part = _HEADING.sub(r"*\1*", parts[index])
        part = _BOLD.sub(lambda m: f"*{m.group(1) or m.group(2)}*", part)
        part = _STRIKE.sub(r"~\1~", part)
        parts[index] = _LINK.sub(r"\1 (\2)", part)
    return "```".join(parts)
