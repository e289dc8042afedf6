"""toren-whatsapp: the ``whatsapp`` channel (WhatsApp Cloud API webhook and Graph API sends)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toren_whatsapp.channel import WhatsAppChannel

__all__ = ["WhatsAppChannel"]


def __getattr__(name: str) -> Any:
    # imported when first used: the entry point (plugin.py) is imported by every CLI command,
    # the channel (aiohttp, the chat host) only by a process that serves it
    if name == "WhatsAppChannel":
        from toren_whatsapp.channel import WhatsAppChannel

        return WhatsAppChannel
    raise AttributeError(f"module 'toren_whatsapp' has no attribute {name!r}")
