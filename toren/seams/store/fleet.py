"""The fleet reader: queue, runs and workers at a glance, for ``/metrics`` and ``toren top``."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class QueueGauge:
    """One agent's queue: messages ready, claimed (in flight) and delayed, and how long the
    oldest ready message has waited (0 when none is ready; ``None`` when the queue cannot
    say, as SQS cannot). ``waiting_concurrency``: of the ready ones, those waiting for a slot
    of the agent's ``concurrency:`` limit (docs/guides/flow-control.md)."""

    ready: int = 0
    in_flight: int = 0
    delayed: int = 0
    oldest_ready_age_s: float | None = 0.0
    waiting_concurrency: int = 0

    def waiting(self) -> dict[str, int]:
        """Messages waiting, by reason: ``queued`` (ready, for a worker, in priority order),
        ``concurrency`` (ready, for a concurrency slot) and ``delayed`` (not due yet)."""
        return {"queued": max(self.ready - self.waiting_concurrency, 0),
                "concurrency": self.waiting_concurrency, "delayed": self.delayed}

    def to_json(self) -> dict[str, Any]:
        age = self.oldest_ready_age_s
        return {"ready": self.ready, "in_flight": self.in_flight, "delayed": self.delayed,
                "oldest_ready_age_s": None if age is None else round(age, 3),
                "waiting": self.waiting()}


@dataclass(frozen=True)
class FleetGauges:
    """What ``/metrics`` reads from the database at scrape time (cached briefly)."""

    #: By agent.
    queue: dict[str, QueueGauge] = field(default_factory=dict)
    #: Messages ever dead-lettered, by agent.
    dead_letters: dict[str, int] = field(default_factory=dict)
    #: Runs not yet finished, by agent and status.
    active_runs: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Live workers by version.
    workers_by_version: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RunInFlight:
    """A run that has not finished, as ``toren top`` shows it."""

    id: str
    agent: str
    status: str
    created_at: datetime
    updated_at: datetime
    #: The latest model call's step of any of its tasks (0 before the first).
    step: int
    #: The task streams with events.
    tasks: int
    #: The latest error recorded (a retry in progress), or ``None``.
    error: dict[str, Any] | None


class FleetReader(abc.ABC):
    """Reads across agents for operators.

    ``toren.host.metrics`` calls ``fleet_gauges`` at most once per cache period per process
    when ``/metrics`` is scraped; ``toren top`` calls both each refresh. Neither is on the
    execution path.
    """

    @abc.abstractmethod
    async def fleet_gauges(self, agents: Sequence[str], live_window_s: float) -> FleetGauges:
        """Queue depth and oldest ready age, dead letters and active runs of ``agents``, and
        workers with a heartbeat younger than ``live_window_s`` by version."""

    @abc.abstractmethod
    async def runs_in_flight(self, agents: Sequence[str], limit: int) -> list[RunInFlight]:
        """Up to ``limit`` unfinished runs of ``agents``, oldest first."""

    async def agent_lanes(self) -> dict[str, str]:
        """Each registered agent's lane (``runtime:`` in agent.yaml, ``short`` or ``long``) as
        the process that registered it last had it; ``toren top`` and ``GET /fleet`` show
        it. The default knows none (``{}``): the lanes then show as unknown."""
        return {}
