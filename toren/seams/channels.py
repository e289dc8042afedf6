"""Channels: long-lived connections between people and agents (terminals, chat apps, HTTP)."""

from __future__ import annotations

import abc
from typing import Any


class Channel(abc.ABC):
    """A channel registered through the ``register_channels`` hook.

    ``toren dev`` calls ``start`` once after the runtime is up and ``stop`` once on shutdown.
    ``start`` must return promptly: run long-lived loops as background tasks.
    """

    #: The name agents use in ``channels:`` and ``toren plugins`` shows.
    name: str
    #: One line shown by ``toren plugins``.
    description: str = ""
    #: Environment variables the channel needs (checked at startup when an agent enables it).
    required_env: tuple[str, ...] = ()

    @abc.abstractmethod
    async def start(self, runtime: Any) -> None:
        """Begin serving; ``runtime`` is the host API (``toren.Runtime``) to start runs with."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop serving and release every resource ``start`` took."""

    async def notify(self, session_id: str, agent: str, text: str) -> None:
        """Push ``text`` to the person on the other end of session ``session_id``, if this
        channel owns that session; otherwise do nothing (the default).

        Called by the worker in the same process (``toren dev``) right after it committed a
        notice to the session's transcript, such as a background run's result
        (docs/guides/background-runs.md). The transcript is the record: a channel that misses a
        notice (another process recorded it, or this one crashed first) finds it there.
        """
        return None
