"""Abstract bases of the one-of-N drivers chosen by configuration (stevedore namespaces).

``toren.store`` (``TOREN_STORE``), ``toren.queue`` (``TOREN_QUEUE``) and ``toren.runtime``
(``TOREN_RUNTIME``). The kernel talks to these bases only; it never imports an adapter.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from toren.core.runs import RunRecord, RunUpdate  # what store methods take and return

if TYPE_CHECKING:
    from toren.config import Settings
    from toren.core.events import Event, NewEvent
    from toren.keys import ApiKey


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


@dataclass(frozen=True)
class LeaseBusy:
    """Another worker holds the lease; it expires (at the latest) in ``retry_in_s`` seconds."""

    retry_in_s: float


@dataclass(frozen=True)
class OutgoingMessage:
    """A queue message to send with an append (same transaction on the Postgres queue)."""

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


class Store(abc.ABC):
    """Durable state: the control schema, one schema per agent, runs and their event log.

    Made by the host at startup (``driver(settings)``); ``open`` is awaited before any other
    method and ``close`` once at shutdown.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """One line saying which database is in use (printed at startup; no password)."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect (starting the embedded database if configured). Raise ``DatabaseUnavailable``
        naming the host when it cannot be reached within the connect timeout."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections (the embedded database keeps running for other processes)."""

    @abc.abstractmethod
    async def pending_migrations(self, agents: Sequence[AgentSchema]) -> list[Migration]:
        """Migrations not yet applied for the control schema and each agent's schema."""

    @abc.abstractmethod
    async def migrate(self, agents: Sequence[AgentSchema]) -> list[Migration]:
        """Apply pending migrations under a lock, register the agents; return what was applied.

        Idempotent and safe when several processes call it at once.
        """

    @abc.abstractmethod
    def render_migrations(self, migrations: Sequence[Migration]) -> str:
        """The SQL of ``migrations`` as one script to review (``toren db migrate --print``)."""

    @abc.abstractmethod
    async def health(self) -> dict[str, Any]:
        """``{"reachable": bool, ...}`` for ``/healthz``; never raises."""

    # -- runs and the event log --------------------------------------------------------------

    @abc.abstractmethod
    async def create_run(self, agent: str, run_id: str, input: Any, *,
                         idempotency_key: str | None, events: Sequence[NewEvent],
                         messages: Sequence[OutgoingMessage], kind: str = "run",
                         status: str = "queued") -> tuple[str, bool]:
        """Insert the run, its first ``run``-stream events and messages in one transaction.

        Returns ``(run_id, created)``; with an ``idempotency_key`` already used for this agent,
        returns the existing run's id and ``False`` and writes nothing. ``kind`` is ``run`` or
        ``session`` (which starts ``awaiting_input``).
        """

    @abc.abstractmethod
    async def session_input(self, agent: str, run_id: str, stream: str,
                            events: Sequence[NewEvent], messages: Sequence[OutgoingMessage],
                            idempotency_key: str | None = None
                            ) -> tuple[bool, str | None, int]:
        """Give a session the user's input, only if it awaits input, in one transaction.

        Taking the input sets the run ``running``, appends ``events`` at the end of ``stream``
        and sends ``messages``; a ``UserMessage`` gets its ``turn`` number from the stream in the
        same statement. Returns ``(taken, status, turn)``: ``status`` is the session's status
        as found (``None`` when there is no such session); nothing is written unless taken.
        With an ``idempotency_key`` that a ``UserMessage`` of the stream already carries,
        nothing is written and the result is ``(True, status, that message's turn)``.
        """

    @abc.abstractmethod
    async def acquire_lease(self, run_id: str, stream: str, holder: str,
                            ttl_s: float) -> Lease | None:
        """Take the stream's lease if it is free or expired (bumping the epoch); else ``None``."""

    @abc.abstractmethod
    async def acquire_and_load(self, agent: str, run_id: str, stream: str, holder: str,
                               ttl_s: float, *, with_finished: bool = False
                               ) -> tuple[Lease, list[Event]] | LeaseBusy:
        """``acquire_lease`` and, if it succeeded, the stream from its latest checkpoint on,
        in one round trip.

        With ``with_finished`` the events also include every ``TaskFinished`` of the run's
        task streams (what the orchestrator absorbs). ``LeaseBusy`` if the lease is held
        elsewhere, saying when it expires.
        """

    @abc.abstractmethod
    async def release_lease(self, lease: Lease) -> None:
        """Give the lease up early so another worker may take it at once."""

    @abc.abstractmethod
    async def load_stream(self, agent: str, run_id: str, stream: str) -> list[Event]:
        """Every event of one stream, in sequence order."""

    @abc.abstractmethod
    async def append(self, agent: str, lease: Lease, expected_seq: int,
                     events: Sequence[NewEvent], *, ttl_s: float,
                     messages: Sequence[OutgoingMessage] = (), run_update: RunUpdate | None = None,
                     ack: QueueMessage | None = None, release: bool = False,
                     progress: QueueMessage | None = None) -> None:
        """Append ``events`` at ``expected_seq``, ``expected_seq + 1``, ... in one transaction.

        The transaction also renews (or with ``release`` gives up) the lease, sends
        ``messages``, applies ``run_update`` and acknowledges ``ack``. It commits only if the
        lease is still held with the same epoch and the run is not cancelled; otherwise it
        raises ``LeaseLost`` or ``RunCancelled`` and writes nothing.

        ``progress`` is the message being worked (not acknowledged yet): the append shows that
        this delivery made progress, so its count of failed deliveries starts over. A
        message that kills its worker before making any is still dead-lettered; one that was
        merely in the same worker as such a message is not.
        """

    @abc.abstractmethod
    async def append_unleased(self, agent: str, run_id: str, stream: str,
                              events: Sequence[NewEvent], *,
                              run_update: RunUpdate | None = None,
                              only_if_active: bool = True) -> bool:
        """Append at the stream's next sequence number without holding its lease.

        For facts from outside the run (cancellation, dead letters). Sequence numbers are
        still compare-and-swap: a concurrent leased append makes one of the two retry.
        With ``only_if_active`` nothing is written (and ``False`` returned) for a finished run.
        """

    @abc.abstractmethod
    async def save_prompt(self, agent: str, sha256: str, text: str) -> None:
        """Keep a system prompt's text under its SHA-256 (content-addressed: once per distinct
        prompt). Called by the task loop before it records the ``TaskStarted`` that names the
        prompt, so every prompt a run's log names can be read back."""

    @abc.abstractmethod
    async def load_prompts(self, agent: str, hashes: Sequence[str]) -> dict[str, str]:
        """The kept prompts among ``hashes`` (SHA-256 -> text), for receipts."""

    @abc.abstractmethod
    async def get_run(self, run_id: str, agent: str | None = None) -> RunRecord | None:
        """One run, looked up in ``agent``'s schema or, if ``None``, in every registered one."""

    @abc.abstractmethod
    async def list_runs(self, *, agent: str | None = None, status: str | None = None,
                        limit: int = 50, agents: Sequence[str] | None = None,
                        before: tuple[datetime, str] | None = None,
                        kind: str | None = None) -> list[RunRecord]:
        """Newest runs first, optionally filtered by agent(s), status and kind; ``before`` is
        the ``(created_at, id)`` of the last run of the previous page (keyset pagination)."""

    @abc.abstractmethod
    async def load_events(self, agent: str, run_id: str,
                          after: Mapping[str, int] | None = None) -> list[Event]:
        """Events of a run, every stream, oldest first; with ``after`` (stream -> last seq
        seen) only the ones a reader has not seen."""

    @abc.abstractmethod
    async def live_workers(self, max_age_s: float) -> list[dict[str, Any]]:
        """Workers whose heartbeat is younger than ``max_age_s`` (id, version, agents, ...)."""

    @abc.abstractmethod
    async def ensure_messages(self, agent: str, run_id: str,
                              messages: Sequence[OutgoingMessage]) -> int:
        """Send each message unless one of the same kind and ``payload["key"]`` is queued."""

    @abc.abstractmethod
    async def cancel_run(self, run_id: str, reason: str) -> RunRecord | None:
        """Mark the run cancelled, drop its queued messages, record ``RunCancelled``.

        Returns the updated run, or ``None`` if there is no such run. Cancelling a finished
        run changes nothing.
        """

    @abc.abstractmethod
    async def guardian_sweep(self, agents: Sequence[str]) -> list[str]:
        """Send a ``run`` tick for every active run of ``agents`` with no queued message."""

    @abc.abstractmethod
    async def registered_agents(self) -> dict[str, str]:
        """Agent name -> schema of every agent ever registered in this database."""

    @abc.abstractmethod
    async def heartbeat(self, worker: dict[str, Any], ttl_s: float,
                        message_ids: Sequence[int], leases: Sequence[Lease] = ()) -> None:
        """Renew ``leases`` and the claimed ``message_ids`` of work in hand; record the
        worker's sign-in and liveness."""

    @abc.abstractmethod
    async def sign_out(self, worker_id: str) -> None:
        """Remove the worker's sign-in and release its leases (graceful shutdown)."""

    # -- API keys ----------------------------------------------------------------------------
    # Only a hash of each key's secret is stored; the key itself is shown once, at creation.

    @abc.abstractmethod
    async def create_key(self, name: str) -> tuple[ApiKey, str]:
        """Make a key named ``name``; return its record and the key itself (never stored)."""

    @abc.abstractmethod
    async def list_keys(self) -> list[ApiKey]:
        """Every key, revoked ones included, newest first."""

    @abc.abstractmethod
    async def revoke_key(self, id_or_prefix: str) -> ApiKey | None:
        """Revoke the key with this id or prefix (or the whole key); ``None`` if there is none.

        Revoking a revoked key changes nothing and returns it.
        """

    @abc.abstractmethod
    async def verify_key(self, token: str) -> ApiKey | None:
        """The record of ``token`` if it is an active key, else ``None``.

        Compares hashes in constant time and records the use in ``last_used_at``, at most once
        a minute per key so that a busy API does not write on every request.
        """


