"""Contracts of what is decided once under concurrency: ``ApprovalStore`` (a decision),
``BudgetLedger`` (a reservation) and ``ScheduleStore`` (a slot)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from toren.core import events as ev
from toren.core.approvals import arguments_digest
from toren.core.budgets import BudgetRequest
from toren.core.events import NewEvent
from toren.core.runs import RunUpdate
from toren.core.schedules import ScheduleSpec, Trigger
from toren.errors import ScheduleNotFound, ScheduleRemoved
from toren.seams.shapes import Lease, OutgoingMessage
from toren.seams.store import Store
from toren.seams.store.schedules import NewRun, SlotToFire
from toren.testing.contracts.base import StoreFixtures
from toren.testing.contracts.support import (
    call_completed,
    eventually,
    first_events,
    first_message,
    new_id,
)

MAIN = "task:main"


def request(approval_id: str, call_id: str = "call_1",
            expires_after_s: float | None = None, *, usd: int = 10,
            **policy: Any) -> ev.ApprovalRequested:
    return ev.ApprovalRequested(step=1, approval_id=approval_id, call_id=call_id,
                                name="send_money", arguments={"usd": usd},
                                idempotency_key=f"key:{call_id}", epoch=1,
                                approvers=("alice",), expires_after_s=expires_after_s,
                                digest=arguments_digest({"usd": usd}), **policy)


def wake() -> OutgoingMessage:
    return OutgoingMessage("task", {"task_id": "main", "subagent": None, "input": None,
                                    "key": "task:main"})


class ApprovalStoreContract(StoreFixtures):
    """``toren.seams.store.ApprovalStore``: approvals kept once and decided once, waking their
    task in the decision's transaction. Uses ``RunLog`` and ``Outbox``."""

    async def parked(self, store: Store, agent: str) -> str:
        """A run whose main task waits for approval (its messages sent)."""
        run_id = await self.create(store, agent)
        lease = await store.acquire_lease(run_id, MAIN, "w", 60)
        assert lease is not None
        await store.append(agent, lease, 1, [NewEvent.of(request(new_id()))], ttl_s=60,
                           run_update=RunUpdate(status="awaiting_approval"), release=True)
        await self.drain(store, agent)
        return run_id

    async def test_opening_keeps_each_request_once(self, store: Store, agent: str) -> None:
        run_id = await self.parked(store, agent)
        asked = [request(new_id(), "call_1"), request(new_id(), "call_2")]
        opened = await store.open_approvals(agent, run_id, "main", asked, wake())
        assert [(a.id, a.agent, a.run_id, a.task_id, a.call_id, a.tool, a.arguments,
                 a.status, a.approvers) for a in opened] == [
            (r.approval_id, agent, run_id, "main", r.call_id, "send_money", {"usd": 10},
             "pending", ("alice",)) for r in asked]
        assert all(a.requested_at is not None and a.expires_at is None for a in opened)
        again = await store.open_approvals(agent, run_id, "main", asked[::-1], wake())
        assert [a.id for a in again] == [r.approval_id for r in asked[::-1]]
        assert len(await store.list_approvals(agents=None, run_id=run_id)) == 2

    async def test_a_decision_is_made_once_and_wakes_the_task(
            self, store: Store, agent: str) -> None:
        run_id = await self.parked(store, agent)
        [approval] = await store.open_approvals(agent, run_id, "main",
                                                [request(new_id())], wake())
        results = await asyncio.gather(
            store.decide_approval(approval.id, "approved", "alice", None),
            store.decide_approval(approval.id, "denied", "bob", "no"),
            store.decide_approval(approval.id, "approved", "carol", None))
        decided = [result for result in results if result is not None and result[1]]
        assert len(decided) == 1
        winner = decided[0][0]
        assert winner.status in ("approved", "denied") and winner.decided_at is not None
        for result in results:  # the losers see the first decision
            assert result is not None and result[0].status == winner.status
            assert result[0].decided_by == winner.decided_by
        record = await store.get_run(run_id, agent)
        assert record is not None and record.status == "running"
        woken = await self.outbox(store, agent, run_id)
        assert [(e.kind, e.payload) for e in woken] == [(wake().kind, wake().payload)]

    async def test_what_cannot_be_decided(self, store: Store, agent: str) -> None:
        assert await store.decide_approval(new_id(), "approved", "alice", None) is None
        assert await store.decide_approval("not-an-id", "approved", "alice", None) is None
        assert await store.get_approval(new_id()) is None
        assert await store.get_approval("not-an-id") is None

    async def test_an_approval_expires_by_the_store_s_clock(
            self, store: Store, agent: str) -> None:
        run_id = await self.parked(store, agent)
        [approval] = await store.open_approvals(agent, run_id, "main",
                                                [request(new_id(), expires_after_s=0.3)], wake())
        assert approval.expires_at is not None and approval.extra.get("due") is False
        early = await store.decide_approval(approval.id, "expired", "toren", None)
        assert early is not None and early[1] is False  # not yet due

        async def due() -> bool:
            found = await store.get_approval(approval.id)
            return found is not None and bool(found.extra.get("due"))

        await eventually(due, "the approval coming due")
        late = await store.decide_approval(approval.id, "approved", "alice", None)
        assert late is not None and late[1] is False and late[0].status == "pending"
        expired = await store.decide_approval(approval.id, "expired", "toren", None)
        assert expired is not None and expired[1] and expired[0].status == "expired"
        assert len(await self.outbox(store, agent, run_id)) == 1  # the wake-up

    async def test_a_pending_approval_of_an_ended_run_is_cancelled(
            self, store: Store, agent: str) -> None:
        run_id = await self.parked(store, agent)
        [approval] = await store.open_approvals(agent, run_id, "main",
                                                [request(new_id())], wake())
        await store.cancel_run(run_id, "stop")
        decided = await store.decide_approval(approval.id, "approved", "alice", None)
        assert decided is not None and decided[1] is False
        assert decided[0].status == "cancelled"
        assert await self.outbox(store, agent, run_id) == []

    async def test_cancel_approvals_ends_the_pending_ones_of_a_run(
            self, store: Store, agent: str) -> None:
        run_id = await self.parked(store, agent)
        first, second = await store.open_approvals(
            agent, run_id, "main", [request(new_id(), "c1"), request(new_id(), "c2")], wake())
        await store.decide_approval(first.id, "denied", "alice", "no")
        assert await store.cancel_approvals(run_id) == 1
        assert await store.cancel_approvals(run_id) == 0
        now = {a.id: a.status for a in await store.list_approvals(agents=None, run_id=run_id)}
        assert now == {first.id: "denied", second.id: "cancelled"}

    async def test_listing_newest_first_with_filters(
            self, store: Store, agent: str, other_agent: str) -> None:
        mine, theirs = await self.parked(store, agent), await self.parked(store, other_agent)
        older = (await store.open_approvals(agent, mine, "main", [request(new_id(), "a")],
                                            wake()))[0]
        newer = (await store.open_approvals(agent, mine, "main", [request(new_id(), "b")],
                                            wake()))[0]
        other = (await store.open_approvals(other_agent, theirs, "main",
                                            [request(new_id())], wake()))[0]
        await store.decide_approval(older.id, "approved", "alice", None)

        def ids(found: list[Any]) -> list[str]:
            return [a.id for a in found]

        assert ids(await store.list_approvals(agents=None, run_id=mine)) == [newer.id, older.id]
        assert ids(await store.list_approvals(agents=None, run_id=mine,
                                              status="pending")) == [newer.id]
        assert ids(await store.list_approvals(agents=None, run_id=mine, limit=1)) == [newer.id]
        assert ids(await store.list_approvals(agents=[other_agent], run_id=mine)) == []
        assert ids(await store.list_approvals(agents=[agent, other_agent],
                                              agent=other_agent, run_id=theirs)) == [other.id]
        assert await store.list_approvals(agents=None, run_id="not-a-run-id") == []


    async def test_edit_and_answer_are_kept_with_the_decision(
            self, store: Store, agent: str) -> None:
        run_id = await self.parked(store, agent)
        edited, answered = await store.open_approvals(
            agent, run_id, "main", [request(new_id(), "c1"), request(new_id(), "c2")], wake(),
            parameters={"send_money": {"type": "object"}})
        assert edited.digest == arguments_digest({"usd": 10})
        assert edited.parameters == {"type": "object"}
        result = await store.decide_approval(edited.id, "edited", "alice", None,
                                             arguments={"usd": 5})
        assert result is not None and result[1]
        assert (result[0].status, result[0].edited_arguments) == ("edited", {"usd": 5})
        result = await store.decide_approval(answered.id, "answered", "alice", "by phone",
                                             answer="done already")
        assert result is not None and result[1]
        assert (result[0].status, result[0].answer) == ("answered", "done already")

    async def test_approve_always_covers_the_same_call_in_the_run_only(
            self, store: Store, agent: str) -> None:
        run_id, other_run = await self.parked(store, agent), await self.parked(store, agent)
        first, twin, other = await store.open_approvals(
            agent, run_id, "main", [request(new_id(), "c1"), request(new_id(), "c2"),
                                    request(new_id(), "c3", usd=11)], wake())
        result = await store.decide_approval(first.id, "approved", "alice", None, scope="run")
        assert result is not None and result[1] and result[0].scope == "run"
        # pending ones of the same tool and digest: approved in the same transaction
        now = {a.id: a for a in await store.list_approvals(agents=None, run_id=run_id)}
        assert (now[twin.id].status, now[twin.id].granted_by,
                now[twin.id].decided_by) == ("approved", first.id, "alice")
        assert now[other.id].pending  # other arguments: asked
        # later ones: kept approved when opened, naming the decision; not in another run
        [later] = await store.open_approvals(agent, run_id, "main",
                                             [request(new_id(), "c4")], wake())
        assert (later.status, later.granted_by, later.decided_by) == (
            "approved", first.id, "alice")
        [elsewhere] = await store.open_approvals(agent, other_run, "main",
                                                 [request(new_id(), "c5")], wake())
        assert elsewhere.pending and elsewhere.granted_by is None

    async def test_an_expired_approval_escalates_once_and_reminds_once(
            self, store: Store, agent: str) -> None:
        run_id = await self.parked(store, agent)
        [approval] = await store.open_approvals(agent, run_id, "main", [request(
            new_id(), expires_after_s=0.6, on_expiry="escalate", escalate_to=("carol",),
            remind_after_s=0.1)], wake())
        assert (approval.on_expiry, approval.escalate_to) == ("escalate", ("carol",))
        assert approval.remind_at is not None and not approval.extra.get("remind_due")
        early = await store.escalate_approval(approval.id)  # not due yet: nothing moves
        assert early is not None and early.escalation_level == 0

        async def due() -> bool:
            found = await store.get_approval(approval.id)
            return found is not None and bool(found.extra.get("due"))

        await eventually(due, "the approval coming due")
        reminded = await asyncio.gather(*(store.mark_reminded(approval.id) for _ in range(5)))
        assert sorted(reminded) == [False] * 4 + [True]
        moved = await asyncio.gather(*(store.escalate_approval(approval.id) for _ in range(5)))
        assert all(m is not None and m.escalation_level == 1 for m in moved)
        now = await store.get_approval(approval.id)
        assert now is not None and now.pending and now.approvers == ("carol",)
        assert now.escalated_at is not None and now.expires_at is not None
        assert now.extra.get("due") is False  # a new expiry of the same length
        assert now.reminded_at is not None and now.remind_at is not None
        assert now.reminded_at < now.remind_at  # reminded again after the escalation


