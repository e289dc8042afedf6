"""The streams of a run share the reads they make at the same time, and never a read that
began before the notice that woke them (it could miss the event announced)."""

from __future__ import annotations

import asyncio

import pytest

from toren.server.streams import SharedReads


async def settle() -> None:
    """Let every task that can run, run (a shared read starts in a task of its own)."""
    for _ in range(5):
        await asyncio.sleep(0)


class Source:
    """A read that takes a while and counts how often it ran; each read returns the value the
    source had when the read began."""

    def __init__(self) -> None:
        self.value = 0
        self.reads = 0
        self.release = asyncio.Event()

    async def fetch(self) -> int:
        self.reads += 1
        seen = self.value
        await self.release.wait()
        return seen


async def test_askers_at_the_same_time_share_one_read() -> None:
    shared, source = SharedReads(), Source()
    askers = [asyncio.create_task(shared.read(("events", "r1"), "r1", source.fetch))
              for _ in range(50)]
    await settle()
    source.release.set()
    assert await asyncio.gather(*askers) == [0] * 50
    assert source.reads == 1


async def test_a_read_begun_before_a_notice_is_not_joined_after_it() -> None:
    shared, source = SharedReads(), Source()
    early = asyncio.create_task(shared.read(("events", "r1"), "r1", source.fetch))
    await settle()
    source.value = 1  # an event is appended, then its notice arrives
    shared.noticed("r1")
    late = asyncio.create_task(shared.read(("events", "r1"), "r1", source.fetch))
    await settle()
    source.release.set()
    assert await early == 0
    assert await late == 1  # its own read: it sees the event it was woken for
    assert source.reads == 2


async def test_other_runs_notices_do_not_split_a_runs_readers() -> None:
    shared, source = SharedReads(), Source()
    first = asyncio.create_task(shared.read(("events", "r1"), "r1", source.fetch))
    await settle()
    shared.noticed("r2")
    second = asyncio.create_task(shared.read(("events", "r1"), "r1", source.fetch))
    await settle()
    source.release.set()
    assert await asyncio.gather(first, second) == [0, 0]
    assert source.reads == 1


async def test_an_asker_going_away_does_not_cancel_the_read_for_the_others() -> None:
    shared, source = SharedReads(), Source()
    leaving = asyncio.create_task(shared.read(("run", "r1"), "r1", source.fetch))
    staying = asyncio.create_task(shared.read(("run", "r1"), "r1", source.fetch))
    await settle()
    leaving.cancel()
    await settle()
    source.release.set()
    assert await staying == 0
    with pytest.raises(asyncio.CancelledError):
        await leaving


async def test_a_failed_read_fails_its_askers_and_the_next_read_tries_again() -> None:
    shared = SharedReads()
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        if calls == 1:
            raise ConnectionError("the database went away")
        return "ok"

    askers = [asyncio.create_task(shared.read(("run", "r1"), "r1", flaky)) for _ in range(3)]
    results = await asyncio.gather(*askers, return_exceptions=True)
    assert all(isinstance(result, ConnectionError) for result in results)
    assert await shared.read(("run", "r1"), "r1", flaky) == "ok"
    assert calls == 2
