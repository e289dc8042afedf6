"""A loop that waits on LISTEN/NOTIFY wake-ups (the outbox relay, the webhook dispatcher) stops
when it is cancelled, even when a notification arrives at that very moment: on Python 3.11,
``asyncio.wait_for`` swallowed such a cancellation, and ``Runtime.stop`` then waited forever
for the loop (a ``toren dev`` that did not exit on SIGTERM)."""

from __future__ import annotations

import asyncio

import pytest
from toren_postgres.notifications import QueueNotifications


async def test_a_waiting_loop_stops_when_cancelled_as_a_notification_arrives() -> None:
    for _ in range(20):
        notifications = QueueNotifications(lambda: "postgresql://unused", "test-listener")
        rounds = 0

        async def loop(notifications: QueueNotifications = notifications) -> None:
            nonlocal rounds
            while True:
                await notifications.wait(30)
                rounds += 1

        task = asyncio.create_task(loop())
        await asyncio.sleep(0)  # the loop waits now
        notifications._wakeup.set()  # what a notification (or a reconnect) does...
        task.cancel()  # ...in the same turn of the event loop as the stop
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        assert rounds == 0  # the loop did not go round again
