"""The tests' memory queue (``tests/memory_queue.py``, a stand-in for a queue on another
service in the outbox relay's tests) keeps the queue contract too, so what those tests prove
holds for a queue that behaves as the interface says."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest_asyncio

from tests.memory_queue import MemoryQueue, reset_broker
from toren.config import Settings
from toren.seams.queue import Queue
from toren.testing.contracts import QueueContract
from toren.testing.contracts.queue import opened_queues


class TestMemoryQueue(QueueContract):
    counts = False  # a stand-in for a service that keeps no counts: depth is None

    @pytest_asyncio.fixture
    async def make_queue(self) -> AsyncIterator[Callable[[], Awaitable[Queue]]]:
        reset_broker()
        store: Any = None  # the memory queue never touches the store
        async for make in opened_queues(lambda: MemoryQueue(Settings(), store)):
            yield make
