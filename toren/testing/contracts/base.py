"""The fixtures and helpers every store contract class shares: the driver's ``store``, agents
registered for one test, a run's first write, and a look at the outbox."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_asyncio

from toren.core.runs import ChildLink
from toren.seams.shapes import OutboxEntry
from toren.seams.store import Store
from toren.testing.contracts.support import (
    ContractAgent,
    first_events,
    first_message,
    new_agent_name,
    new_id,
)

#: The relay id the contracts look at the outbox with (never a worker's or a lease holder's).
OBSERVER = "contract-observer"
#: The agent that tests share (``agent``); ``other_agent`` adds ``-2``.
SHARED_AGENT = "contract-shared"


@pytest.mark.asyncio
class StoreFixtures:
    """What a driver provides (``store``) and what the contracts build on it.

    Override ``store`` in the subclass: an opened store whose control schema is migrated
    (``await store.migrate([])`` done), closed at teardown. It may hold what earlier tests of
    the class wrote (one database for the class is fastest): tests make runs with fresh ids
    and read only their own, and a test that reads what is agent-wide (a listing, a gauge, a
    day's budget) registers an agent of its own (``fresh_agent``).
    """

    @pytest.fixture
    def store(self) -> Store:
        pytest.fail(f"{type(self).__name__} must override the fixture `store`: an opened, "
                    "migrated store of your driver (see toren.testing.contracts)")

    @pytest_asyncio.fixture
    async def agent(self, store: Store) -> str:
        """An agent every test of the class shares (registered again: a no-op once done)."""
        return await self.register(store, SHARED_AGENT)

    @pytest_asyncio.fixture
    async def other_agent(self, store: Store) -> str:
        """A second shared agent."""
        return await self.register(store, f"{SHARED_AGENT}-2")

    @pytest_asyncio.fixture
    async def fresh_agent(self, store: Store) -> str:
        """An agent registered for this test only."""
        return await self.register(store)

    async def register(self, store: Store, name: str | None = None, **fields: Any) -> str:
        name = name or new_agent_name()
        await store.migrate([ContractAgent(name, **fields)])
        return name

    async def create(self, store: Store, agent: str, input: Any = "x", *,
                     key: str | None = None, session: bool = False,
                     parent: ChildLink | None = None) -> str:
        """A new run (or session) of ``agent`` as the host creates one; its id."""
        run_id = new_id()
        found = await store.create_run(
            agent, run_id, input, idempotency_key=key,
            events=first_events(agent, input, key, session=session),
            messages=[] if session else [first_message(input)],
            kind="session" if session else "run",
            status="awaiting_input" if session else "queued", parent=parent)
        assert found == (run_id, True)
        return run_id

    async def outbox(self, store: Store, agent: str, *run_ids: str) -> list[OutboxEntry]:
        """The due outbox entries of ``agent`` for ``run_ids``, oldest first (claimed by an
        observer and left visible)."""
        entries = await store.claim_outbox([agent], OBSERVER, 10_000, 0.0)
        return [entry for entry in entries if entry.run_id in run_ids]

    async def drain(self, store: Store, *agents: str) -> None:
        """Remove every due outbox entry of ``agents`` (as a relay that sent them would)."""
        entries = await store.claim_outbox(list(agents), OBSERVER, 10_000, 60.0)
        await store.ack_outbox(OBSERVER, [entry.id for entry in entries])
