"""Chat channels' shared machinery: elected poller, exactly-once turns and replies, pairing."""

from toren.host.chat.channel import COMMON_SETTINGS, ChatBot, ChatChannel

__all__ = ["COMMON_SETTINGS", "ChatBot", "ChatChannel"]
