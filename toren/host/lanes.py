"""Runtime lanes: which agents a worker claims, by their ``runtime:`` (``short`` or ``long``).

A lane is the set of agents with that ``runtime:``. A worker started with ``--lane long``
(``TOREN_LANE=long``) claims only the long agents' messages, ``--lane short`` only the others',
and ``all`` (the default of ``toren worker``, and what ``toren dev`` always serves) both: a
deployment with one worker pool keeps serving every agent. The queue needs nothing of its own
for this: a worker claims by agent name (the Postgres claim filters by the list; toren-sqs
receives from each agent's own queue), so a lane is just the list a worker hands it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class HasRuntime(Protocol):
    """What a lane needs of an agent: its name and ``runtime:``."""

    @property
    def name(self) -> str: ...

    @property
    def runtime(self) -> str: ...


def agents_in_lane(agents: Iterable[HasRuntime], lane: str) -> list[str]:
    """The names of ``agents`` a worker of ``lane`` (``short``, ``long`` or ``all``) serves."""
    return [agent.name for agent in agents if lane in ("all", agent.runtime)]