class BudgetLedgerContract(StoreFixtures):
    """``toren.seams.store.BudgetLedger``: reservations that never add up past a budget, each
    living as long as its task's lease. Uses ``RunLog`` for runs and leases."""

    async def task_lease(self, store: Store, agent: str, run_id: str | None = None,
                         ttl_s: float = 60) -> Lease:
        run_id = run_id or await self.create(store, agent)
        lease = await store.acquire_lease(run_id, MAIN, "w", ttl_s)
        assert lease is not None
        return lease

    def ask(self, lease: Lease, amount: float, run_budget: float | None = 1.0,
            daily_budget: float | None = None, step: int = 1) -> BudgetRequest:
        return BudgetRequest(run_id=lease.run_id, stream=lease.stream, epoch=lease.epoch,
                             step=step, purpose="step", model="toren/scripted",
                             amount_usd=amount, run_budget_usd=run_budget,
                             daily_budget_usd=daily_budget)

    async def test_parallel_reservations_never_add_up_past_the_budget(
            self, store: Store, agent: str) -> None:
        lease = await self.task_lease(store, agent)
        decisions = await asyncio.gather(*(store.reserve(agent, self.ask(lease, 0.1, step=n))
                                           for n in range(1, 21)))
        granted = [d for d in decisions if d.granted]
        assert len(granted) == 10
        assert all(d.reservation_id is None and d.refused_by == "run"
                   for d in decisions if not d.granted)
        assert len({d.reservation_id for d in granted}) == 10
        spend = await store.spend(agent, lease.run_id, 1.0, None)
        assert spend["run"] == {"scope": "run", "spent_usd": 1.0, "budget_usd": 1.0,
                                "remaining_usd": 0.0}

    async def test_settling_replaces_a_reservation_by_its_cost_or_releases_it(
            self, store: Store, agent: str) -> None:
        lease = await self.task_lease(store, agent)
        first = await store.reserve(agent, self.ask(lease, 0.5))
        second = await store.reserve(agent, self.ask(lease, 0.4, step=2))
        assert first.granted and second.granted
        assert first.reservation_id is not None and second.reservation_id is not None
        held = await store.spend(agent, lease.run_id, 1.0, None)
        assert held["held_usd"] == pytest.approx(0.9)
        await store.settle(agent, first.reservation_id, 0.125)
        await store.settle(agent, second.reservation_id, None)
        await store.settle(agent, second.reservation_id, 0.3)  # settled already: kept
        spend = await store.spend(agent, lease.run_id, 1.0, None)
        assert spend["run"]["spent_usd"] == pytest.approx(0.125)  # type: ignore[index]
        assert spend["held_usd"] == 0
        assert (await store.reserve(agent, self.ask(lease, 0.875, step=3))).granted

    async def test_a_day_s_budget_holds_across_the_agent_s_runs(
            self, store: Store, fresh_agent: str) -> None:
        one = await self.task_lease(store, fresh_agent)
        two = await self.task_lease(store, fresh_agent)
        assert (await store.reserve(fresh_agent, self.ask(one, 0.6, None, 1.0))).granted
        refused = await store.reserve(fresh_agent, self.ask(two, 0.6, None, 1.0))
        assert (refused.granted, refused.refused_by) == (False, "daily")
        granted = await store.reserve(fresh_agent, self.ask(two, 0.3, None, 1.0))
        assert granted.granted and granted.warnings == ("daily",)  # past 80 % for the first time
        again = await store.reserve(fresh_agent, self.ask(two, 0.05, None, 1.0, step=2))
        assert again.granted and again.warnings == ()
        spend = await store.spend(fresh_agent, two.run_id, None, 1.0)
        assert spend["daily"]["spent_usd"] == pytest.approx(0.95)  # type: ignore[index]
        assert spend["run"] == {"scope": "run", "spent_usd": pytest.approx(0.35),
                                "budget_usd": None, "remaining_usd": None}

    async def test_a_reservation_outliving_its_lease_is_charged_what_the_log_says(
            self, store: Store, agent: str) -> None:
        answered = await self.task_lease(store, agent)
        silent = await self.task_lease(store, agent)
        for lease in (answered, silent):
            assert (await store.reserve(agent, self.ask(lease, 0.5))).granted
        # the worker of `answered` recorded the response (cost 0.01), then both died
        await store.append(agent, answered, 1, [call_completed(1, answered.epoch, 0.01)],
                           ttl_s=60, release=True)
        await store.release_lease(silent)
        answered_spend = await store.spend(agent, answered.run_id, 1.0, None)
        silent_spend = await store.spend(agent, silent.run_id, 1.0, None)
        assert answered_spend["run"]["spent_usd"] == pytest.approx(0.01)  # type: ignore[index]
        assert silent_spend["run"]["spent_usd"] == pytest.approx(0.5)  # type: ignore[index]
        assert (answered_spend["held_usd"], silent_spend["held_usd"]) == (0, 0)
        assert (answered_spend["expired_reservations"],
                silent_spend["expired_reservations"]) == (0, 1)


