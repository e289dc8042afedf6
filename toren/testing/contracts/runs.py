"""Contracts of the run log (``RunLog``), its reads (``RunReader``) and forks (``ForkStore``).

They look at what a write did through the reader and the outbox (``claim_outbox``), never
through the driver's own tables.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from toren.core import events as ev
from toren.core.costs import ModelCosts, bucket_start
from toren.core.events import NewEvent
from toren.core.fold import fold_task
from toren.core.receipts import run_totals
from toren.core.runs import ChildLink, RunSearch, RunTotals, RunUpdate
from toren.errors import LeaseLost, RunCancelled
from toren.seams.shapes import Lease, LeaseBusy, OutgoingMessage, QueueMessage
from toren.seams.store import Store
from toren.testing.contracts.base import StoreFixtures
from toren.testing.contracts.support import (
    call_completed,
    call_started,
    eventually,
    first_events,
    first_message,
    kinds,
    new_id,
    started,
    task_finished,
)

MAIN = "task:main"


async def leased(store: Store, run_id: str, holder: str = "w1", ttl_s: float = 60.0,
                 stream: str = MAIN) -> Lease:
    lease = await store.acquire_lease(run_id, stream, holder, ttl_s)
    assert lease is not None, f"the lease of a new stream {stream} was not free"
    return lease


async def taken_over(store: Store, run_id: str, holder: str, stream: str = MAIN) -> Lease:
    """The lease of ``stream`` taken by ``holder`` once the current one has expired."""
    async def take() -> Lease | None:
        return await store.acquire_lease(run_id, stream, holder, 60.0)

    return await eventually(take, f"{holder} taking over the expired lease of {stream}")


class RunLogContract(StoreFixtures):
    """``toren.seams.store.RunLog``: runs, leases, compare-and-swap appends and the outbox
    writes they carry. Uses ``RunReader`` and ``Outbox`` to look."""

    # -- create_run -----------------------------------------------------------------------

    async def test_create_run_writes_the_run_its_events_and_its_message_together(
            self, store: Store, agent: str) -> None:
        key = f"key-{new_id()}"
        run_id = await self.create(store, agent, {"q": 1}, key=key)
        record = await store.get_run(run_id, agent)
        assert record is not None
        assert (record.id, record.agent, record.status, record.kind, record.input,
                record.idempotency_key) == (run_id, agent, "queued", "run", {"q": 1}, key)
        assert kinds(await store.load_events(agent, run_id)) == [
            ("run", 1, "RunCreated"), ("run", 2, "TaskScheduled")]
        entries = await self.outbox(store, agent, run_id)
        assert [(e.agent, e.run_id, e.kind, e.payload) for e in entries] == [
            (agent, run_id, "task", first_message({"q": 1}).payload)]

    async def test_a_used_idempotency_key_returns_the_first_run_and_writes_nothing(
            self, store: Store, agent: str) -> None:
        key = f"key-{new_id()}"
        first = await self.create(store, agent, key=key)
        again = new_id()
        assert await store.create_run(
            agent, again, "other", idempotency_key=key,
            events=first_events(agent, "other", key), messages=[first_message()]) == (
            first, False)
        assert await store.get_run(again, agent) is None
        assert len(await self.outbox(store, agent, first, again)) == 1

    async def test_concurrent_creates_with_one_key_make_one_run(
            self, store: Store, agent: str) -> None:
        ids = [new_id() for _ in range(6)]
        key = f"key-{new_id()}"
        results = await asyncio.gather(*(store.create_run(
            agent, run_id, "x", idempotency_key=key, events=first_events(agent, "x", key),
            messages=[first_message()]) for run_id in ids))
        winners = [run_id for run_id, created in results if created]
        assert len(winners) == 1
        assert {run_id for run_id, _ in results} == set(winners)
        assert [run_id for run_id in ids if await store.get_run(run_id, agent)] == winners
        assert len(await self.outbox(store, agent, *ids)) == 1

    async def test_a_session_waits_for_input_and_takes_one_input_at_a_time(
            self, store: Store, agent: str) -> None:
        session = await self.create(store, agent, None, session=True)
        record = await store.get_run(session, agent)
        assert record is not None and (record.kind, record.status) == ("session",
                                                                       "awaiting_input")
        assert await self.outbox(store, agent, session) == []

        results = await asyncio.gather(*(store.session_input(
            agent, session, MAIN, [NewEvent(ev.USER_MESSAGE, {"text": f"hi {n}"})],
            [first_message()]) for n in range(2)))
        assert sorted(taken for taken, _status, _turn in results) == [False, True]
        stream = await store.load_stream(agent, session, MAIN)
        assert [(e.type, e.data["turn"]) for e in stream] == [("UserMessage", 1)]
        assert len(await self.outbox(store, agent, session)) == 1
        record = await store.get_run(session, agent)
        assert record is not None and record.status == "running"

    async def test_a_session_numbers_turns_and_takes_a_keyed_input_once(
            self, store: Store, agent: str) -> None:
        session = await self.create(store, agent, None, session=True)

        async def say(text: str, key: str | None = None) -> tuple[bool, str | None, int]:
            data = {"text": text} | ({"idempotency_key": key} if key else {})
            return await store.session_input(agent, session, MAIN,
                                             [NewEvent(ev.USER_MESSAGE, data)],
                                             [first_message()], key)

        async def turn_ends() -> None:  # the worker's last append of a turn, in effect
            assert await store.append_unleased(
                agent, session, "run", [NewEvent.of(ev.WorkflowLogged(n=1, message="turn",
                                                                      fields={}))],
                run_update=RunUpdate(status="awaiting_input"))

        assert await say("one", "key-1") == (True, "awaiting_input", 1)
        await turn_ends()
        again = await say("one again", "key-1")
        assert (again[0], again[2]) == (True, 1)
        assert await say("two") == (True, "awaiting_input", 2)
        stream = await store.load_stream(agent, session, MAIN)
        assert [(e.data["text"], e.data["turn"]) for e in stream] == [("one", 1), ("two", 2)]

    async def test_input_to_what_is_no_session_is_not_taken(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        for target in (run_id, new_id()):
            taken, status, _turn = await store.session_input(
                agent, target, MAIN, [NewEvent(ev.USER_MESSAGE, {"text": "hi"})],
                [first_message()])
            assert (taken, status) == (False, None)
        assert await store.load_stream(agent, run_id, MAIN) == []

    # -- leases ---------------------------------------------------------------------------

    async def test_a_lease_is_exclusive_until_it_expires_then_the_epoch_grows(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        first = await leased(store, run_id, "w1", ttl_s=0.3)
        assert (first.run_id, first.stream, first.holder) == (run_id, MAIN, "w1")
        assert await store.acquire_lease(run_id, MAIN, "w2", 60) is None
        assert await store.acquire_lease(run_id, MAIN, "w1", 60) is None  # held: even by w1
        # another stream of the same run has a lease of its own
        assert await store.acquire_lease(run_id, "task:other", "w2", 60) is not None
        second = await taken_over(store, run_id, "w2")
        assert second.epoch > first.epoch

    async def test_a_busy_lease_says_when_it_expires(self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        await leased(store, run_id, "w1", ttl_s=30)
        busy = await store.acquire_and_load(agent, run_id, MAIN, "w2", 30)
        assert isinstance(busy, LeaseBusy)
        assert 0 < busy.retry_in_s <= 30

    async def test_acquire_and_load_reads_every_epoch_s_events_from_the_last_checkpoint(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        first = await leased(store, run_id, "w1")
        await store.append(agent, first, 1, [started(first.epoch)], ttl_s=60)
        await store.append(agent, first, 2, [call_started(1, first.epoch)], ttl_s=60,
                           release=True)
        loaded = await store.acquire_and_load(agent, run_id, MAIN, "w2", 60)
        assert not isinstance(loaded, LeaseBusy)
        second, events = loaded
        assert second.holder == "w2" and second.epoch > first.epoch
        assert kinds(events) == [(MAIN, 1, "TaskStarted"), (MAIN, 2, "ModelCallStarted")]

        checkpoint = NewEvent.of(fold_task([]).snapshot())
        await store.append(agent, second, 3, [call_completed(1, second.epoch), checkpoint],
                           ttl_s=60)
        await store.append(agent, second, 5, [call_started(2, second.epoch)], ttl_s=60,
                           release=True)
        loaded = await store.acquire_and_load(agent, run_id, MAIN, "w3", 60)
        assert not isinstance(loaded, LeaseBusy)
        assert kinds(loaded[1]) == [(MAIN, 4, "TaskCheckpoint"), (MAIN, 5, "ModelCallStarted")]

    async def test_acquire_and_load_with_finished_adds_each_task_s_finish(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        for stream in (MAIN, "task:b"):
            lease = await leased(store, run_id, "w1", stream=stream)
            await store.append(agent, lease, 1, [task_finished(lease.epoch,
                                                               stream.removeprefix("task:"))],
                               ttl_s=60, release=True)
        loaded = await store.acquire_and_load(agent, run_id, "run", "w1", 60,
                                              with_finished=True)
        assert not isinstance(loaded, LeaseBusy)
        assert sorted(kinds(loaded[1])) == [
            ("run", 1, "RunCreated"), ("run", 2, "TaskScheduled"), ("task:b", 1, "TaskFinished"),
            (MAIN, 1, "TaskFinished")]
        plain = await store.acquire_and_load(agent, run_id, "run", "w1", 60)
        assert isinstance(plain, LeaseBusy)  # the lease is w1's now: held, even for w1

    async def test_release_frees_the_stream_at_once_but_never_a_newer_holder_s_lease(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        first = await leased(store, run_id, "w1", ttl_s=60)
        await store.release_lease(first)
        second = await store.acquire_lease(run_id, MAIN, "w2", 0.3)
        assert second is not None
        await store.release_lease(first)  # stale: changes nothing
        assert await store.acquire_lease(run_id, MAIN, "w3", 60) is None
        third = await taken_over(store, run_id, "w3")
        await store.release_lease(second)  # w2's lease was taken over: w3 keeps it
        assert await store.acquire_lease(run_id, MAIN, "w4", 60) is None
        assert third.epoch > second.epoch

    # -- append ---------------------------------------------------------------------------

    async def test_appends_at_one_sequence_number_one_commits_the_others_lose_the_lease(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        lease = await leased(store, run_id)
        results = await asyncio.gather(
            *(store.append(agent, lease, 1, [started(lease.epoch)], ttl_s=60,
                           messages=[OutgoingMessage("run", {"n": n})]) for n in range(8)),
            return_exceptions=True)
        assert sum(result is None for result in results) == 1
        assert all(isinstance(r, LeaseLost) for r in results if r is not None), results
        assert kinds(await store.load_stream(agent, run_id, MAIN)) == [(MAIN, 1, "TaskStarted")]
        sent = [e for e in await self.outbox(store, agent, run_id) if e.kind == "run"]
        assert len(sent) == 1  # only the winner's message

    async def test_a_writer_whose_lease_was_taken_over_loses_its_next_append(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        first = await leased(store, run_id, "w1", ttl_s=60)
        await store.append(agent, first, 1, [started(first.epoch)], ttl_s=0.3)
        second = await taken_over(store, run_id, "w2")
        with pytest.raises(LeaseLost):
            await store.append(agent, first, 2, [call_started(1, first.epoch)], ttl_s=60,
                               messages=[OutgoingMessage("run", {"stale": True})],
                               run_update=RunUpdate(status="failed", finished=True))
        await store.append(agent, second, 2, [call_started(1, second.epoch)], ttl_s=60)
        events = await store.load_stream(agent, run_id, MAIN)
        assert [(e.seq, e.data["epoch"]) for e in events] == [(1, first.epoch),
                                                              (2, second.epoch)]
        record = await store.get_run(run_id, agent)
        assert record is not None and record.status == "queued"  # the loser changed nothing
        assert not [e for e in await self.outbox(store, agent, run_id)
                    if e.payload.get("stale")]

    async def test_an_expired_lease_loses_its_append_even_before_anyone_takes_it(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        lease = await leased(store, run_id, "w1", ttl_s=0.2)
        await asyncio.sleep(0.5)  # past its TTL; nobody took it
        with pytest.raises(LeaseLost):
            await store.append(agent, lease, 1, [started(lease.epoch)], ttl_s=60)
        assert await store.load_stream(agent, run_id, MAIN) == []

    async def test_an_append_renews_the_lease_and_one_that_releases_gives_it_up(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        lease = await leased(store, run_id, "w1", ttl_s=0.3)
        await store.append(agent, lease, 1, [started(lease.epoch)], ttl_s=30)
        await asyncio.sleep(0.5)  # past the TTL the lease was taken with
        assert await store.acquire_lease(run_id, MAIN, "w2", 60) is None
        await store.append(agent, lease, 2, [call_started(1, lease.epoch)], ttl_s=30,
                           release=True)
        assert await store.acquire_lease(run_id, MAIN, "w2", 60) is not None

    async def test_an_append_writes_its_messages_and_run_update_in_its_transaction(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        await self.drain(store, agent)
        lease = await leased(store, run_id)
        await store.append(agent, lease, 1, [started(lease.epoch)], ttl_s=60,
                           messages=[OutgoingMessage("run", {"reason": "now"}),
                                     OutgoingMessage("run", {"reason": "later"}, delay_s=30)],
                           run_update=RunUpdate(status="running", error={"code": "x"}))
        record = await store.get_run(run_id, agent)
        assert record is not None and (record.status, record.error) == ("running",
                                                                        {"code": "x"})
        due = await self.outbox(store, agent, run_id)
        assert [e.payload for e in due] == [{"reason": "now"}]  # the other waits 30 s
        await store.append(agent, lease, 2, [task_finished(lease.epoch)], ttl_s=60,
                           run_update=RunUpdate(status="completed", output="done",
                                                stop_reason="end_turn", error=None,
                                                finished=True))
        record = await store.get_run(run_id, agent)
        assert record is not None
        assert (record.status, record.output, record.stop_reason, record.error) == (
            "completed", "done", "end_turn", None)
        assert record.finished_at is not None

    async def test_a_run_update_never_reopens_a_finished_run(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        lease = await leased(store, run_id)
        await store.append(agent, lease, 1, [task_finished(lease.epoch)], ttl_s=60,
                           run_update=RunUpdate(status="completed", output="done",
                                                finished=True))
        await store.append(agent, lease, 2, [call_started(1, lease.epoch)], ttl_s=60,
                           run_update=RunUpdate(status="running"))
        record = await store.get_run(run_id, agent)
        assert record is not None and (record.status, record.output) == ("completed", "done")

    async def test_an_append_to_a_cancelled_run_is_refused(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        lease = await leased(store, run_id)
        await store.append(agent, lease, 1, [started(lease.epoch)], ttl_s=60)
        assert await store.cancel_run(run_id, "stop") is not None
        with pytest.raises(RunCancelled):
            await store.append(agent, lease, 2, [call_started(1, lease.epoch)], ttl_s=60)
        assert len(await store.load_stream(agent, run_id, MAIN)) == 1

    async def test_unleased_appends_take_the_next_numbers_and_skip_finished_runs(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        logged = [NewEvent.of(ev.WorkflowLogged(n=n, message="m", fields={}))
                  for n in range(1, 6)]
        results = await asyncio.gather(*(store.append_unleased(agent, run_id, "run", [event])
                                         for event in logged))
        assert results == [True] * 5
        stream = await store.load_stream(agent, run_id, "run")
        assert [e.seq for e in stream] == [1, 2, 3, 4, 5, 6, 7]  # after the first two
        assert sorted(e.data["n"] for e in stream[2:]) == [1, 2, 3, 4, 5]

        assert await store.append_unleased(
            agent, run_id, "run", [NewEvent.of(ev.RunFinished(
                status="failed", stop_reason="error", output=None,
                error={"code": "dead", "message": "dead"}))],
            run_update=RunUpdate(status="failed", stop_reason="error", finished=True))
        after = NewEvent.of(ev.WorkflowLogged(n=9, message="late", fields={}))
        assert not await store.append_unleased(agent, run_id, "run", [after])
        assert await store.append_unleased(agent, run_id, "run", [after],
                                           only_if_active=False)
        record = await store.get_run(run_id, agent)
        assert record is not None and record.status == "failed"
        assert [e.seq for e in await store.load_stream(agent, run_id, "run")][-1] == 9

    async def test_unleased_and_leased_appends_never_share_a_number(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        lease = await leased(store, run_id, stream="run")

        async def leased_appends() -> int:
            done = 0
            for seq in range(3, 13):
                try:
                    await store.append(agent, lease, seq, [NewEvent.of(ev.WorkflowLogged(
                        n=100 + seq, message="leased", fields={}))], ttl_s=60)
                    done += 1
                except LeaseLost:
                    pass  # an unleased append took the number: a worker would reload
            return done

        results = await asyncio.gather(leased_appends(), *(store.append_unleased(
            agent, run_id, "run", [NewEvent.of(ev.WorkflowLogged(n=n, message="unleased",
                                                                  fields={}))])
            for n in range(1, 6)))
        stream = await store.load_stream(agent, run_id, "run")
        assert [e.seq for e in stream] == list(range(1, len(stream) + 1))
        assert len(stream) == 2 + results[0] + 5

    # -- cancel, status, ensure_messages ---------------------------------------------------

    async def test_cancel_marks_the_run_drops_its_messages_and_records_why(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        cancelled = await store.cancel_run(run_id, "changed my mind")
        assert cancelled is not None
        assert (cancelled.status, cancelled.stop_reason) == ("cancelled", "cancelled")
        assert cancelled.finished_at is not None
        assert await store.run_status(agent, run_id) == "cancelled"
        assert await self.outbox(store, agent, run_id) == []
        events = await store.load_stream(agent, run_id, "run")
        assert (events[-1].type, events[-1].data) == ("RunCancelled",
                                                      {"reason": "changed my mind"})
        again = await store.cancel_run(run_id, "twice")
        assert again is not None and again.status == "cancelled"
        assert len(await store.load_stream(agent, run_id, "run")) == len(events)
        assert await store.cancel_run(new_id(), "nothing") is None

    async def test_cancelling_a_finished_run_changes_nothing(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        lease = await leased(store, run_id)
        await store.append(agent, lease, 1, [task_finished(lease.epoch)], ttl_s=60,
                           run_update=RunUpdate(status="completed", finished=True))
        record = await store.cancel_run(run_id, "too late")
        assert record is not None and record.status == "completed"
        assert [e.type for e in await store.load_stream(agent, run_id, "run")] == [
            "RunCreated", "TaskScheduled"]

    async def test_run_status(self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        assert await store.run_status(agent, run_id) == "queued"
        assert await store.run_status(agent, new_id()) is None

    async def test_ensure_messages_writes_only_what_is_not_pending(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)  # its task:main message is pending
        wanted = [first_message(), OutgoingMessage("run", {"reason": "timer", "key": "timer:1"})]
        assert await store.ensure_messages(agent, run_id, wanted) == 1
        assert await store.ensure_messages(agent, run_id, wanted) == 0
        assert sorted(e.kind for e in await self.outbox(store, agent, run_id)) == ["run",
                                                                                  "task"]
        await self.drain(store, agent)
        assert await store.ensure_messages(agent, run_id, wanted) == 2

    async def test_every_write_s_delayed_messages_wait_their_delay_in_the_outbox(
            self, store: Store, agent: str) -> None:
        later = OutgoingMessage("run", {"reason": "later", "key": "later"}, delay_s=0.5)
        session = await self.create(store, agent, None, session=True)
        appended = await self.create(store, agent)
        ensured = await self.create(store, agent)
        await self.drain(store, agent)
        created = new_id()
        await store.create_run(agent, created, "x", idempotency_key=None,
                               events=first_events(agent, "x"), messages=[later])
        taken, _status, _turn = await store.session_input(
            agent, session, MAIN, [NewEvent(ev.USER_MESSAGE, {"text": "hi"})], [later])
        assert taken
        lease = await leased(store, appended)
        await store.append(agent, lease, 1, [started(lease.epoch)], ttl_s=60, messages=[later])
        assert await store.ensure_messages(agent, ensured, [later]) == 1
        runs = (created, session, appended, ensured)
        assert await self.outbox(store, agent, *runs) == [], "a delayed message was due at once"

        async def all_due() -> bool:
            return len(await self.outbox(store, agent, *runs)) == len(runs)

        await eventually(all_due, "the delayed messages coming due")

    async def test_a_message_is_either_handed_to_the_worker_or_pending_never_both(
            self, store: Store, agent: str) -> None:
        handed: list[QueueMessage] = []

        class Worker:
            id = f"hand-off-{new_id()}"
            visibility_s = 60.0

            def room(self, agent: str, holder: str | None, releasing: bool) -> int:
                return 1

            def handed(self, messages: Sequence[QueueMessage]) -> None:
                handed.extend(messages)

            def handed_unknown(self) -> None:
                raise AssertionError("no connection broke")

        store.hand_off_to(Worker())
        try:
            run_id = await self.create(store, agent)
            lease = await leased(store, run_id, Worker.id)
            sent = [OutgoingMessage("run", {"n": n, "key": f"n{n}"}) for n in range(2)]
            await store.append(agent, lease, 1, [started(lease.epoch)], ttl_s=60,
                               messages=sent)
        finally:
            store.hand_off_to(None)
        pending = await self.outbox(store, agent, run_id)
        delivered = [m.payload for m in handed] + [e.payload for e in pending]
        assert sorted(json.dumps(p, sort_keys=True) for p in delivered) == sorted(
            json.dumps(m.payload, sort_keys=True) for m in [first_message("x"), *sent])
        assert all((m.agent, m.run_id, m.attempts) == (agent, run_id, 1) for m in handed)

    async def test_a_child_run_s_end_wakes_its_parent_s_task_whichever_way_it_ends(
            self, store: Store, agent: str, other_agent: str) -> None:
        parent = await self.create(store, agent)
        await self.drain(store, agent)
        link = ChildLink(agent=agent, run_id=parent, task_id="main", kind="peer", depth=1)
        cancelled = await self.create(store, other_agent, parent=link)
        finished = await self.create(store, other_agent, parent=link)
        record = await store.get_run(cancelled, other_agent)
        assert record is not None and (record.parent, record.depth) == (
            {"agent": agent, "run_id": parent, "task_id": "main", "kind": "peer"}, 1)
        assert await self.outbox(store, agent, parent) == []  # no wake-up while they run

        await store.cancel_run(cancelled, "stop")
        lease = await leased(store, finished)
        await store.append(other_agent, lease, 1, [task_finished(lease.epoch)], ttl_s=60,
                           run_update=RunUpdate(status="completed", finished=True))
        woken = await self.outbox(store, agent, parent)
        assert sorted((e.run_id, e.kind, e.payload["child_run_id"]) for e in woken) == sorted(
            [(parent, "task", cancelled), (parent, "task", finished)])
        assert all(e.payload["task_id"] == "main" for e in woken)


class RunReaderContract(StoreFixtures):
    """``toren.seams.store.RunReader``: runs and events as committed. Uses ``RunLog`` to
    write.

    ``notifies_appends``: set ``False`` if the store keeps ``wait_for_appends``' default
    (readers poll); the contract then checks that default: nothing named, after the wait."""

    notifies_appends: ClassVar[bool] = True

    async def test_get_run_finds_a_run_with_or_without_its_agent(
            self, store: Store, agent: str, other_agent: str) -> None:
        run_id = await self.create(store, agent)
        for found in (await store.get_run(run_id), await store.get_run(run_id, agent)):
            assert found is not None and (found.id, found.agent) == (run_id, agent)
        assert await store.get_run(run_id, other_agent) is None
        assert await store.get_run(new_id()) is None
        assert await store.get_run("not-a-run-id") is None

    async def test_list_runs_newest_first_filtered_and_paged(
            self, store: Store, fresh_agent: str, other_agent: str) -> None:
        agent = fresh_agent
        ids = [await self.create(store, agent, n) for n in range(5)]
        session = await self.create(store, agent, None, session=True)
        elsewhere = await self.create(store, other_agent)
        await store.cancel_run(ids[1], "stop")

        newest_first = [r.id for r in await store.list_runs(agent=agent)]
        assert newest_first == [session, *reversed(ids)]
        assert [r.id for r in await store.list_runs(agent=agent, status="cancelled")] == [ids[1]]
        assert [r.id for r in await store.list_runs(agent=agent, kind="session")] == [session]
        both = await store.list_runs(agents=[agent, other_agent], limit=2)
        assert [r.id for r in both] == [elsewhere, session]

        pages: list[str] = []
        before = None
        while True:
            page = await store.list_runs(agent=agent, limit=2, before=before)
            if not page:
                break
            pages += [r.id for r in page]
            last = page[-1]
            assert last.created_at is not None
            before = (last.created_at, last.id)
        assert pages == newest_first

    async def test_run_totals_are_the_receipts(self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        paid, unpriced, idle = [await self.create(store, agent, n) for n in range(3)]
        for run_id, costs in ((paid, [0.5, 0.25]), (unpriced, [None, 1.0])):
            lease = await leased(store, run_id)
            events = [started(lease.epoch)]
            for step, cost in enumerate(costs, 1):
                events += [call_started(step, lease.epoch),
                           call_completed(step, lease.epoch, cost)]
            # the paid run finishes with its last append (a store may keep its totals then)
            await store.append(agent, lease, 1, events, ttl_s=60, run_update=RunUpdate(
                status="completed", output="done", finished=True) if run_id == paid else None)
        totals = await store.run_totals(agent, [paid, unpriced, idle])
        for run_id in (paid, unpriced):
            assert totals[run_id] == run_totals(await store.load_events(agent, run_id))
        assert totals[paid] == RunTotals(model_calls=2, steps=2, cost_usd=0.75)
        assert totals[unpriced] == RunTotals(2, 2, 1.0, cost_unknown_calls=1)
        assert idle not in totals  # no model calls
        assert await store.run_totals(agent, []) == {}

    async def test_child_runs_oldest_first_in_every_agent(
            self, store: Store, agent: str, other_agent: str) -> None:
        parent = await self.create(store, agent)
        link = ChildLink(agent=agent, run_id=parent, task_id="main", kind="background",
                         depth=1)
        children = [await self.create(store, name, parent=link)
                    for name in (other_agent, agent, other_agent)]
        found = await store.child_runs(parent)
        assert [(r.id, r.child_kind) for r in found] == [(c, "background") for c in children]
        assert await store.child_runs(children[0]) == []
        assert await store.child_runs("not-a-run-id") == []

    async def test_events_by_stream_in_order_and_after_a_position(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        lease = await leased(store, run_id)
        await store.append(agent, lease, 1, [started(lease.epoch),
                                             call_started(1, lease.epoch)], ttl_s=60)
        await store.append(agent, lease, 3, [call_completed(1, lease.epoch)], ttl_s=60)
        events = await store.load_events(agent, run_id)
        assert kinds(events) == [("run", 1, "RunCreated"), ("run", 2, "TaskScheduled"),
                                 (MAIN, 1, "TaskStarted"), (MAIN, 2, "ModelCallStarted"),
                                 (MAIN, 3, "ModelCallCompleted")]
        assert all(e.run_id == run_id for e in events)
        assert events[3].data == call_started(1, lease.epoch).data
        assert kinds(await store.load_events(agent, run_id, {"run": 2, MAIN: 1})) == [
            (MAIN, 2, "ModelCallStarted"), (MAIN, 3, "ModelCallCompleted")]
        assert kinds(await store.load_stream(agent, run_id, MAIN)) == kinds(events[2:])
        assert await store.load_events(agent, new_id()) == []

    async def test_a_run_and_its_events_in_one_read(self, store: Store, agent: str) -> None:
        runs = [await self.create(store, agent) for _ in range(2)]
        missing = new_id()
        record, events = await store.get_run_and_events(agent, runs[0], {"run": 1})
        assert record is not None and record.id == runs[0]
        assert kinds(events) == [("run", 2, "TaskScheduled")]
        assert await store.get_run_and_events(agent, missing) == (None, [])
        found = await store.get_runs_and_events(agent, {runs[0]: {}, runs[1]: {"run": 2},
                                                        missing: {}})
        assert set(found) == {*runs, missing}
        first, second, none = found[runs[0]], found[runs[1]], found[missing]
        assert first[0] is not None and len(first[1]) == 2
        assert second[0] is not None and second[1] == []
        assert none == (None, [])

    async def test_wait_for_appends_names_the_watched_runs_appended_to(
            self, store: Store, agent: str) -> None:
        if not self.notifies_appends:
            run_id = await self.create(store, agent)
            assert await store.wait_for_appends({run_id}, 0.2) == set()
            return
        watched_id = await self.create(store, agent)
        unwatched_id = await self.create(store, agent)
        first = await store.wait_for_appends({watched_id}, 5.0)
        assert first is None or first <= {watched_id}  # watched only now: look once

        async def appended() -> Any:
            found = await store.wait_for_appends({watched_id}, 0.5)
            return found is None or watched_id in found

        for run_id in (unwatched_id, watched_id):
            await store.append_unleased(agent, run_id, "run", [NewEvent.of(
                ev.WorkflowLogged(n=1, message="new", fields={}))])
        await eventually(appended, "a notice of the append to the watched run")


class ForkStoreContract(StoreFixtures):
    """``toren.seams.store.ForkStore``: a fork's run, log and messages in one transaction."""

    async def test_a_fork_is_a_queued_run_with_its_streams_numbered_from_one(
            self, store: Store, agent: str) -> None:
        fork = new_id()
        streams = {"run": first_events(agent, "forked"),
                   MAIN: [started(1), call_started(1, 1), call_completed(1, 1)]}
        await store.create_fork(agent, fork, "forked", streams=streams,
                                messages=[first_message("forked")])
        record = await store.get_run(fork, agent)
        assert record is not None and (record.status, record.input) == ("queued", "forked")
        assert sorted(kinds(await store.load_events(agent, fork))) == sorted(
            [("run", 1, "RunCreated"), ("run", 2, "TaskScheduled"), (MAIN, 1, "TaskStarted"),
             (MAIN, 2, "ModelCallStarted"), (MAIN, 3, "ModelCallCompleted")])
        assert [(e.run_id, e.kind) for e in await self.outbox(store, agent, fork)] == [
            (fork, "task")]

    async def test_a_source_lists_the_forks_made_from_it_oldest_first(
            self, store: Store, agent: str) -> None:
        source, other = new_id(), new_id()
        await store.create_run(agent, source, "source", idempotency_key=None,
                               events=first_events(agent, "source"),
                               messages=[first_message("source")])
        forks = [new_id(), new_id()]
        for fork in forks:
            made_from = ev.RunForked(source_run_id=source, at_step=0, unit="step",
                                     copied_events=0, model=None, prompt_sha256=None)
            await store.create_fork(agent, fork, "source", streams={
                "run": [*first_events(agent, "source"), NewEvent.of(made_from)]},
                messages=[first_message("source")])
        assert [run.id for run in await store.fork_runs(agent, source)] == forks
        assert await store.fork_runs(agent, forks[0]) == []  # a fork of no fork
        assert await store.fork_runs(agent, other) == []  # no such run
        assert await store.fork_runs(agent, "not-a-run-id") == []

    async def test_a_fork_exists_whole_or_not_at_all(self, store: Store, agent: str) -> None:
        fork = new_id()
        await store.create_fork(agent, fork, "first", streams={"run": first_events(agent, "1")},
                                messages=[first_message()])
        with pytest.raises(Exception):  # noqa: B017 - the driver's own error for a taken id
            await store.create_fork(agent, fork, "second",
                                    streams={"run": first_events(agent, "2"),
                                             MAIN: [started(1)]},
                                    messages=[OutgoingMessage("run", {"second": True})])
        record = await store.get_run(fork, agent)
        assert record is not None and record.input == "first"
        assert kinds(await store.load_events(agent, fork)) == [("run", 1, "RunCreated"),
                                                               ("run", 2, "TaskScheduled")]
        assert [e.kind for e in await self.outbox(store, agent, fork)] == ["task"]


