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

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "agent": self.agent, "kind": self.kind, "status": self.status,
            "input": self.input,
            "output": self.output, "stop_reason": self.stop_reason, "error": self.error,
            "idempotency_key": self.idempotency_key, "schedule": self.schedule,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
        }


__all__ = ["KEEP", "RunRecord", "RunUpdate"]
