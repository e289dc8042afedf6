"""The ``testplugin_dup`` entry point: a second ``echo_upper``, only on demand.

Registers nothing unless ``TOREN_TESTPLUGIN_DUPLICATE=1``, so an ordinary environment with
this distribution installed still loads.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import toren


def echo_upper(text: str) -> str:
    """A second tool with the same name as testplugin's."""
    return text.upper()


@toren.hookimpl
def register_tools(register: Callable[..., None]) -> None:
    if os.environ.get("TOREN_TESTPLUGIN_DUPLICATE") == "1":
        register(echo_upper)
