"""The ``whatsapp`` entry point: registers the WhatsApp channel."""

from __future__ import annotations

from collections.abc import Callable

import toren
from toren.seams.channels import Channel
from toren_whatsapp.channel import WhatsAppChannel


@toren.hookimpl
def register_channels(register: Callable[[Channel], None]) -> None:
    register(WhatsAppChannel())
