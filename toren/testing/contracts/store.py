"""Contracts of the store's lifecycle, its migrations and its live text, and ``StoreContract``:
every store contract in one class."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import ClassVar

import pytest

from toren.errors import ConfigError
from toren.seams.store import Store
from toren.testing.contracts.archive import RunArchiveIndexContract
from toren.testing.contracts.audit import AuditStoreContract
from toren.testing.contracts.base import StoreFixtures
from toren.testing.contracts.channels import (
    ChannelChatsContract,
    ChannelInboxContract,
    ChannelOutboxContract,
)
from toren.testing.contracts.decisions import (
    ApprovalStoreContract,
    BudgetLedgerContract,
    ScheduleStoreContract,
)
from toren.testing.contracts.evals import EvalStoreContract
from toren.testing.contracts.files import FileStoreContract
from toren.testing.contracts.fleet import (
    FleetReaderContract,
    GuardianContract,
    OutboxContract,
    WorkerRegistryContract,
)
from toren.testing.contracts.memory import MemoryStoreContract
from toren.testing.contracts.questions import QuestionStoreContract
from toren.testing.contracts.rate_limits import RateLimitStoreContract
from toren.testing.contracts.records import (
    AgentVersionStoreContract,
    KeyStoreContract,
    PromptStoreContract,
    ToolStateContract,
)
from toren.testing.contracts.runs import (
    ForkStoreContract,
    RunCostsContract,
    RunLogContract,
    RunReaderContract,
    RunSearchContract,
    SignalLogContract,
)
from toren.testing.contracts.support import (
    ContractAgent,
    eventually,
    new_agent_name,
    started,
)
from toren.testing.contracts.webhooks import WebhookStoreContract


class StoreLifecycleContract(StoreFixtures):
    """``toren.seams.store.StoreLifecycle``: what the host prints and ``/healthz`` asks."""

    async def test_the_store_describes_itself_in_one_line(self, store: Store) -> None:
        assert isinstance(store.description, str) and store.description.strip()
        assert "\n" not in store.description

    async def test_an_open_store_is_healthy(self, store: Store) -> None:
        health = await store.health()
        assert health["reachable"] is True

    async def test_two_stores_on_one_database_are_one_store(
            self, store: Store, agent: str) -> None:
        second = type(store)(store.settings)  # as another process makes it
        await second.open()
        try:
            run_id = await self.create(store, agent)
            assert await store.acquire_lease(run_id, "task:main", "w1", 60) is not None
            assert await second.acquire_lease(run_id, "task:main", "w2", 60) is None
            found = await second.get_run(run_id, agent)
            assert found is not None and found.id == run_id
        finally:
            await second.close()
        health = await second.health()  # never raises, even closed
        assert isinstance(health.get("reachable"), bool)


class MigratorContract(StoreFixtures):
    """``toren.seams.store.Migrator``: agents' schemas, migrated once, and their
    registration."""

    async def test_an_agent_s_pending_migrations_are_applied_once(self, store: Store) -> None:
        agent = ContractAgent(new_agent_name())
        assert await store.pending_migrations([]) == []  # the fixture migrated the control
        pending = await store.pending_migrations([agent])
        assert pending and {m.scope for m in pending} == {agent.schema_name}
        script = store.render_migrations(pending)
        assert isinstance(script, str) and script.strip()
        assert agent.name not in await store.registered_agents()

        applied = await store.migrate([agent])
        assert [(m.scope, m.version) for m in applied] == [(m.scope, m.version)
                                                           for m in pending]
        assert await store.pending_migrations([agent]) == []
        assert await store.migrate([agent]) == []
        assert (await store.registered_agents())[agent.name] == agent.schema_name

    async def test_processes_migrating_at_once_apply_each_migration_once(
            self, store: Store) -> None:
        agent = ContractAgent(new_agent_name())
        pending = await store.pending_migrations([agent])
        results = await asyncio.gather(*(store.migrate([agent]) for _ in range(3)))
        applied = Counter((m.scope, m.version) for result in results for m in result)
        assert applied == Counter((m.scope, m.version) for m in pending)
        assert await store.pending_migrations([agent]) == []

    async def test_an_agent_s_callers_are_as_its_last_registration_said(
            self, store: Store) -> None:
        name = new_agent_name()
        assert await store.accepted_callers(name) is None
        await store.migrate([ContractAgent(name, accepts_from=("caller",))])
        assert await store.accepted_callers(name) == ["caller"]
        await store.migrate([ContractAgent(name, accepts_from=("caller", "another"))])
        assert sorted(await store.accepted_callers(name) or []) == ["another", "caller"]
        await store.migrate([ContractAgent(name)])
        assert await store.accepted_callers(name) == []

    async def test_two_agents_cannot_share_a_schema(self, store: Store) -> None:
        name = new_agent_name("contract-clash")
        await store.migrate([ContractAgent(name)])
        clash = ContractAgent(name.replace("-", "_"))  # the same schema name
        assert clash.schema_name == ContractAgent(name).schema_name
        with pytest.raises(ConfigError):
            await store.migrate([clash])
        assert clash.name not in await store.registered_agents()


class LiveTextContract(StoreFixtures):
    """``toren.seams.store.LiveText``: model text to the watchers of a run, best effort. A
    run is watched while a reader waits for its appends (``RunReader.wait_for_appends``).

    ``live_text``: set ``False`` if the store keeps the defaults (publish and hear nothing);
    only what the defaults promise is checked then."""

    live_text: ClassVar[bool] = True

    async def test_text_of_an_unwatched_run_goes_nowhere(self, store: Store,
                                                         agent: str) -> None:
        told: list[tuple[str, bool]] = []
        store.on_run_watched(lambda run_id, watched: told.append((run_id, watched)))
        run_id = await self.create(store, agent)
        lease = await store.acquire_lease(run_id, "task:main", "w", 60)
        assert lease is not None
        await store.append(agent, lease, 1, [started(lease.epoch)], ttl_s=60)
        # a store may tell nothing (the default); what it tells must be true
        assert {watched for told_run, watched in told if told_run == run_id} <= {False}
        assert await store.publish_text(run_id, ["nobody"]) is False
        assert await store.publish_texts({run_id: ["nobody"]}) == set()
        assert await store.publish_texts({}) == set()

    async def test_text_of_a_watched_run_is_heard_in_order(self, store: Store,
                                                           agent: str) -> None:
        if not self.live_text:  # the defaults: nothing is sent, and a listener hears nothing
            run_id = await self.create(store, agent)
            heard_nothing: list[str] = []
            listening = asyncio.ensure_future(store.listen_text(heard_nothing.append))
            await store.wait_for_appends({run_id}, 0.1)
            assert await store.publish_text(run_id, ["piece"]) is False
            await asyncio.sleep(0.2)
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listening
            assert heard_nothing == []
            return
        watched, unwatched = await self.create(store, agent), await self.create(store, agent)
        heard: list[str] = []
        listener = asyncio.ensure_future(store.listen_text(heard.append))
        try:
            await store.wait_for_appends({watched}, 0.1)  # a live event stream opens
            rounds = 0

            async def delivered() -> bool:
                nonlocal rounds
                rounds += 1
                sent = [f"{watched}:{rounds}:{n}" for n in range(3)]
                found = await store.publish_texts({watched: sent, unwatched: ["never"]})
                assert found <= {watched}
                await asyncio.sleep(0.1)
                return found == {watched} and [p for p in heard if p in sent] == sent

            await eventually(delivered, "a watched run's text reaching a listener")
            assert "never" not in heard
            assert await store.publish_text(watched, ["one more"]) is True
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener


class StoreContract(StoreLifecycleContract, MigratorContract, RunLogContract, RunReaderContract,
                    ForkStoreContract, WorkerRegistryContract, GuardianContract, OutboxContract,
                    FleetReaderContract, KeyStoreContract, PromptStoreContract,
                    ToolStateContract, AgentVersionStoreContract, ApprovalStoreContract,
                    BudgetLedgerContract, ScheduleStoreContract, LiveTextContract,
                    FileStoreContract, ChannelInboxContract, ChannelChatsContract,
                    ChannelOutboxContract, RunArchiveIndexContract, QuestionStoreContract,
                    SignalLogContract, WebhookStoreContract, RateLimitStoreContract,
                    AuditStoreContract, RunCostsContract, RunSearchContract,
                    MemoryStoreContract, EvalStoreContract):
    """Every store contract: what a ``toren.seams.store.Store`` driver runs."""
