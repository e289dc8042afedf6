"""Signals: what a workflow (or a waiting tool) gets from ``ctx.signals``, and the rules a
signal's name and payload follow wherever one is sent or awaited."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from toren.errors import ConfigError

#: A signal's name: what ``SignalName`` in the event catalog allows.
SIGNAL_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")
#: The largest payload a signal may carry, as JSON (bytes of UTF-8).
MAX_SIGNAL_BYTES = 64 * 1024


@dataclass(frozen=True)
class Signal:
    """One signal sent to a run, as ``ctx.signals(name)`` returns it."""

    name: str
    #: The JSON value the sender gave (``--data``, the request body).
    payload: Any
    #: Its number on the run's ``signals`` stream: signals are numbered in the order sent.
    number: int
    #: When it was sent (ISO 8601).
    sent_at: str


def check_signal_name(name: Any) -> str:
    """``name`` if it is a valid signal name, else ``ConfigError`` saying what is allowed."""
    if not isinstance(name, str) or not SIGNAL_NAME.fullmatch(name):
        raise ConfigError(f"invalid signal name {str(name)[:120]!r}: use lowercase letters, "
                          "digits, - and _, starting with a letter (at most 64 characters)")
    return name
