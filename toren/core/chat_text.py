"""Text for chat apps: replies split at a platform's length limit on sensible boundaries."""

from __future__ import annotations

import re

_FENCE = "```"


def storable_text(text: str) -> str:
    """``text`` as Postgres can store it: NUL and unpaired surrogates (which a platform's
    JSON may carry) become U+FFFD, so one odd message cannot jam a chat's inbox."""
    return "".join("\ufffd" if char == "\x00" or "\ud800" <= char <= "\udfff" else char
                   for char in text) if _needs_cleaning(text) else text


def _needs_cleaning(text: str) -> bool:
    if "\x00" in text:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def split_text(text: str, limit: int) -> list[str]:
    """``text`` cut into parts of at most ``limit`` characters, none empty.

    Each cut is at the last paragraph break before the limit, else the last line break, else
    the last sentence end, else the last space, else (one unbroken word) at the limit. Parts
    are stripped of the whitespace at the cut. A code block (three backticks) cut in two is
    closed at the end of one part and reopened at the start of the next, so both render.
    """
    if limit < 20:
        raise ValueError("a chat message limit below 20 characters cannot be split sensibly")
    parts: list[str] = []
    rest = text.strip()
    reopen = ""
    while rest:
        rest = reopen + rest
        if len(rest) <= limit:
            parts.append(rest)
            break
        room = limit - len(_FENCE) - 1  # leave room to close an open code block
        window = rest[:room]
        cut = _best_cut(window)
        part = rest[:cut].rstrip()
        open_fence = part.count(_FENCE) % 2 == 1
        reopen = ""
        if open_fence:
            line = _opening_fence_line(part)
            part += "\n" + _FENCE
            reopen = line + "\n"
        parts.append(part)
        rest = rest[cut:].strip()
    return [part for part in parts if part.strip()]


def _best_cut(window: str) -> int:
    floor = len(window) // 2  # never cut so early that parts become tiny
    for pattern in ("\n\n", "\n"):
        at = window.rfind(pattern)
        if at >= floor:
            return at + len(pattern)
    sentence = [match.end() for match in re.finditer(r"[.!?](\s)", window)
                if match.end() >= floor]
    if sentence:
        return sentence[-1]
    at = window.rfind(" ")
    if at >= floor:
        return at + 1
    return len(window)


def _opening_fence_line(part: str) -> str:
    """The last line that opened a code block in ``part`` (with its language, if any)."""
    at = part.rfind(_FENCE)
    end = part.find("\n", at)
    return part[at:end] if end != -1 else _FENCE
