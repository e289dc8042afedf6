"""The ``telegram`` entry point: registers the Telegram channel."""

from __future__ import annotations

from collections.abc import Callable

import toren
from toren.seams.channels import Channel
from toren_telegram.channel import TelegramChannel


@toren.hookimpl
def register_channels(register: Callable[[Channel], None]) -> None:
    register(TelegramChannel())
