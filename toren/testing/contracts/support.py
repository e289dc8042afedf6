"""What the contract suites share: agents to register, a run's first writes, and waiting."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from toren.agents import schema_name_for
from toren.core import events as ev
from toren.core.events import NewEvent
from toren.core.webhooks import WebhookSubscription
from toren.execution.messages import task_message
from toren.seams.shapes import OutgoingMessage

T = TypeVar("T")

#: How long a test waits for something a driver does in its own time (a lease or a visibility
#: timeout running out): generous, for a loaded CI machine; a test that passes takes far less.
PATIENCE_S = 15.0


@dataclass(frozen=True)
class ContractAgent:
    """An agent as ``Migrator.migrate`` sees one (``toren.seams.shapes.AgentSchema``), with
    the ``accepts_from``, ``notify`` and ``runtime`` an ``AgentSpec`` also carries."""

    name: str
    directory: Path = Path("contract-agents")
    model: str = "toren/scripted"
    accepts_from: tuple[str, ...] = field(default=())
    notify: tuple[WebhookSubscription, ...] = field(default=())
    #: ``runtime:``: its lane (``toren.host.lanes``).
    runtime: str = "short"

    @property
    def schema_name(self) -> str:
        return schema_name_for(self.name)


def new_agent_name(prefix: str = "contract") -> str:
    """A name no other test uses (agent-wide reads then see only this test's writes)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def new_id() -> str:
    """A run id as the host makes them (a UUID's text)."""
    return str(uuid.uuid4())


def first_events(agent: str, input: Any, key: str | None = None, *,
                 session: bool = False) -> list[NewEvent]:
    """The first events of a run as ``Runtime.start_run`` writes them."""
    return [NewEvent.of(ev.RunCreated(agent=agent, input=input, idempotency_key=key,
                                      session=session)),
            NewEvent.of(ev.TaskScheduled(task_id="main", subagent=None, input=input,
                                         session=session))]


def first_message(input: Any = None) -> OutgoingMessage:
    """The first message of a run (its main task's)."""
    return task_message("main", None, input)


def started(epoch: int) -> NewEvent:
    """A task's first event, written under the lease of ``epoch``."""
    return NewEvent.of(ev.TaskStarted(task_id="main", subagent=None, model="toren/scripted",
                                      input="x", limits={}, tools=(), prompt_sha256="0" * 64,
                                      epoch=epoch))


def call_started(step: int, epoch: int) -> NewEvent:
    return NewEvent.of(ev.ModelCallStarted(step=step, epoch=epoch))


def call_completed(step: int, epoch: int, cost_usd: float | None = 0.0) -> NewEvent:
    return NewEvent.of(ev.ModelCallCompleted(
        step=step, epoch=epoch, model="toren/scripted", text="done", tool_calls=(),
        stop_reason="end_turn", usage=ev.TokenUsage(input_tokens=10, output_tokens=5),
        cost_usd=cost_usd, latency_ms=1.0, repeated=False))


def task_finished(epoch: int, task_id: str = "main") -> NewEvent:
    return NewEvent.of(ev.TaskFinished(task_id=task_id, status="completed",
                                       stop_reason="end_turn", output="done", error=None,
                                       steps=1, cost_usd=0.0, epoch=epoch))


def kinds(events: Sequence[Any]) -> list[tuple[str, int, str]]:
    """``(stream, seq, type)`` of each event, as read."""
    return [(e.stream, e.seq, e.type) for e in events]


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str, *,
                     timeout_s: float = PATIENCE_S, interval_s: float = 0.05) -> T:
    """Call ``probe`` until it returns something true; return that. Fails the test naming
    ``what`` if it never does within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = await probe()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:g}s")
        await asyncio.sleep(interval_s)
