"""toren-telegram: the ``telegram`` channel (Bot API long polling, optional webhook)."""

from toren_telegram.channel import TelegramChannel

__all__ = ["TelegramChannel"]
