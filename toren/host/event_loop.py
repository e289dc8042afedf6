"""The event loop of ``toren worker``, ``toren serve`` and ``toren dev``: uvloop where it is
installed, else asyncio's own; ``TOREN_EVENT_LOOP=asyncio|uvloop`` chooses."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from toren.errors import ConfigError

T = TypeVar("T")

#: The values ``TOREN_EVENT_LOOP`` takes (``auto``, the default: uvloop if installed).
EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def chosen_event_loop(env: Mapping[str, str] | None = None) -> str:
    """``"uvloop"`` or ``"asyncio"``: what ``TOREN_EVENT_LOOP`` asks for (default ``auto``:
    uvloop when it is installed; it is not on Windows).

    uvloop runs asyncio's loop in C: figure 2 of bench/ counts about 40% fewer Python
    function calls per durable operation on it (bench/README.md, issue 41).

    Raises:
        ConfigError: an unknown value, or ``uvloop`` asked for and not installed.
    """
    value = (os.environ if env is None else env).get("TOREN_EVENT_LOOP", "").strip().lower()
    value = value or "auto"
    if value not in EVENT_LOOPS:
        raise ConfigError(f"TOREN_EVENT_LOOP={value!r} is not one of "
                          f"{', '.join(EVENT_LOOPS)}")
    installed = importlib.util.find_spec("uvloop") is not None
    if value == "uvloop" and not installed:
        raise ConfigError("TOREN_EVENT_LOOP=uvloop, but uvloop is not installed: "
                          "pip install uvloop (Linux and macOS), or set "
                          "TOREN_EVENT_LOOP=asyncio")
    if value == "auto":
        return "uvloop" if installed else "asyncio"
    return value


def loop_factory(env: Mapping[str, str] | None = None
                 ) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes the chosen loop (``chosen_event_loop``)."""
    if chosen_event_loop(env) == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def run(main: Coroutine[Any, Any, T], env: Mapping[str, str] | None = None) -> T:
    """``asyncio.run(main)`` on the chosen loop. The loop is made for this call only (no
    process-wide event loop policy is set), so a caller that runs other loops afterwards, as
    a test process does, gets asyncio's."""
    try:
        factory = loop_factory(env)
    except ConfigError:
        main.close()  # never started: no "never awaited" warning beside the error
        raise
    if factory is asyncio.new_event_loop:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
