"""Schedules: ``GET /schedules``, pause/resume/trigger, ``toren schedules`` and the workers'
schedule loop call this service."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from toren.agents import AgentSpec
from toren.core.schedules import RECENT_FIRES, ScheduleRecord
from toren.errors import ScheduleNotFound
from toren.host.versions import AgentVersions
from toren.seams.store.migrations import Migrator
from toren.seams.store.schedules import FiredSlot, RunFactory, ScheduleStore


class SchedulesService:
    """The served agents' ``schedules:`` in the database: synced at start, fired exactly once
    per slot, listed, paused, resumed and triggered. ``runtime.schedules``; needs the store
    open. ``scheduled_run`` builds the run a claimed slot starts (the runtime's, so a fired
    run is made exactly as ``start_run`` makes one)."""

    def __init__(self, store: ScheduleStore, registered: Migrator,
                 agents: Mapping[str, AgentSpec], versions: AgentVersions,
                 check_served: Callable[[str], AgentSpec], scheduled_run: RunFactory) -> None:
        self._store = store
        self._registered = registered
        self._agents = agents
        self._versions = versions
        self._check_served = check_served
        self._scheduled_run = scheduled_run

    @property
    def any(self) -> bool:
        """Whether any served agent lists ``schedules:`` (else workers never look)."""
        return any(agent.schedules for agent in self._agents.values())

    async def sync(self) -> None:
        """Write the ``schedules:`` of every served agent to the database (workers do at
        start): new entries start firing, changed ones restart from their next slot, removed
        ones stop."""
        for agent in self._agents.values():
            await self._store.sync_schedules(agent.name, agent.schedules)

    async def fire_due(self) -> list[FiredSlot]:
        """Fire every due slot of the served agents' schedules, each exactly once (whatever
        the number of processes calling this at once); the slots this call fired."""
        await self._versions.save_served()  # the runs fired name them (a no-op once kept)
        return await self._store.fire_due_schedules(list(self._agents), self._scheduled_run)

    async def list(self, agent: str | None = None) -> list[ScheduleRecord]:
        """The schedules of ``agent``, else of the served agents (with none served, as in
        ``toren schedules list``: of every agent in the database), removed ones included."""
        agents = ([agent] if agent else list(self._agents)
                  or sorted(await self._registered.registered_agents()))
        return await self._store.list_schedules(agents)

    async def get(self, agent: str, name: str) -> ScheduleRecord:
        """One schedule with its most recent fires; ``ScheduleNotFound`` if there is none.
        Like pause and resume, it reads the database: the agent need not be served here."""
        found = await self._store.list_schedules([agent], name, fires=RECENT_FIRES)
        if not found:
            raise ScheduleNotFound(f"agent {agent!r} has no schedule {name!r} (see `toren "
                                   "schedules list`)")
        return found[0]

    async def pause(self, agent: str, name: str) -> ScheduleRecord:
        """Stop ``name`` from firing until ``resume`` (kept across restarts)."""
        return await self._store.set_schedule_paused(agent, name, True)

    async def resume(self, agent: str, name: str) -> ScheduleRecord:
        """Fire ``name`` again from its next slot after now (paused slots are skipped)."""
        return await self._store.set_schedule_paused(agent, name, False)

    async def trigger(self, agent: str, name: str) -> FiredSlot:
        """Start a run of ``name`` now, as its next slot would (even while paused). The agent
        must be served here: its run is built from its directory, whose ``schedules:`` are
        written to the database first (so a schedule no worker has synced yet can fire)."""
        spec = self._check_served(agent)
        await self._store.sync_schedules(agent, spec.schedules)
        await self._versions.save(agent)
        return await self._store.trigger_schedule(agent, name, self._scheduled_run)
