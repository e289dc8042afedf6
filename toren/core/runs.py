"""A run's read-model row and the changes an append makes to it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

#: Marker for "leave this column as it is" in ``RunUpdate``.
KEEP: Any = object()


@dataclass(frozen=True)
class RunUpdate:
    """Changes to a run's read-model row, written in the same transaction as an append."""

    status: str | None = None
    output: Any = KEEP
    stop_reason: str | None = None
    error: Any = KEEP  # a dict sets the latest error, None clears it
    finished: bool = False


@dataclass(frozen=True)
class RunRecord:
    """A run's read-model row."""

    id: str
    agent: str
    status: str
    input: Any
    output: Any = None
    stop_reason: str | None = None
    error: dict[str, Any] | None = None
    idempotency_key: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    #: ``run`` (one task to its end) or ``session`` (a conversation that takes turns).
    kind: str = "run"
    #: The schedule (``schedules:`` in agent.yaml) that started the run, if one did.
    schedule: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: For a child run (started by another run's task): the agent, run and task that started
    #: it, and ``peer`` (a cross-agent call the parent waits for) or ``background``.
    parent_agent: str | None = None
    parent_run_id: str | None = None
    parent_task: str | None = None
    child_kind: str | None = None
    #: Cross-agent calls above this run (0 for a run started by a person or a program).
    depth: int = 0
    #: The version of its agent's definition the run executes (``toren.agents.versions``):
    #: the one it started with, or the one it was upgraded to; ``None`` before it has one.
    agent_version: str | None = None
    #: That version's ``version:`` from agent.yaml, if it has one.
    agent_human_version: str | None = None

    @property
    def parent(self) -> dict[str, Any] | None:
        """``{"agent", "run_id", "task_id", "kind"}`` of the run that started this one."""
        if self.parent_run_id is None:
            return None
        return {"agent": self.parent_agent, "run_id": self.parent_run_id,
                "task_id": self.parent_task, "kind": self.child_kind}

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "agent": self.agent, "kind": self.kind, "status": self.status,
            "input": self.input,
            "output": self.output, "stop_reason": self.stop_reason, "error": self.error,
            "idempotency_key": self.idempotency_key, "schedule": self.schedule,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "parent": self.parent, "depth": self.depth,
            "agent_version": self.agent_version,
            "agent_human_version": self.agent_human_version,
        }


@dataclass(frozen=True)
class ChildLink:
    """What a child run records about the task that started it (``RunLog.create_run``): the
    task is woken when the child ends, and cancelling the parent cancels the child."""

    agent: str
    run_id: str
    task_id: str
    #: ``peer`` (the parent's task waits for the answer) or ``background`` (it does not).
    kind: str
    #: The child's depth: the parent's plus one.
    depth: int


__all__ = ["KEEP", "ChildLink", "RunRecord", "RunUpdate"]


#: How ``GET /runs`` can order runs (``sort=``, with a leading ``-`` for largest first):
#: when they were created, how long they took (so far, while they work), what they cost,
#: and their model calls and steps (``RunTotals``).
RUN_SORTS = ("created", "duration", "cost", "model_calls", "steps")


@dataclass(frozen=True)
class RunTotals:
    """What a run's model calls add up to, as its receipt's totals count them: every model
    call and step in its log (a fork's copied ones included) and the cost of the calls it made
    itself (copied calls cost nothing; calls whose price is unknown are counted apart)."""

    model_calls: int = 0
    steps: int = 0
    cost_usd: float = 0.0
    cost_unknown_calls: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"model_calls": self.model_calls, "steps": self.steps,
                "cost_usd": round(self.cost_usd, 10),
                "cost_unknown_calls": self.cost_unknown_calls}


@dataclass(frozen=True)
class RunSearch:
    """Which runs ``RunReader.search_runs`` lists, and in what order: what ``GET /runs`` asks
    when it is given words to find, a version, a date range or a sort.

    ``text`` holds words that must all occur in a run's input or output (a web-search-like
    query: ``"quoted phrase"``, ``or``, ``-word``; whole words, case-insensitive, in the first
    100,000 characters of each). ``version`` is an agent version's hash (or a prefix of at
    least 4 characters) or its ``version:`` from agent.yaml. ``since`` and ``until`` bound
    ``created_at`` (``since`` included, ``until`` not). ``sort`` is one of ``RUN_SORTS``,
    ``descending`` for largest (or newest) first; ties are broken newest first. ``offset``
    skips that many runs of the ordered list (pages of a sort other than newest first);
    ``before`` is the ``(created_at, id)`` of the last run of the previous page of a newest
    first list (keyset pagination, as ``list_runs``: only runs strictly older).
    """

    agents: tuple[str, ...] = ()
    status: str | None = None
    kind: str | None = None
    schedule: str | None = None
    text: str | None = None
    version: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    sort: str = "created"
    descending: bool = True
    limit: int = 50
    offset: int = 0
    before: tuple[datetime, str] | None = None
