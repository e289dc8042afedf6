"""The small records the drivers and the kernel exchange: migrations, leases, messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol


class AgentSchema(Protocol):
    """What the store needs of an agent to give it a schema and register it (an ``AgentSpec``
    is one)."""

    @property
    def name(self) -> str: ...

    @property
    def schema_name(self) -> str: ...

    @property
    def directory(self) -> Path: ...

    @property
    def model(self) -> str: ...


@dataclass(frozen=True)
class Migration:
    """One numbered migration of one scope (``control`` or an agent's schema)."""

    scope: str
    version: int
    name: str
    sql: str


@dataclass(frozen=True)
class Lease:
    """The right to append to one stream, fenced by ``epoch``."""

    run_id: str
    stream: str
    holder: str
    epoch: int
    #: What the store read of the run with the lease (not part of the lease's identity): for
    #: tracing, when its ``RunCreated`` was written and that event's ``traceparent``; and the
    #: run's agent version (``version_read``: whether the store read it at all).
    run_created_at: datetime | None = field(default=None, compare=False)
    traceparent: str | None = field(default=None, compare=False)
    agent_version: str | None = field(default=None, compare=False)
    version_read: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class LeaseBusy:
    """Another worker holds the lease; it expires (at the latest) in ``retry_in_s`` seconds."""

    retry_in_s: float


@dataclass(frozen=True)
class OutgoingMessage:
    """A queue message written to the outbox with an append (the same transaction)."""

    kind: str
    payload: dict[str, Any]
    delay_s: float = 0.0


@dataclass(frozen=True)
class QueueMessage:
    """A claimed queue message. ``attempts`` counts deliveries, this one included."""

    id: int
    agent: str
    run_id: str | None
    kind: str
    payload: dict[str, Any]
    attempts: int
    #: Seconds the message waited in the queue since it became due, if the queue knows.
    waited_s: float | None = None
    #: Its run's priority (``POST /runs`` ``priority``, or the agent's ``priority:``; 0 by
    #: default), as the queue knows it: work of a higher priority is served first, here and
    #: by whatever else orders waiters (docs/guides/flow-control.md).
    priority: int = 0


@dataclass(frozen=True)
class OutboxEntry:
    """A due outbox message claimed by an outbox relay, to be sent to the queue and then
    acknowledged (``Outbox.ack_outbox``)."""

    id: int
    agent: str
    run_id: str | None
    kind: str
    payload: dict[str, Any]

    @property
    def message(self) -> OutgoingMessage:
        """The message to send (due now: its delay was spent in the outbox)."""
        return OutgoingMessage(self.kind, self.payload)


#: The longest ``TextDelta.text``: longer pieces are cut (a piece must fit in one notification,
#: e.g. Postgres NOTIFY's 8000 bytes, even with every character escaped in JSON).
TEXT_DELTA_MAX_CHARS = 1000


@dataclass(frozen=True)
class TextDelta:
    """A piece of a model's text as it is generated, for live watchers only: never written to
    the event log (the durable record is the completed call's ``ModelCallCompleted``), so a
    watcher may miss some (best-effort) and renders the completed text when that arrives.

    ``task_id`` and ``step`` name the call: the ``ModelCallCompleted`` with the same pair ends
    it. ``index`` counts the call's pieces from 0, so a watcher can tell a gap.
    """

    run_id: str
    task_id: str
    step: int
    index: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "task_id": self.task_id, "step": self.step,
                "index": self.index, "text": self.text}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TextDelta:
        return cls(str(data["run_id"]), str(data["task_id"]), int(data["step"]),
                   int(data["index"]), str(data["text"]))