def _signal(name: str, payload: Any, key: str | None = None) -> NewEvent:
    return NewEvent.of(ev.SignalReceived(name=name, payload=payload,
                                         sent_at="2026-01-01T00:00:00+00:00",
                                         idempotency_key=key))


class SignalLogContract(StoreFixtures):
    """``toren.seams.store.SignalLog``: signals on a run's ``signals`` stream, each with its
    wake-up, never to a finished run. Uses ``RunLog``, ``RunReader`` and ``Outbox`` to look."""

    async def test_a_signal_is_numbered_sent_with_its_tick_and_read_with_the_run_stream(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        tick = OutgoingMessage("run", {"reason": "signal", "signal": "go"})
        assert await store.send_signal(agent, run_id, _signal("go", {"n": 1}, "k1"),
                                       [tick], "k1") == ("queued", 1, True)
        # a repeated key writes nothing and names the first signal, finished run or not
        assert await store.send_signal(agent, run_id, _signal("go", {"n": 2}, "k1"),
                                       [tick], "k1") == ("queued", 1, False)
        assert await store.send_signal(agent, run_id, _signal("other", None),
                                       [tick]) == ("queued", 2, True)
        entries = await self.outbox(store, agent, run_id)
        assert [e.payload for e in entries if e.kind == "run"] == [tick.payload, tick.payload]
        found = await store.acquire_and_load(agent, run_id, "run", "w1", 60.0,
                                             with_finished=True)
        assert isinstance(found, tuple)
        signals = [(e.seq, e.type, e.data["payload"]) for e in found[1]
                   if e.stream == ev.SIGNALS_STREAM]
        assert signals == [(1, "SignalReceived", {"n": 1}), (2, "SignalReceived", None)]

    async def test_concurrent_signals_each_get_their_own_number(self, store: Store,
                                                                 agent: str) -> None:
        run_id = await self.create(store, agent)
        sent = await asyncio.gather(*(store.send_signal(agent, run_id, _signal("vote", n), [])
                                      for n in range(6)))
        assert sorted(number or 0 for _status, number, _created in sent) == [1, 2, 3, 4, 5, 6]
        keyed = await asyncio.gather(*(store.send_signal(
            agent, run_id, _signal("once", n, "same"), [], "same") for n in range(4)))
        assert len({number for _status, number, _created in keyed}) == 1
        assert sorted(created for _status, _number, created in keyed) == [
            False, False, False, True]

    async def test_a_signal_wakes_each_task_with_an_open_tool_wait_of_its_name(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)

        def wait(call: str, name: str) -> NewEvent:
            return NewEvent.of(ev.ToolWaitStarted(step=1, call_id=call, wait=1, name=name,
                                                  after=0, epoch=1))

        await store.append_unleased(agent, run_id, "task:a", [wait("c1", "paid")])
        await store.append_unleased(agent, run_id, "task:b", [wait("c1", "other")])
        await store.append_unleased(agent, run_id, "task:c", [wait("c1", "paid"), NewEvent.of(
            ev.ToolWaitEnded(call_id="c1", wait=1, name="paid", epoch=1, signal=1))])
        assert await store.send_signal(agent, run_id, _signal("paid", 5), []) == (
            "queued", 1, True)
        woken = [e.payload for e in await self.outbox(store, agent, run_id)
                 if e.kind == "task" and e.payload.get("task_id") in ("a", "b", "c")]
        assert [(p["task_id"], p["key"]) for p in woken] == [("a", "task:a")]

    async def test_a_finished_or_unknown_run_takes_no_signal(self, store: Store,
                                                             agent: str) -> None:
        run_id = await self.create(store, agent)
        await store.send_signal(agent, run_id, _signal("go", 1, "early"), [], "early")
        await store.cancel_run(run_id, "done")
        before = len(await store.load_events(agent, run_id))
        assert await store.send_signal(agent, run_id, _signal("go", 2), [
            OutgoingMessage("run", {"reason": "signal"})]) == ("cancelled", None, False)
        assert await store.send_signal(agent, run_id, _signal("go", 1, "early"), [],
                                       "early") == ("cancelled", 1, False)
        assert len(await store.load_events(agent, run_id)) == before
        assert await self.outbox(store, agent, run_id) == []
        assert await store.send_signal(agent, new_id(), _signal("go", 1), []) == (
            None, None, False)


def priced_call(step: int, model: str, cost_usd: float | None, input_tokens: int = 100,
                output_tokens: int = 10) -> NewEvent:
    """A completed model call on ``model`` that cost ``cost_usd`` (``None``: no known price)."""
    return NewEvent.of(ev.ModelCallCompleted(
        step=step, epoch=1, model=model, text="done", tool_calls=(), stop_reason="end_turn",
        usage=ev.TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens),
        cost_usd=cost_usd, latency_ms=1.0, repeated=False))


