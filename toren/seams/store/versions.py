"""Agent versions: definition files kept content-addressed, and the version each run is on."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from toren.core.events import NewEvent
from toren.core.versions import AgentVersion


@dataclass(frozen=True)
class VersionSummary:
    """One version of an agent as ``toren agents versions`` lists it."""

    hash: str
    human_version: str | None
    first_seen: datetime | None
    runs: int
    active_runs: int
    files: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"hash": self.hash, "human_version": self.human_version,
                "first_seen": self.first_seen.isoformat() if self.first_seen else None,
                "runs": self.runs, "active_runs": self.active_runs, "files": self.files}


class AgentVersionStore(abc.ABC):
    """Versions of agent definitions and the version each run executes.

    The host calls ``save_agent_version`` for every agent it serves before it creates a run
    of it (``Runtime.start``), so every version a run's log names can be loaded back; workers
    call ``run_agent_version`` for each message and ``load_agent_version`` (cached by hash) for
    a version their directory no longer holds; ``toren jobs upgrade`` and ``onChange: upgrade``
    call ``set_run_version``.

    A run's version is the ``version`` (and ``human_version``) of the last
    ``AgentVersionPinned`` or ``AgentVersionUpgraded`` on its ``run`` stream, whichever write
    appended it (``create_run``'s first events, an unleased or leased append,
    ``set_run_version``): what ``run_agent_version`` and ``RunRecord.agent_version`` /
    ``agent_human_version`` say, from the same transaction on.
    """

    @abc.abstractmethod
    async def save_agent_version(self, agent: str, version: AgentVersion) -> None:
        """Keep ``version`` and its files' bytes (each distinct file once); nothing if kept."""

    @abc.abstractmethod
    async def load_agent_version(self, agent: str, version_hash: str) -> AgentVersion | None:
        """The kept version with its files, or ``None``."""

    @abc.abstractmethod
    async def run_agent_version(self, agent: str, run_id: str) -> tuple[bool, str | None]:
        """``(found, version)``: whether the run exists and the version it is on now
        (``None`` for a run created without one)."""

    def on_run_version(self, seen: Callable[[str, str | None], None]) -> None:  # noqa: B027
        """Have ``seen(run_id, version)`` called whenever the store learns a run's version in
        the course of other work: the ``postgres`` store reads it in each leased append's own
        statement, so a worker knows a run's version as of its last append without a read of
        its own per message and per step (``toren.host.versions``). By default never called
        (the host then reads with ``run_agent_version``)."""

    @abc.abstractmethod
    async def set_run_version(self, agent: str, run_id: str, expected: str | None,
                              events: Sequence[NewEvent]) -> bool:
        """Append ``events`` (an ``AgentVersionPinned`` or ``AgentVersionUpgraded``) to the run
        stream, unleased, only if the run is not finished and is still on ``expected``: a
        compare-and-set, so two workers applying ``onChange: upgrade`` record it once.
        Return whether it was appended."""

    @abc.abstractmethod
    async def list_agent_versions(self, agent: str) -> list[VersionSummary]:
        """Every kept version of ``agent``, newest first (first kept), with its runs and its
        unfinished runs counted (runs on it now)."""
