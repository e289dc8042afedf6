"""Contracts of what keeps the fleet going: ``WorkerRegistry``, ``Guardian``, ``Outbox`` and
``FleetReader``."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import timedelta

from toren.core.runs import RunUpdate
from toren.seams.shapes import OutboxEntry, OutgoingMessage
from toren.seams.store import Store
from toren.testing.contracts.base import StoreFixtures
from toren.testing.contracts.support import (
    call_completed,
    call_started,
    eventually,
    started,
    task_finished,
)

MAIN = "task:main"


def worker(agents: list[str], version: str = "contract") -> dict[str, object]:
    """A worker's sign-in as ``toren.host.worker`` sends it."""
    return {"id": f"worker-{uuid.uuid4().hex[:8]}", "version": version, "agents": agents}


class WorkerRegistryContract(StoreFixtures):
    """``toren.seams.store.WorkerRegistry``: sign-ins, liveness, and renewing leases in hand.
    Uses ``RunLog`` for leases."""

    async def test_a_heartbeat_signs_a_worker_in_and_sign_out_removes_it(
            self, store: Store, agent: str) -> None:
        me = worker([agent], version=f"v-{uuid.uuid4().hex[:6]}")
        await store.heartbeat(me, 30, [])
        live = {w["id"]: w for w in await store.live_workers(60)}
        assert me["id"] in live
        assert (live[me["id"]]["version"], list(live[me["id"]]["agents"])) == (me["version"],
                                                                             [agent])
        await store.heartbeat(me, 30, [])  # again: still one sign-in
        assert [w["id"] for w in await store.live_workers(60)].count(me["id"]) == 1
        await store.sign_out(str(me["id"]))
        assert me["id"] not in {w["id"] for w in await store.live_workers(60)}

    async def test_a_workers_lane_is_kept_when_the_store_keeps_it(
            self, store: Store, agent: str) -> None:
        long, default = worker([agent]) | {"lane": "long"}, worker([agent])
        for me in (long, default):
            await store.heartbeat(me, 30, [])
        live = {w["id"]: w for w in await store.live_workers(60)}
        # optional (WorkerRegistry.heartbeat): a store that keeps lanes keeps them exactly
        assert live[long["id"]].get("lane", "long") == "long"
        assert live[default["id"]].get("lane", "all") == "all"

    async def test_a_workers_supervisor_is_kept_when_the_store_keeps_it(
            self, store: Store, agent: str) -> None:
        supervised = worker([agent]) | {"supervisor": f"host-1-{uuid.uuid4().hex[:8]}"}
        alone = worker([agent])
        for me in (supervised, alone):
            await store.heartbeat(me, 30, [])
        live = {w["id"]: w for w in await store.live_workers(60)}
        # optional (WorkerRegistry.heartbeat): a store that keeps it keeps it exactly, and
        # a worker started on its own (no supervisor key at all) has none
        assert live[supervised["id"]].get("supervisor", supervised["supervisor"]) == \
            supervised["supervisor"]
        assert live[alone["id"]].get("supervisor") is None

    async def test_a_worker_whose_heartbeat_is_older_than_the_window_is_not_live(
            self, store: Store, agent: str) -> None:
        me = worker([agent])
        await store.heartbeat(me, 30, [])
        await asyncio.sleep(0.3)
        assert me["id"] not in {w["id"] for w in await store.live_workers(0.1)}

    async def test_a_heartbeat_renews_exactly_the_leases_in_hand(
            self, store: Store, agent: str) -> None:
        me = worker([agent])
        run_id = await self.create(store, agent)
        kept = await store.acquire_lease(run_id, MAIN, str(me["id"]), 0.4)
        left = await store.acquire_lease(run_id, "task:left", str(me["id"]), 0.4)
        assert kept is not None and left is not None
        await store.heartbeat(me, 30, [], [kept])
        await eventually(lambda: store.acquire_lease(run_id, "task:left", "other", 60),
                         "the lease left out of the heartbeat expiring")
        assert await store.acquire_lease(run_id, MAIN, "other", 60) is None
        await store.append(agent, kept, 1, [started(kept.epoch)], ttl_s=30)  # still ours

    async def test_database_now_is_the_clock_leases_expire_by(
            self, store: Store, agent: str) -> None:
        run_id = await self.create(store, agent)
        before = await store.database_now()
        assert before.tzinfo is not None
        assert await store.acquire_lease(run_id, MAIN, "first", 1.0) is not None
        # taken until a second has passed on the store's clock (the lease began after
        # ``before``), and free once it has
        while await store.database_now() < before + timedelta(seconds=0.9):
            assert await store.acquire_lease(run_id, MAIN, "second", 60) is None
            await asyncio.sleep(0.05)
        await eventually(lambda: store.acquire_lease(run_id, MAIN, "second", 60),
                         "the lease expiring a second after it was taken")
        assert await store.database_now() >= before + timedelta(seconds=1.0)

    async def test_sign_out_releases_the_worker_s_leases(
            self, store: Store, agent: str) -> None:
        me = worker([agent])
        run_id = await self.create(store, agent)
        assert await store.acquire_lease(run_id, MAIN, str(me["id"]), 60) is not None
        await store.heartbeat(me, 60, [])
        await store.sign_out(str(me["id"]))
        assert await store.acquire_lease(run_id, MAIN, "successor", 60) is not None


