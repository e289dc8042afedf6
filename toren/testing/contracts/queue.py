"""The contract of a queue driver (``toren.seams.queue.Queue``): at-least-once delivery of
messages labelled by agent, hidden while claimed, counted, and dead-lettered past a limit."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import ClassVar

import pytest
import pytest_asyncio

from toren.seams.queue import Queue
from toren.seams.shapes import OutgoingMessage, QueueMessage
from toren.testing.contracts.support import eventually, new_agent_name, new_id

#: A visibility that outlasts any test: a message claimed with it stays hidden.
LONG_S = 60.0


async def opened_queues(construct: Callable[[], Queue]
                        ) -> AsyncIterator[Callable[[], Awaitable[Queue]]]:
    """What a driver's ``make_queue`` fixture may yield: a factory that opens one more queue
    made by ``construct`` at each call, all closed after the test."""
    made: list[Queue] = []

    async def make() -> Queue:
        queue = construct()
        await queue.open()
        made.append(queue)
        return queue

    yield make
    for queue in made:
        await queue.close()


def who(agent: str, worker: str) -> str:
    """Worker ``worker`` of this test (its agent's name makes it unique to the test)."""
    return f"{agent}/{worker}"


@pytest.mark.asyncio
class QueueContract:
    """What every queue driver promises the worker and the outbox relay.

    Override ``make_queue`` in the subclass: ``await make_queue()`` returns an opened queue,
    each call another one on the same queue service (another worker's process), all closed
    at teardown. Each worker id is used with one queue object, as a worker uses its own.
    Each test sends to agents of its own and names its workers after them, so one service
    may serve the whole class.

    ``short_visibility_s``: the shortest visibility timeout the driver honours (SQS counts in
    whole seconds: 1); tests wait a little longer than this for a message to come back.
    ``notifies``: whether ``wait`` returns early when a message arrives (a queue that cannot
    just sleeps ``timeout_s``, which the interface allows).
    ``counts``: whether ``depth`` counts messages; a queue that cannot answers ``None``, as
    the interface allows, and the contract checks that it does.
    """

    short_visibility_s: ClassVar[float] = 0.3
    notifies: ClassVar[bool] = True
    counts: ClassVar[bool] = True

    @pytest.fixture
    def make_queue(self) -> Callable[[], Awaitable[Queue]]:
        pytest.fail(f"{type(self).__name__} must override the fixture `make_queue`: a "
                    "factory of opened queues of your driver (see toren.testing.contracts)")

    @pytest_asyncio.fixture
    async def queue(self, make_queue: Callable[[], Awaitable[Queue]]) -> Queue:
        """Worker ``w1``'s queue."""
        return await make_queue()

    @pytest_asyncio.fixture
    async def other(self, make_queue: Callable[[], Awaitable[Queue]]) -> Queue:
        """Worker ``w2``'s queue."""
        return await make_queue()

    @pytest_asyncio.fixture
    async def agent(self) -> str:
        return new_agent_name()

    async def send(self, queue: Queue, agent: str, count: int = 1, *, kind: str = "task",
                   delay_s: float = 0.0) -> list[str]:
        """``count`` messages for ``agent``, each for a run of its own; the runs' ids."""
        runs = [new_id() for _ in range(count)]
        for n, run_id in enumerate(runs):
            await queue.enqueue(agent, run_id, OutgoingMessage(kind, {"n": n, "key": run_id},
                                                               delay_s))
        return runs

    async def claim(self, queue: Queue, agent: str, worker: str = "w1", limit: int = 10,
                    visibility_s: float = LONG_S, max_deliveries: int = 5
                    ) -> list[QueueMessage]:
        claimed, dead = await queue.claim([agent], who(agent, worker), limit, visibility_s,
                                          max_deliveries)
        assert dead == []
        return claimed

    async def back(self, queue: Queue, agent: str, worker: str = "w2",
                   max_deliveries: int = 5) -> list[QueueMessage]:
        """What ``worker`` claims once a visibility timeout has run out."""
        async def claimed() -> list[QueueMessage]:
            return await self.claim(queue, agent, worker, max_deliveries=max_deliveries)

        return await eventually(claimed, "a message coming back to the queue",
                                timeout_s=self.short_visibility_s + 5)

    async def pause(self) -> None:
        """Long enough for a short visibility timeout to run out."""
        await asyncio.sleep(self.short_visibility_s + 0.5)

    async def test_a_message_goes_to_its_agent_s_workers_and_is_hidden_while_claimed(
            self, queue: Queue, other: Queue, agent: str) -> None:
        elsewhere = new_agent_name()
        [run_id] = await self.send(queue, agent)
        await self.send(queue, elsewhere)
        [message] = await self.claim(queue, agent)
        assert (message.agent, message.run_id, message.kind, message.payload,
                message.attempts) == (agent, run_id, "task", {"n": 0, "key": run_id}, 1)
        assert await other.claim([agent], who(agent, "w2"), 10, LONG_S, 5) == ([], [])
        assert [m.agent for m in await self.claim(other, elsewhere, "w2")] == [elsewhere]

    async def test_an_acknowledged_message_is_gone(self, queue: Queue, other: Queue,
                                                   agent: str) -> None:
        await self.send(queue, agent)
        [message] = await self.claim(queue, agent, visibility_s=self.short_visibility_s)
        await queue.ack(message, who(agent, "w1"))
        await self.pause()
        assert await other.claim([agent], who(agent, "w2"), 10, LONG_S, 5) == ([], [])

    async def test_concurrent_claims_take_each_message_once(
            self, make_queue: Callable[[], Awaitable[Queue]], agent: str) -> None:
        workers = [await make_queue() for _ in range(4)]
        runs = await self.send(workers[0], agent, 12)
        batches = await asyncio.gather(*(self.claim(queue, agent, f"w{n}", limit=2)
                                         for n, queue in enumerate(workers)
                                         for _ in range(2)))
        counted = Counter(m.run_id for batch in batches for m in batch)
        while True:  # a claim may return fewer than it could (SQS samples its servers)
            more = await self.claim(workers[0], agent, "w0")
            if not more:
                break
            counted.update(m.run_id for m in more)
        assert set(counted) == set(runs)
        assert set(counted.values()) == {1}, counted

    async def test_a_message_not_acknowledged_in_time_comes_back_and_counts(
            self, queue: Queue, other: Queue, agent: str) -> None:
        [run_id] = await self.send(queue, agent)
        [first] = await self.claim(queue, agent, visibility_s=self.short_visibility_s)
        [again] = await self.back(other, agent)
        assert (again.run_id, again.payload, again.attempts) == (run_id, first.payload, 2)

    async def test_an_ack_by_a_worker_that_no_longer_holds_it_changes_nothing(
            self, queue: Queue, other: Queue, agent: str) -> None:
        await self.send(queue, agent)
        [first] = await self.claim(queue, agent, visibility_s=self.short_visibility_s)
        [again] = await self.back(other, agent)
        await queue.ack(first, who(agent, "w1"))  # w1 was too slow: w2 holds it now
        await other.renew(who(agent, "w2"), [again.id], self.short_visibility_s)
        [third] = await self.back(queue, agent, "w1")  # still there: w2's to end
        assert third.attempts == 3

    async def test_renewal_keeps_a_held_message_hidden(self, queue: Queue, other: Queue,
                                                       agent: str) -> None:
        await self.send(queue, agent)
        [message] = await self.claim(queue, agent, visibility_s=self.short_visibility_s)
        await queue.renew(who(agent, "w1"), [message.id], LONG_S)
        await queue.renew(who(agent, "w1"), [], LONG_S)
        await self.pause()
        assert await other.claim([agent], who(agent, "w2"), 10, LONG_S, 5) == ([], [])

    async def test_a_deferred_message_comes_back_after_its_delay_without_counting(
            self, queue: Queue, other: Queue, agent: str) -> None:
        [run_id] = await self.send(queue, agent)
        [message] = await self.claim(queue, agent)
        await queue.defer(message, who(agent, "w1"), self.short_visibility_s)
        [again] = await self.back(other, agent)
        assert (again.run_id, again.attempts) == (run_id, 1)

    async def test_return_unknown_hands_back_all_but_what_is_held_without_counting(
            self, queue: Queue, other: Queue, agent: str) -> None:
        runs = await self.send(queue, agent, 3)
        claimed = await self.claim(queue, agent)
        assert sorted(m.run_id or "" for m in claimed) == sorted(runs)
        held = claimed[0]
        assert await queue.return_unknown(who(agent, "w1"), [held.id]) == 2
        returned = await self.back(other, agent)
        assert sorted(m.run_id or "" for m in returned) == sorted(
            m.run_id or "" for m in claimed[1:])
        assert {m.attempts for m in returned} == {1}
        assert await queue.return_unknown(who(agent, "w1"), [held.id]) == 0
        assert await other.claim([agent], who(agent, "w2"), 10, LONG_S, 5) == ([], [])  # held stays

    async def test_a_message_delivered_too_often_is_dead_lettered_once(
            self, queue: Queue, other: Queue, agent: str) -> None:
        [run_id] = await self.send(queue, agent)
        await self.claim(queue, agent, visibility_s=self.short_visibility_s, max_deliveries=2)

        async def second() -> list[QueueMessage]:
            claimed, dead = await queue.claim([agent], who(agent, "w1"), 10,
                                              self.short_visibility_s, 2)
            assert dead == []
            return claimed

        [delivered] = await eventually(second, "the second delivery")
        assert delivered.attempts == 2

        async def buried() -> list[QueueMessage]:
            claimed, dead = await other.claim([agent], who(agent, "w2"), 10, LONG_S, 2)
            assert claimed == []
            return dead

        [dead] = await eventually(buried, "the message coming back as a dead letter")
        assert (dead.agent, dead.run_id, dead.kind) == (agent, run_id, "task")
        assert dead.attempts >= 2
        await self.pause()
        assert await other.claim([agent], who(agent, "w2"), 10, LONG_S, 2) == ([], [])

    async def test_a_delayed_message_is_claimable_once_due(
            self, queue: Queue, agent: str) -> None:
        [run_id] = await self.send(queue, agent, delay_s=self.short_visibility_s)
        assert await queue.claim([agent], who(agent, "w1"), 10, LONG_S, 5) == ([], [])
        [message] = await self.back(queue, agent, "w1")
        assert (message.run_id, message.attempts) == (run_id, 1)

    async def test_wait_returns_when_a_message_arrives_or_after_its_timeout(
            self, queue: Queue, other: Queue, agent: str) -> None:
        await queue.claim([agent], who(agent, "w1"), 10, LONG_S, 5)  # a worker's first, empty claim
        await asyncio.wait_for(queue.wait(0.2), 15)
        if not self.notifies:
            return
        started = time.monotonic()
        waiting = asyncio.ensure_future(queue.wait(20))
        await asyncio.sleep(0.2)
        await self.send(other, agent)
        await asyncio.wait_for(waiting, 30)
        assert time.monotonic() - started < 15, "wait did not return when a message arrived"

    async def test_depth_counts_ready_in_flight_and_delayed_messages(
            self, queue: Queue, agent: str) -> None:
        await self.send(queue, agent, 3)
        await self.send(queue, agent, delay_s=LONG_S)
        await self.claim(queue, agent, limit=1)
        depth = await queue.depth([agent])
        if not self.counts:
            assert depth is None, "a queue declared not to count must answer depth None"
            return
        assert depth is not None, "depth is None: set counts = False if the queue cannot count"
        counted = {key: depth[agent][key] for key in ("ready", "in_flight", "delayed")}
        assert counted == {"ready": 2, "in_flight": 1, "delayed": 1}
        # a queue with flow control may add the ready ones held back by a concurrency limit
        assert set(depth[agent]) <= {"ready", "in_flight", "delayed", "waiting_concurrency"}
