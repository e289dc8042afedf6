"""Contract of ``toren.seams.store.RateLimitStore``: provider budgets per window that no set of
concurrent callers can overrun, served in priority order, released with their task's lease."""

from __future__ import annotations

import asyncio

from toren.core.rate_limits import BucketLimit
from toren.seams.shapes import Lease
from toren.seams.store import Store
from toren.seams.store.rate_limits import RateDecision, RateRequest, RateSettlement
from toren.testing.contracts.base import StoreFixtures
from toren.testing.contracts.support import new_agent_name

MAIN = "task:main"


class RateLimitStoreContract(StoreFixtures):
    """``toren.seams.store.RateLimitStore``. Uses ``RunLog`` for runs and task leases (a
    reservation and a waiter live as long as the lease they name)."""

    async def rate_lease(self, store: Store, agent: str, ttl_s: float = 60) -> Lease:
        run_id = await self.create(store, agent)
        lease = await store.acquire_lease(run_id, MAIN, "w", ttl_s)
        assert lease is not None
        return lease

    def ask_rate(self, lease: Lease, bucket: BucketLimit, *, output: int = 10, priority: int = 0,
            waiter: int | None = None, window_s: float = 60.0) -> RateRequest:
        return RateRequest((bucket,), window_s, 1, 5, output, lease.run_id, lease.stream,
                           lease.epoch, priority, waiter)

    async def test_concurrent_reservations_never_exceed_a_window(
            self, store: Store, agent: str) -> None:
        bucket = BucketLimit(new_agent_name("bucket"), 5, None, None)
        leases = [await self.rate_lease(store, agent) for _ in range(12)]
        decisions = await asyncio.gather(*(store.reserve_rate(self.ask_rate(lease, bucket))
                                           for lease in leases))
        granted = [d for d in decisions if d.call_id is not None]
        assert len(granted) == 5
        parked = [d for d in decisions if d.call_id is None]
        assert all(d.waiter_id is not None for d in parked)
        # the first in line learns when the window frees; those behind it wait their turn
        assert sum(d.wait_s is not None for d in parked) == 1
        assert all(d.blocked_by == bucket.name for d in parked if d.wait_s is not None)
        state = {b.name: b for b in await store.rate_limit_state()}[bucket.name]
        assert (state.requests, state.requests_limit, state.waiting, state.held) == (5, 5, 7, 5)

    async def test_waiters_are_served_by_priority_then_arrival(
            self, store: Store, agent: str) -> None:
        bucket = BucketLimit(new_agent_name("bucket"), None, None, 100)
        holder = await self.rate_lease(store, agent)
        first = await store.reserve_rate(self.ask_rate(holder, bucket, output=100))
        assert first.call_id is not None
        waiting: dict[str, tuple[Lease, int, RateDecision]] = {}
        for name, priority in (("low", 0), ("high", 5), ("mid", 1), ("high-later", 5)):
            lease = await self.rate_lease(store, agent)
            decision = await store.reserve_rate(self.ask_rate(lease, bucket, output=50,
                                                         priority=priority))
            assert decision.call_id is None and decision.waiter_id is not None
            waiting[name] = (lease, priority, decision)
        # the whole window came back: each asks again, only the one at the head is served
        await store.settle_rate([RateSettlement(first.call_id, 1, 5, 0)])
        served: list[str] = []
        while waiting:
            for name, (lease, priority, decision) in list(waiting.items()):
                again = await store.reserve_rate(self.ask_rate(
                    lease, bucket, output=50, priority=priority, waiter=decision.waiter_id))
                if again.call_id is not None:
                    served.append(name)
                    del waiting[name]
                    await store.settle_rate([RateSettlement(again.call_id, 1, 5, 0)])
        assert served == ["high", "high-later", "mid", "low"]

    async def test_a_reservation_of_a_dead_lease_is_released(
            self, store: Store, agent: str) -> None:
        bucket = BucketLimit(new_agent_name("bucket"), None, None, 100)
        dying = await self.rate_lease(store, agent, ttl_s=0.2)
        held = await store.reserve_rate(self.ask_rate(dying, bucket, output=100))
        assert held.call_id is not None
        lease = await self.rate_lease(store, agent)
        parked = await store.reserve_rate(self.ask_rate(lease, bucket, output=100))
        assert parked.call_id is None
        await asyncio.sleep(0.4)  # the first lease expires, unrenewed (its worker died)
        again = await store.reserve_rate(self.ask_rate(lease, bucket, output=100,
                                                       waiter=parked.waiter_id))
        assert again.call_id is not None
        await store.withdraw_rate_waiter(-1)  # an unknown waiter: nothing happens

    async def test_a_pause_stops_every_caller_until_it_ends(
            self, store: Store, agent: str) -> None:
        bucket = BucketLimit(new_agent_name("key:BUCKET"), None, None, None)
        lease = await self.rate_lease(store, agent)
        await store.pause_rate([bucket.name], 30)
        paused = await store.reserve_rate(self.ask_rate(lease, bucket))
        assert paused.call_id is None and paused.blocked_by == bucket.name
        assert paused.wait_s is not None and 20 < paused.wait_s <= 30
        assert paused.waiter_id is not None
        await store.withdraw_rate_waiter(paused.waiter_id)
        state = {b.name: b for b in await store.rate_limit_state()}[bucket.name]
        assert state.pauses_total == 1 and state.paused_until is not None
        assert state.waiting == 0

    async def test_a_parked_caller_is_woken_when_room_is_freed(
            self, store: Store, agent: str) -> None:
        bucket = BucketLimit(new_agent_name("bucket"), None, None, 100)
        lease = await self.rate_lease(store, agent)
        first = await store.reserve_rate(self.ask_rate(lease, bucket, output=100))
        assert first.call_id is not None
        other = await self.rate_lease(store, agent)
        parked = await store.reserve_rate(self.ask_rate(other, bucket, output=50))
        assert parked.call_id is None
        await store.wait_rate_change(0.05)  # listening from here on
        woken = asyncio.create_task(store.wait_rate_change(30))
        await asyncio.sleep(0.1)
        await store.settle_rate([RateSettlement(first.call_id, 1, 5, 20)])
        await asyncio.wait_for(woken, 10)
        again = await store.reserve_rate(self.ask_rate(other, bucket, output=50,
                                                  waiter=parked.waiter_id))
        assert again.call_id is not None
