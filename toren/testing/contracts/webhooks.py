"""Contract of ``WebhookStore``: deliveries written with the status change, claimed once,
retried, recorded."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from toren.core.runs import RunUpdate
from toren.core.webhooks import WebhookSubscription
from toren.seams.store import Store
from toren.seams.store.webhooks import WebhookAttempt
from toren.testing.contracts.base import StoreFixtures
from toren.testing.contracts.support import first_events, new_id

HOOK = WebhookSubscription("https://hooks.example.com/run", ("finished", "awaiting_input"))
AGENT_HOOK = WebhookSubscription("https://hooks.example.com/agent", ("finished",), "HOOK_KEY")


def attempt(n: int, status: int | None = 200) -> WebhookAttempt:
    return WebhookAttempt(n, datetime.now(UTC), 12.5, status, None if status == 200 else "no")


class WebhookStoreContract(StoreFixtures):
    """``toren.seams.store.WebhookStore``. Uses ``RunLog`` (runs with webhooks, cancel,
    sessions) and ``Migrator`` (an agent's ``notify``)."""

    async def test_ending_a_run_writes_one_delivery_per_subscription_that_asked(
            self, store: Store) -> None:
        agent = await self.register(store, notify=(AGENT_HOOK,))
        run_id = new_id()
        await store.create_run(agent, run_id, "x", idempotency_key=None,
                               events=first_events(agent, "x"), messages=[],
                               webhooks=[HOOK.to_json()])
        assert await store.webhook_deliveries(run_id) == []
        await store.cancel_run(run_id, "contract")
        await store.cancel_run(run_id, "contract")  # ended once: written once
        listed = await store.webhook_deliveries(run_id)
        assert [(d.url, d.event, d.run_status, d.source, d.state) for d in listed] == [
            (HOOK.url, "finished", "cancelled", "run", "pending"),
            (AGENT_HOOK.url, "finished", "cancelled", "agent", "pending")]

        claimed = await store.claim_webhook_deliveries([agent], "d1", 10, 60.0)
        assert {d.id for d in claimed} == {d.id for d in listed}
        assert {(d.run_id, d.attempts, d.body) for d in claimed} == {(run_id, 1, None)}
        assert {d.secret_env for d in claimed} == {None, "HOOK_KEY"}
        # hidden while claimed: nobody else gets them
        assert await store.claim_webhook_deliveries([agent], "d2", 10, 60.0) == []

    async def test_a_delivery_is_retried_with_one_body_then_recorded_delivered(
            self, store: Store) -> None:
        agent = await self.register(store)
        run_id = new_id()
        await store.create_run(agent, run_id, None, idempotency_key=None,
                               events=first_events(agent, None, session=True), messages=[],
                               kind="session", status="awaiting_input",
                               webhooks=[HOOK.to_json()])
        # a session's turn: running, then awaiting input again (an event each time it parks)
        await store.session_input(agent, run_id, "task:main", [], [])
        lease = await store.acquire_lease(run_id, "task:main", "w", 30)
        assert lease is not None
        await store.append(agent, lease, 1, [], ttl_s=30,
                           run_update=RunUpdate(status="awaiting_input"))
        [first] = await store.claim_webhook_deliveries([agent], "d1", 10, 60.0)
        assert (first.event, first.run_status) == ("awaiting_input", "awaiting_input")

        assert await store.fix_webhook_body(first.id, '{"n": 1}') == '{"n": 1}'
        assert await store.fix_webhook_body(first.id, '{"n": 2}') == '{"n": 1}'
        assert not await store.record_webhook_attempt(first.id, "someone-else", attempt(1),
                                                      "delivered")
        assert await store.record_webhook_attempt(first.id, "d1", attempt(1, 500), "retry",
                                                  0.2)
        assert await store.claim_webhook_deliveries([agent], "d1", 10, 60.0) == []
        began = time.monotonic()
        while not (again := await store.claim_webhook_deliveries([agent], "d2", 10, 60.0)):
            assert time.monotonic() - began < 10, "the retry never came due"
            await asyncio.sleep(0.05)
        [second] = again
        assert (second.id, second.attempts, second.body) == (first.id, 2, '{"n": 1}')
        assert await store.record_webhook_attempt(second.id, "d2", attempt(2), "delivered")

        [shown] = await store.webhook_deliveries(run_id)
        assert (shown.state, shown.attempts, shown.last_error) == ("delivered", 2, None)
        assert [(a.attempt, a.status_code) for a in shown.history] == [(1, 500), (2, 200)]
        assert await store.claim_webhook_deliveries([agent], "d3", 10, 0.0) == []

    async def test_a_failed_delivery_is_never_claimed_again(self, store: Store) -> None:
        agent = await self.register(store, notify=(AGENT_HOOK,))
        run_id = await self.create(store, agent)
        await store.cancel_run(run_id, "contract")
        [claimed] = await store.claim_webhook_deliveries([agent], "d1", 10, 60.0)
        assert await store.record_webhook_attempt(claimed.id, "d1", attempt(1, None), "failed")
        [shown] = await store.webhook_deliveries(run_id)
        assert (shown.state, shown.last_error, shown.ended_at is not None) == (
            "failed", "no", True)
        assert await store.claim_webhook_deliveries([agent], "d2", 10, 0.0) == []

    async def test_ended_deliveries_are_forgotten_after_their_age_pending_ones_never(
            self, store: Store) -> None:
        agent = await self.register(store, notify=(AGENT_HOOK,))
        ended, waiting = await self.create(store, agent), await self.create(store, agent)
        await store.cancel_run(ended, "contract")
        await store.cancel_run(waiting, "contract")
        claimed = await store.claim_webhook_deliveries([agent], "d1", 10, 60.0)
        [done] = [d for d in claimed if d.run_id == ended]
        assert await store.record_webhook_attempt(done.id, "d1", attempt(1), "delivered")
        await store.forget_webhook_deliveries(3600.0)  # too young to forget
        assert len(await store.webhook_deliveries(ended)) == 1
        await asyncio.sleep(0.05)
        assert await store.forget_webhook_deliveries(0.01) >= 1
        assert await store.webhook_deliveries(ended) == []
        assert len(await store.webhook_deliveries(waiting)) == 1  # pending: kept

    async def test_wait_webhooks_returns_within_its_timeout(self, store: Store) -> None:
        began = time.monotonic()
        await store.wait_webhooks(0.1)
        assert time.monotonic() - began < 5
