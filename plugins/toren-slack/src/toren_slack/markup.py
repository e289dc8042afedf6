"""Markdown as the model writes it -> Slack's mrkdwn, and Slack's escaped text back to plain.

Slack renders ``*bold*``, ``_italic_``, ``~strike~``, ``<url|text>`` links and code spans and
blocks; ``&``, ``<`` and ``>`` must be escaped everywhere, which also keeps a reply from
mentioning ``<!channel>`` or a user it was told to.
"""

from __future__ import annotations

import re

_CODE = re.compile(r"(```.*?```|`[^`\n]+`)", re.DOTALL)
_FENCE_LANGUAGE = re.compile(r"^```[A-Za-z0-9_+-]*\n")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$", re.MULTILINE)
_BULLET = re.compile(r"^(\s*)[*+-]\s+", re.MULTILINE)
_BOLD = re.compile(r"\*\*(.+?)\*\*|__(.+?)__", re.DOTALL)
_ITALIC = re.compile(r"(?<![*\w])\*(?![\s*])(.+?)(?<![\s*])\*(?![*\w])")
_STRIKE = re.compile(r"~~(.+?)~~")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^\s)]+)\)")
#: Stands for a bold span's ``*`` while italics are rewritten (never in Slack's text).
_MARK = "\x00"


def escape(text: str) -> str:
    """``&``, ``<`` and ``>`` as Slack wants them in any text it renders."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape(text: str) -> str:
    """Text of a Slack message as the person typed it (the reverse of ``escape``)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def to_mrkdwn(text: str) -> str:
    """Headings and bold become ``*bold*``, italics ``_italic_``, ``~~strike~~`` ``~strike~``,
    ``[text](url)`` ``<url|text>``, list markers bullets; code spans and blocks are kept as
    they are (a fence's language tag dropped: Slack would show it as text)."""
    parts = _CODE.split(text)
    for index, part in enumerate(parts):
        if index % 2:  # code: only escaped
            parts[index] = escape(_FENCE_LANGUAGE.sub("```\n", part))
            continue
        part = escape(part.replace(_MARK, ""))
        part = _HEADING.sub(lambda m: f"{_MARK}{m.group(1)}{_MARK}", part)
        part = _BULLET.sub(lambda m: f"{m.group(1)}\u2022 ", part)
        part = _BOLD.sub(lambda m: f"{_MARK}{m.group(1) or m.group(2)}{_MARK}", part)
        part = _ITALIC.sub(r"_\1_", part)
        part = _STRIKE.sub(r"~\1~", part)
        part = _LINK.sub(lambda m: f"<{m.group(2)}|{m.group(1).replace('|', '/')}>", part)
        parts[index] = part.replace(_MARK, "*")
    return "".join(parts)