class RunSearchContract(StoreFixtures):
    """``RunReader.search_runs`` (plugin API 1.6): runs found by words, version and dates, in
    any order, a page at a time. A driver that does not search leaves it out of its suite
    (``GET /runs`` with ``q``, ``version``, ``since``, ``until`` or ``sort`` then answers
    501)."""

    async def test_search_runs_by_words_dates_and_order(
            self, store: Store, fresh_agent: str, other_agent: str) -> None:
        agent = fresh_agent
        red = await self.create(store, agent, "a red Fox")
        blue = await self.create(store, agent, {"text": "a blue fox"})
        other = await self.create(store, agent, "nothing")
        lease = await leased(store, blue)
        await store.append(agent, lease, 1, [started(lease.epoch), call_started(1, lease.epoch),
                                             call_completed(1, lease.epoch, 2.0)], ttl_s=60)

        async def found(**search: Any) -> list[str]:
            return [r.id for r in await store.search_runs(RunSearch(agents=(agent,), **search))]

        assert await found(text="fox") == [blue, red]
        assert await found(text="red fox") == [red]
        assert await found(text="fox -red") == [blue]
        assert await found(text="fo") == []
        assert await found() == [other, blue, red]
        assert await found(sort="cost", descending=False) == [other, red, blue]  # ties: newest
        assert await found(sort="model_calls", descending=True) == [blue, other, red]
        assert await found(descending=False) == [red, blue, other]
        assert await found(limit=1, offset=1) == [blue]
        record = await store.get_run(blue, agent)
        assert record is not None and record.created_at is not None
        assert await found(before=(record.created_at, blue)) == [red]
        assert await found(since=record.created_at) == [other, blue]
        assert await found(until=record.created_at) == [red]
        assert await found(version="no-such-version") == []
        both = await store.search_runs(RunSearch(agents=(agent, other_agent), text="fox"))
        assert [r.id for r in both] == [blue, red]