def scheduled_run(slot: SlotToFire) -> NewRun:
    """The run of a schedule's slot as the host's run factory makes it."""
    return NewRun(run_id=new_id(), input=slot.input, idempotency_key=None,
                  events=[*first_events(slot.agent, slot.input), NewEvent.of(
                      ev.ScheduleFired(schedule=slot.schedule, slot=slot.slot_at.isoformat(),
                                       trigger=cast(Trigger, slot.trigger),
                                       timezone=slot.timezone))],
                  messages=[first_message(slot.input)])


class ScheduleStoreContract(StoreFixtures):
    """``toren.seams.store.ScheduleStore``: timetables, and each slot firing exactly one run.
    Uses ``RunLog`` and ``RunReader`` for the runs fired."""

    def make_run(self, slot: SlotToFire) -> NewRun:
        return scheduled_run(slot)

    async def test_sync_keeps_the_timetable_and_retires_what_is_gone(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        assert await store.seconds_to_next_slot([agent]) is None
        daily = ScheduleSpec(name="daily", cron="0 9 * * *", timezone="Europe/Paris",
                             input={"report": True}, missed="catchup", catchup_limit=2)
        hourly = ScheduleSpec(name="hourly", cron="0 * * * *")
        await store.sync_schedules(agent, [daily, hourly])
        found = {s.name: s for s in await store.list_schedules([agent])}
        assert set(found) == {"daily", "hourly"}
        kept = found["daily"]
        assert (kept.cron, kept.timezone, kept.input, kept.missed, kept.catchup_limit,
                kept.paused, kept.present) == ("0 9 * * *", "Europe/Paris", {"report": True},
                                               "catchup", 2, False, True)
        assert kept.next_fire_at is not None and kept.next_fire_at > datetime.now(UTC)
        seconds = await store.seconds_to_next_slot([agent])
        assert seconds is not None and 0 < seconds <= 3600

        await store.sync_schedules(agent, [hourly])
        found = {s.name: s for s in await store.list_schedules([agent])}
        assert (found["daily"].present, found["hourly"].present) == (False, True)
        assert [s.name for s in await store.list_schedules([agent], "hourly")] == ["hourly"]

    async def test_pause_resume_and_what_cannot_be_found(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        await store.sync_schedules(agent, [ScheduleSpec(name="s", cron="0 * * * *")])
        paused = await store.set_schedule_paused(agent, "s", True)
        assert paused.paused and paused.state == "paused"
        await store.sync_schedules(agent, [ScheduleSpec(name="s", cron="0 * * * *")])
        assert (await store.list_schedules([agent], "s"))[0].paused  # sync leaves pauses
        resumed = await store.set_schedule_paused(agent, "s", False)
        assert not resumed.paused
        assert resumed.next_fire_at is not None and resumed.next_fire_at > datetime.now(UTC)
        with pytest.raises(ScheduleNotFound):
            await store.set_schedule_paused(agent, "nope", True)
        with pytest.raises(ScheduleNotFound):
            await store.trigger_schedule(agent, "nope", self.make_run)

    async def test_a_trigger_fires_now_even_when_paused_but_never_a_removed_one(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        await store.sync_schedules(agent, [ScheduleSpec(name="s", cron="0 0 1 1 *",
                                                        input="by hand")])
        await store.set_schedule_paused(agent, "s", True)
        fired = await store.trigger_schedule(agent, "s", self.make_run)
        assert (fired.agent, fired.schedule, fired.trigger) == (agent, "s", "manual")
        record = await store.get_run(fired.run_id, agent)
        assert record is not None and (record.schedule, record.input) == ("s", "by hand")
        assert [r.id for r in await store.list_runs(agent=agent, schedule="s")] == [
            fired.run_id]
        assert [e.run_id for e in await self.outbox(store, agent, fired.run_id)] == [
            fired.run_id]
        [listed] = await store.list_schedules([agent], "s", fires=5)
        assert [(f["run_id"], f["trigger"]) for f in listed.fires] == [(fired.run_id,
                                                                        "manual")]
        assert listed.last_fired_at is not None

        await store.sync_schedules(agent, [])
        with pytest.raises(ScheduleRemoved):
            await store.trigger_schedule(agent, "s", self.make_run)

    async def test_each_slot_fires_one_run_whatever_the_number_of_workers(
            self, store: Store, fresh_agent: str) -> None:
        agent = fresh_agent
        await store.sync_schedules(agent, [ScheduleSpec(name="every-second",
                                                        cron="* * * * * *"),
                                           ScheduleSpec(name="paused", cron="* * * * * *")])
        await store.set_schedule_paused(agent, "paused", True)  # it never fires

        async def due() -> bool:
            seconds = await store.seconds_to_next_slot([agent])
            return seconds is not None and seconds <= 0

        await eventually(due, "the next slot of a per-second schedule coming due")
        fired = [slot for batch in await asyncio.gather(
            *(store.fire_due_schedules([agent], self.make_run) for _ in range(4)))
            for slot in batch]
        assert fired, "no worker fired the due slot"
        assert {slot.schedule for slot in fired} == {"every-second"}
        slots = Counter(slot.slot_at for slot in fired)
        assert set(slots.values()) == {1}, slots
        for slot in fired:
            record = await store.get_run(slot.run_id, agent)
            assert record is not None and record.schedule == "every-second"
        assert len({slot.run_id for slot in fired}) == len(fired)
        later = await store.fire_due_schedules([agent], self.make_run)
        assert all(slot.slot_at > max(slots) for slot in later)  # a fired slot never again
        assert all(slot.schedule == "every-second" for slot in later)
        assert await store.list_runs(agent=agent, schedule="paused") == []