class GuardianContract(StoreFixtures):
    """``toren.seams.store.Guardian``: ticks for the active runs nothing will wake. Uses
    ``RunLog`` and ``Outbox``."""

    async def test_a_sweep_ticks_an_orphaned_run_once_and_leaves_the_others(
            self, store: Store, agent: str) -> None:
        orphan = await self.create(store, agent)
        leased = await self.create(store, agent)
        waiting = await self.create(store, agent)  # its first message is still pending
        finished = await self.create(store, agent)
        lease = await store.acquire_lease(finished, MAIN, "w", 60)
        assert lease is not None
        await store.append(agent, lease, 1, [task_finished(lease.epoch)], ttl_s=60,
                           run_update=RunUpdate(status="completed", finished=True))
        # orphan, leased and finished lose their messages (a relay sent them, say)
        entries = await self.outbox(store, agent, orphan, leased, finished)
        await store.claim_outbox([agent], "relay", 10_000, 60)
        assert await store.ack_outbox("relay", [e.id for e in entries]) == len(entries)
        assert await store.acquire_lease(leased, MAIN, "w", 60) is not None
        mine = {orphan, leased, waiting, finished}

        async def swept() -> list[str]:
            return [run_id for run_id in await store.guardian_sweep([agent])
                    if run_id in mine]

        # a store may leave runs touched a moment ago alone (their message may be on its way)
        assert await eventually(swept, "a sweep ticking the orphaned run") == [orphan]
        ticks = await self.outbox(store, agent, orphan)
        assert [(e.kind, e.payload.get("run_id"), e.payload.get("reason")) for e in ticks] == [
            ("run", orphan, "guardian")]
        assert await swept() == []  # the tick is pending now


class OutboxContract(StoreFixtures):
    """``toren.seams.store.Outbox``: the relay's claims, each entry claimed by one relay at a
    time. Uses ``RunLog`` to write entries."""

    async def entries(self, store: Store, agent: str, count: int) -> list[str]:
        """``count`` runs of ``agent``, each with its first message in the outbox; their ids
        in order of creation."""
        return [await self.create(store, agent, n) for n in range(count)]

    async def test_entries_come_oldest_first_and_are_hidden_once_claimed(
            self, store: Store, fresh_agent: str, other_agent: str) -> None:
        runs = await self.entries(store, fresh_agent, 3)
        await self.create(store, other_agent)
        claimed = await store.claim_outbox([fresh_agent], "relay-1", 2, 60)
        assert [(e.agent, e.run_id, e.kind) for e in claimed] == [
            (fresh_agent, run_id, "task") for run_id in runs[:2]]
        assert claimed[0].message == OutgoingMessage("task", claimed[0].payload)
        rest = await store.claim_outbox([fresh_agent], "relay-2", 10, 60)
        assert [e.run_id for e in rest] == [runs[2]]
        assert await store.claim_outbox([fresh_agent], "relay-3", 10, 60) == []

    async def test_concurrent_relays_claim_each_entry_once(
            self, store: Store, fresh_agent: str) -> None:
        runs = await self.entries(store, fresh_agent, 12)
        claims = await asyncio.gather(*(store.claim_outbox([fresh_agent], f"relay-{n}", 3, 60)
                                        for n in range(8)))
        counted = Counter(entry.run_id for claim in claims for entry in claim)
        assert set(counted) == set(runs)
        assert set(counted.values()) == {1}

    async def test_an_unacknowledged_claim_comes_back_and_ack_is_the_holder_s(
            self, store: Store, fresh_agent: str) -> None:
        [run_id] = await self.entries(store, fresh_agent, 1)
        [first] = await store.claim_outbox([fresh_agent], "relay-1", 10, 0.3)

        async def reclaimed() -> list[OutboxEntry]:
            return list(await store.claim_outbox([fresh_agent], "relay-2", 10, 60))

        [again] = await eventually(reclaimed, "the expired claim being claimed again")
        assert (again.id, again.run_id) == (first.id, run_id)
        assert await store.ack_outbox("relay-1", [first.id]) == 0  # relay-2's now
        assert await store.ack_outbox("relay-2", [again.id]) == 1
        assert await store.ack_outbox("relay-2", [again.id]) == 0
        assert await store.ack_outbox("relay-2", []) == 0

    async def test_a_delayed_entry_is_due_once_its_delay_has_passed(
            self, store: Store, fresh_agent: str) -> None:
        [run_id] = await self.entries(store, fresh_agent, 1)
        await self.drain(store, fresh_agent)
        assert await store.ensure_messages(fresh_agent, run_id, [
            OutgoingMessage("run", {"reason": "timer", "key": "timer:1"}, delay_s=0.5)]) == 1
        assert await store.claim_outbox([fresh_agent], "relay", 10, 60) == []

        async def due() -> list[OutboxEntry]:
            return list(await store.claim_outbox([fresh_agent], "relay", 10, 60))

        [entry] = await eventually(due, "the delayed entry coming due")
        assert entry.message == OutgoingMessage("run", {"reason": "timer", "key": "timer:1"})

    async def test_wait_outbox_returns_within_its_timeout(
            self, store: Store, fresh_agent: str) -> None:
        await asyncio.wait_for(store.wait_outbox(0.2), 10)
        waiting = asyncio.ensure_future(store.wait_outbox(10))
        await asyncio.sleep(0.2)
        await self.create(store, fresh_agent)
        # a store that notifies wakes at once; one that cannot returns after 10 s: both keep
        # the promise, so only the bound is checked
        await asyncio.wait_for(waiting, 20)