class RunCostsContract(StoreFixtures):
    """``RunReader.costs`` (plugin API 1.6): what model calls cost per agent, model and period,
    a fork's copied calls left out. A driver that does not add up costs leaves it out of its
    suite (``GET /costs`` then answers 501)."""

    async def test_costs_add_up_each_agents_calls_per_model_and_period(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        run_id = await self.create(store, agent)
        await store.append_unleased(agent, run_id, MAIN, [
            started(1), priced_call(1, "m/big", 0.25), priced_call(2, "m/big", 0.5, 200, 20),
            priced_call(3, "m/small", 0.125), priced_call(4, "m/free", None)])
        now = datetime.now(UTC)
        day = bucket_start(now, "day")
        rows = await store.costs([agent], day - timedelta(days=2), day + timedelta(days=1),
                                 "day")
        assert sorted(rows, key=lambda row: row.model) == [
            ModelCosts(agent, "m/big", day, 2, 0.75, 0, 300, 30),
            ModelCosts(agent, "m/free", day, 1, 0.0, 1, 100, 10),
            ModelCosts(agent, "m/small", day, 1, 0.125, 0, 100, 10)]
        assert all(row.bucket == day and row.bucket.utcoffset() == timedelta(0)
                   for row in rows)
        week = bucket_start(now, "week")
        by_week = await store.costs([agent], week, week + timedelta(weeks=1), "week")
        assert {(row.model, row.bucket, row.calls) for row in by_week} == {
            ("m/big", week, 2), ("m/free", week, 1), ("m/small", week, 1)}
        # the window's end is excluded; another window, agent or one never registered: none
        assert await store.costs([agent], day - timedelta(days=2), day, "day") == []
        assert await store.costs([], day, day + timedelta(days=1), "day") == []
        assert await store.costs(["never-ran-here"], day, day + timedelta(days=1), "day") == []

    async def test_a_run_costs_the_same_before_and_after_it_finishes(
            self, store: Store, fresh_agent: str) -> None:
        """Working, finished, and with a call that completed after it finished (a parallel
        task's, in flight when the run ended: it was paid for): every call counted once, in
        the costs and in the run's totals."""
        agent = fresh_agent
        run_id = await self.create(store, agent)
        day = bucket_start(datetime.now(UTC), "day")

        async def costs() -> list[tuple[str, int, float]]:
            rows = await store.costs([agent], day, day + timedelta(days=1), "day")
            return sorted((row.model, row.calls, row.cost_usd) for row in rows)

        lease = await leased(store, run_id)
        await store.append(agent, lease, 1, [started(lease.epoch), priced_call(1, "m/big", 1.0)],
                           ttl_s=60)
        side = await leased(store, run_id, stream="task:side")
        await store.append(agent, side, 1, [started(side.epoch)], ttl_s=60)
        assert await costs() == [("m/big", 1, 1.0)]
        await store.append(agent, lease, 3, [priced_call(2, "m/big", 2.0)], ttl_s=60,
                           run_update=RunUpdate(status="failed", finished=True))
        assert await costs() == [("m/big", 2, 3.0)]
        await store.append(agent, side, 2, [priced_call(1, "m/small", 0.5)], ttl_s=60)
        assert await costs() == [("m/big", 2, 3.0), ("m/small", 1, 0.5)]
        totals = await store.run_totals(agent, [run_id])
        assert totals[run_id] == RunTotals(model_calls=3, steps=3, cost_usd=3.5)

    async def test_a_forks_copied_calls_cost_it_nothing(self, store: Store,
                                                        fresh_agent: str) -> None:
        agent = fresh_agent
        source = await self.create(store, agent)
        await store.append_unleased(agent, source, MAIN, [
            started(1), priced_call(1, "m/big", 1.0), priced_call(2, "m/big", 2.0)])
        fork = new_id()
        made_from = ev.RunForked(source_run_id=source, at_step=1, unit="step", copied_events=2,
                                 model="m/small", prompt_sha256=None)
        marker = ev.TaskForked(source_run_id=source, source_task_id="main", at_step=1,
                               copied_events=2, model="m/small")
        await store.create_fork(agent, fork, "x", streams={
            "run": [*first_events(agent, "x"), NewEvent.of(made_from)],
            MAIN: [started(1), priced_call(1, "m/big", 1.0), NewEvent.of(marker)]},
            messages=[first_message("x")])
        await store.append_unleased(agent, fork, MAIN, [priced_call(2, "m/small", 0.5)])
        day = bucket_start(datetime.now(UTC), "day")
        rows = await store.costs([agent], day, day + timedelta(days=1), "day")
        assert sorted((row.model, row.calls, row.cost_usd) for row in rows) == [
            ("m/big", 2, 3.0), ("m/small", 1, 0.5)]