class Queue(abc.ABC):
    """Messages that wake workers: at-least-once, labelled by agent, with delayed delivery."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """One line saying where messages live (printed at startup)."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect; awaited after the store is open."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop listening and release connections."""

    @abc.abstractmethod
    async def claim(self, agents: Sequence[str], worker_id: str, limit: int,
                    visibility_s: float, max_deliveries: int
                    ) -> tuple[list[QueueMessage], list[QueueMessage]]:
        """Claim up to ``limit`` ready messages of ``agents``; hide each for ``visibility_s``.

        Returns ``(claimed, dead)``: ``dead`` are messages already delivered
        ``max_deliveries`` times, moved to the dead letters instead of being delivered again.
        """

    @abc.abstractmethod
    async def ack(self, message: QueueMessage, worker_id: str) -> None:
        """Delete a message this worker still holds (no-op if another worker reclaimed it)."""

    @abc.abstractmethod
    async def defer(self, message: QueueMessage, worker_id: str, delay_s: float) -> None:
        """Hand a held message back, visible again after ``delay_s``, without counting the
        delivery towards dead-lettering."""

    @abc.abstractmethod
    async def return_unknown(self, worker_id: str, held: Sequence[int]) -> int:
        """Hand back, without counting, every message claimed by ``worker_id`` except
        ``held``: after a claim whose answer was lost (the connection broke as it committed),
        the messages it took would otherwise stay hidden and count as a failed delivery.
        Returns how many went back."""

    @abc.abstractmethod
    async def enqueue(self, agent: str, run_id: str | None, message: OutgoingMessage) -> None:
        """Send one message on its own."""

    @abc.abstractmethod
    async def wait(self, timeout_s: float) -> None:
        """Return when a message may be ready (a notification) or after ``timeout_s``."""


class WorkerRuntime(abc.ABC):
    """Where workers run: pollers in this process (``inprocess``) or elsewhere (``fargate``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """One line saying how work is executed (printed at startup)."""

    @abc.abstractmethod
    async def start(self, host: Any) -> None:
        """Start executing work for ``host`` (a ``toren.Runtime``); return once started."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop claiming work, finish or release what is in hand, and return."""
