"""The ``telegram`` entry point: registers the Telegram channel."""

from __future__ import annotations

from collections.abc import Callable

import toren
from toren.plugin import Channel

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.0,<2"


@toren.hookimpl
def register_channels(register: Callable[[Channel], None]) -> None:
    # imported here, not at the top: every CLI command loads this module
    from toren_telegram.channel import TelegramChannel

    register(TelegramChannel())