class FleetReaderContract(StoreFixtures):
    """``toren.seams.store.FleetReader``: queue, runs and workers at a glance. Uses
    ``RunLog``, ``Outbox`` and ``WorkerRegistry``."""

    async def test_gauges_count_an_agent_s_messages_runs_and_live_workers(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        runs = [await self.create(store, agent) for _ in range(3)]
        await store.claim_outbox([agent], "relay", 1, 60)  # one in flight
        await store.cancel_run(runs[2], "stop")  # its message is dropped
        lease = await store.acquire_lease(runs[1], MAIN, "w", 60)
        assert lease is not None
        await store.append(agent, lease, 1, [started(lease.epoch)], ttl_s=60,
                           messages=[OutgoingMessage("run", {"key": "timer:1"}, delay_s=300)],
                           run_update=RunUpdate(status="running"))
        version = f"v-{uuid.uuid4().hex[:6]}"
        await store.heartbeat(worker([agent], version), 30, [])

        gauges = await store.fleet_gauges([agent], 60)
        queue = gauges.queue[agent]
        assert (queue.ready, queue.in_flight, queue.delayed) == (1, 1, 1)
        assert queue.oldest_ready_age_s is None or queue.oldest_ready_age_s >= 0
        assert gauges.dead_letters.get(agent, 0) == 0
        assert gauges.active_runs[agent] == {"queued": 1, "running": 1}
        assert gauges.workers_by_version.get(version) == 1

    async def test_each_agents_lane_is_what_its_last_registration_said(
            self, store: Store) -> None:
        slow = await self.register(store, runtime="long")
        quick = await self.register(store)
        lanes = await store.agent_lanes()
        if not lanes:  # optional: a store that knows no lanes says so with {}
            return
        assert (lanes[slow], lanes[quick]) == ("long", "short")
        await self.register(store, slow)  # registered again, now short
        assert (await store.agent_lanes())[slow] == "short"

    async def test_runs_in_flight_oldest_first_with_their_latest_step(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        runs = [await self.create(store, agent) for _ in range(3)]
        lease = await store.acquire_lease(runs[0], MAIN, "w", 60)
        assert lease is not None
        await store.append(agent, lease, 1, [started(lease.epoch), call_started(1, lease.epoch),
                                             call_completed(1, lease.epoch),
                                             call_started(2, lease.epoch)], ttl_s=60)
        await store.cancel_run(runs[1], "stop")
        found = await store.runs_in_flight([agent], 10)
        assert [(r.id, r.agent, r.status) for r in found] == [(runs[0], agent, "queued"),
                                                             (runs[2], agent, "queued")]
        assert (found[0].step, found[0].tasks) == (2, 1)
        assert (found[1].step, found[1].tasks) == (0, 0)
        assert [r.id for r in await store.runs_in_flight([agent], 1)] == [runs[0]]
