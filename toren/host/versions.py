"""Which definition of its agent a run executes: its pinned version, loaded from the database.

A worker serves the definitions its directories hold now. A run is pinned to the version it
started with (``AgentVersionPinned``); when that is not what the worker serves, the worker
runs it on the stored version (files restored under a temporary directory and loaded like any
agent directory, once per version and process), unless the served definition says
``onChange: upgrade`` (the run is moved to it, recorded as ``AgentVersionUpgraded``). A run is
never switched without that event.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from toren.agents import AgentSpec, load_agent
from toren.agents.candidates import with_model
from toren.agents.versions import AgentVersion, materialize
from toren.core import events as ev
from toren.core.events import NewEvent
from toren.errors import AgentVersionMissing
from toren.seams.shapes import Lease
from toren.seams.store import AgentVersionStore
from toren.seams.tool_sources import ToolSource
from toren.seams.tools import Tool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VersionCheck:
    """A run's version as a handler last read it, and when (monotonic seconds)."""

    version: str | None
    read_at: float


class AgentVersions:
    """Resolve a run to the ``AgentSpec`` it executes; keep served versions in the store.

    Args:
        store: where versions and each run's version live.
        served: the definitions this process loaded from its directories, by agent name.
        tools: plugin tools, for loading a stored version (as for a directory).
        unavailable: tools plugins could not register here, by name, with why.
        recheck_s: how old a run's version may be when a task checks it between steps.
    """

    def __init__(self, store: AgentVersionStore, served: Mapping[str, AgentSpec],
                 tools: Mapping[str, Tool], unavailable: Mapping[str, str] | None = None,
                 *, recheck_s: float = 2.0,
                 known_models: Callable[[str], object] | None = None,
                 tool_sources: Mapping[str, ToolSource] | None = None) -> None:
        self.store = store
        self.served = served
        self.tools = tools
        self.unavailable = unavailable
        self.known_models = known_models
        #: Installed tool sources (``mcpServers:``), for loading a stored version.
        self.tool_sources = tool_sources
        self.recheck_s = recheck_s
        self._loaded: dict[tuple[str, str], AgentSpec] = {}
        self._loading: dict[tuple[str, str], asyncio.Lock] = {}
        self._checks: dict[str, VersionCheck] = {}
        self._root: Path | None = None

    # -- keeping versions ----------------------------------------------------------------------

    async def save(self, agent: str) -> AgentVersion | None:
        """Keep the served definition of ``agent`` (before a run of it is created)."""
        spec = self.served.get(agent)
        if spec is None or spec.version is None:
            return None
        await self.store.save_agent_version(agent, spec.version)
        return spec.version

    async def save_served(self) -> None:
        for agent in self.served:
            await self.save(agent)

    def pin_event(self, agent: str) -> NewEvent | None:
        """The ``AgentVersionPinned`` that goes with a new run of ``agent`` served here."""
        version = self.served[agent].version
        if version is None:
            return None
        return NewEvent.of(ev.AgentVersionPinned(version=version.hash, human_version=version.human))

    # -- resolving a run -----------------------------------------------------------------------

    async def spec_for_run(self, agent: str, run_id: str, worker: str, *,
                           task: bool = False) -> AgentSpec:
        """The definition the run executes now. A run with no version yet (created by another
        agent's task, or before versions were kept) is pinned to the served one; a run on
        another version is upgraded to the served one if it says ``onChange: upgrade``.
        For a ``task`` message, a version the run was seen on less than ``recheck_s`` ago
        (``seen``) is taken without reading it again."""
        serving = self.served[agent]
        if serving.version is None:
            return serving
        check = self._checks.get(run_id)
        if (task and check is not None and check.version == serving.version.hash
                and time.monotonic() - check.read_at < self.recheck_s):
            # a task may start on what an append of its run said a moment ago, as it takes
            # each step on a version that old (``current``); a run tick reads afresh
            return serving
        for _ in range(5):  # each pass loses at most one race to another setter
            found, pinned = await self.store.run_agent_version(agent, run_id)
            if not found:
                return serving  # the handler finds no run and says so
            self._checks[run_id] = VersionCheck(pinned, time.monotonic())
            if pinned == serving.version.hash:
                return serving
            if pinned is None:
                await self.save(agent)
                event = self.pin_event(agent)
                assert event is not None
                if await self.store.set_run_version(agent, run_id, None, [event]):
                    self._checks[run_id] = VersionCheck(serving.version.hash, time.monotonic())
                    return serving
                continue
            if serving.on_change == "upgrade":
                await self.save(agent)
                upgraded = ev.AgentVersionUpgraded(
                    version=serving.version.hash, human_version=serving.version.human,
                    from_version=pinned, reason="on_change", requested_by=worker)
                if await self.store.set_run_version(agent, run_id, pinned,
                                                    [NewEvent.of(upgraded)]):
                    log.info("run %s of %s upgraded from version %s to %s (onChange: upgrade)",
                             run_id, agent, pinned[:12], serving.version.short)
                    self._checks[run_id] = VersionCheck(serving.version.hash, time.monotonic())
                    return serving
                # the run ended, or someone else moved it: read it again
                found, now = await self.store.run_agent_version(agent, run_id)
                if now == pinned:
                    return await self.load(agent, pinned)  # ended on its own version
                continue
            return await self.load(agent, pinned)
        raise AgentVersionMissing(f"the version of run {run_id} kept changing while a worker "
                                  "read it")

    def spec_to_try(self, agent: str, run_id: str) -> AgentSpec:
        """The definition a run tick of ``run_id`` starts with, without reading anything: the
        stored version this process last saw the run on (if loaded here), else the served
        one. The tick checks it under its lease (``under_lease``) before it appends."""
        serving = self.served[agent]
        check = self._checks.get(run_id)
        if serving.version is None or check is None or check.version is None:
            return serving
        return self._loaded.get((agent, check.version), serving)

    def under_lease(self, spec: AgentSpec, lease: Lease) -> bool:
        """Whether a run tick may go on with ``spec``: the run's version, read by the store
        with ``lease``, is ``spec``'s, and the served definition does not want it upgraded.
        ``False`` also when the run is not pinned yet (``spec_for_run`` pins it)."""
        if spec.version is None or not lease.version_read:
            return True
        self.seen(lease.run_id, lease.agent_version)
        if lease.agent_version != spec.version.hash:
            return False
        serving = self.served.get(spec.name)
        return not (serving is not None and serving.version is not None
                    and serving.on_change == "upgrade"
                    and serving.version.hash != spec.version.hash)

    def seen(self, run_id: str, version: str | None) -> None:
        """The store read ``run_id``'s version in the course of an append (``on_run_version``):
        as good as a read of our own now."""
        self._checks[run_id] = VersionCheck(version, time.monotonic())
        self._forget_old_checks()

    def _forget_old_checks(self) -> None:
        if len(self._checks) > 50_000:  # forget the oldest reads
            for old in list(self._checks)[:25_000]:
                self._checks.pop(old, None)

    async def current(self, spec: AgentSpec, run_id: str) -> bool:
        """Whether a task of ``run_id`` handed ``spec`` may take its next step on it: the
        run's version (read at most every ``recheck_s``) is still ``spec``'s, and the served
        definition does not want it upgraded."""
        if spec.version is None:
            return True
        serving = self.served.get(spec.name)
        if (serving is not None and serving.version is not None
                and serving.on_change == "upgrade"
                and serving.version.hash != spec.version.hash):
            return False
        check = self._checks.get(run_id)
        if check is None or time.monotonic() - check.read_at >= self.recheck_s:
            _found, pinned = await self.store.run_agent_version(spec.name, run_id)
            check = VersionCheck(pinned, time.monotonic())
            self._checks[run_id] = check
            self._forget_old_checks()
        return check.version in (None, spec.version.hash)

    async def load(self, agent: str, version_hash: str) -> AgentSpec:
        """The stored version as an ``AgentSpec`` (loaded once per process and version)."""
        key = (agent, version_hash)
        spec = self._loaded.get(key)
        if spec is not None:
            return spec
        lock = self._loading.setdefault(key, asyncio.Lock())
        async with lock:
            spec = self._loaded.get(key)
            if spec is not None:
                return spec
            version = await self.store.load_agent_version(agent, version_hash)
            if version is None:
                raise AgentVersionMissing(
                    f"a run of {agent} is pinned to version {version_hash[:12]}, which this "
                    "database does not hold (its files are kept when a process serving that "
                    "definition creates a run); upgrade the run with `toren jobs upgrade`")
            directory = materialize(version, self._cache_root(), agent)
            # importing tools.py / workflow.py waits on a thread: keep the event loop free
            spec = await asyncio.to_thread(
                load_agent, directory, self.tools, self.known_models,
                unavailable=self.unavailable, tool_sources=self.tool_sources)
            if spec.name != agent:
                raise AgentVersionMissing(f"version {version_hash[:12]} of {agent} names the "
                                          f"agent {spec.name!r}")
            log.info("loaded version %s of %s from the database", version.short, agent)
            self._loaded[key] = spec
            return spec

    async def with_model(self, agent: str, version_hash: str, model: str) -> AgentSpec:
        """Stored version ``version_hash`` of ``agent`` with its agent.yaml saying ``model:
        <model>`` (``toren.agents.candidates.with_model``, as ``toren eval run --model``
        makes it): a definition of its own, loaded here, kept in the store (so any worker
        can run a run pinned to it) and cached like a loaded version."""
        base = await self.load(agent, version_hash)
        root = Path(tempfile.mkdtemp(prefix="with-model-", dir=self._cache_root()))
        directory = with_model(base.directory, model, root)
        spec = await asyncio.to_thread(
            load_agent, directory, self.tools, self.known_models,
            unavailable=self.unavailable, tool_sources=self.tool_sources)
        assert spec.version is not None
        await self.store.save_agent_version(agent, spec.version)
        self._loaded.setdefault((agent, spec.version.hash), spec)
        return self._loaded[(agent, spec.version.hash)]

    def _cache_root(self) -> Path:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="toren-versions-"))
        return self._root

    def close(self) -> None:
        """Remove the restored files (their modules stay imported)."""
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        self._loaded.clear()
