"""The run log: runs, stream leases and appends, each with the outbox writes it carries."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from toren.core.runs import ChildLink, RunRecord, RunUpdate
from toren.seams.shapes import Lease, LeaseBusy, OutgoingMessage, QueueMessage

if TYPE_CHECKING:
    from toren.core.events import Event, NewEvent


class MessageHandOff(Protocol):
    """A worker that takes the messages its own appends send, already claimed (made by the
    worker, registered with ``RunLog.hand_off_to``, called by the store around each leased
    append that sends messages)."""

    #: The worker's id: the holder of its leases, and the claimer of its messages.
    id: str
    #: How long a handed message stays hidden from other workers (as a claim hides it).
    visibility_s: float

    def room(self, agent: str, holder: str | None, releasing: bool) -> int:
        """How many messages due now an append by ``holder`` to a run of ``agent`` may hand
        to this worker (``0``: none; ``releasing``: the append ends its handler's work);
        ``holder`` is ``None`` for a run created in this process (its first messages)."""
        ...

    def handed(self, messages: Sequence[QueueMessage]) -> None:
        """The append committed and claimed ``messages`` for this worker: work them."""
        ...

    def handed_unknown(self) -> None:
        """An append's connection broke and the append turned out to have committed: any
        messages it claimed for this worker are not in hand (hand them back)."""
        ...


class RunLog(abc.ABC):
    """Writing runs and their event log, the heart of Toren's durability rules.

    Execution (``toren.execution``, through ``ExecutionPorts.store``) appends what a task or a
    run tick recorded; the worker takes and releases leases (``acquire_and_load``,
    ``release_lease``) and records dead letters (``append_unleased``); the host API creates
    runs and sessions, gives sessions their input and cancels runs.

    The outbox contract: the ``messages`` of ``create_run``, ``session_input``, ``append`` and
    ``ensure_messages`` are written to the outbox in the same transaction as the rest of the
    write, so a message is sent if and only if its write commits (see
    ``toren.seams.store.outbox``); each is due once its ``delay_s`` has passed.

    Run ids are UUIDs' text, made by the host. Leases and expiries go by the store's clock (a
    worker's clock never decides). A run is finished once its status is ``completed``,
    ``stopped``, ``failed`` or ``cancelled`` (``toren.core.events.TERMINAL_STATUSES``).
    ``toren.testing.contracts.RunLogContract`` checks all of this.
    """

    @abc.abstractmethod
    async def create_run(self, agent: str, run_id: str, input: Any, *,
                         idempotency_key: str | None, events: Sequence[NewEvent],
                         messages: Sequence[OutgoingMessage], kind: str = "run",
                         status: str = "queued",
                         parent: ChildLink | None = None,
                         webhooks: Sequence[Mapping[str, Any]] = (),
                         priority: int = 0,
                         concurrency_key: str | None = None) -> tuple[str, bool]:
        """Insert the run, its first ``run``-stream events and messages in one transaction.

        Called by ``Runtime.start_run`` and ``Runtime.start_session``, and by the task loop
        (through ``toren.host.children``) for a peer call or a background run. Returns
        ``(run_id, created)``; with an ``idempotency_key`` already used for this agent,
        returns the existing run's id and ``False`` and writes nothing. ``kind`` is ``run`` or
        ``session`` (which starts ``awaiting_input``). A ``parent`` makes it a child run: when
        it becomes terminal (finished, cancelled or dead-lettered), whichever write makes it
        so, a ``task`` message for the parent's agent wakes the parent's task in the same
        transaction (payload ``task_id``: the parent's task, ``subagent`` and ``input``
        ``None``, ``key``: ``child:<child run id>``, ``child_run_id``), so the wake-up is never
        lost. The run's row records the link (``RunRecord.parent``, ``depth``).
        ``webhooks`` (``WebhookSubscription.to_json``'s) are kept with the run: whichever write
        later changes its status to one a webhook asked for writes its delivery in the same
        transaction (``toren.seams.store.webhooks``).
        ``priority`` and ``concurrency_key`` (docs/guides/flow-control.md) are kept for the
        run so that every message of it, now and later, carries them (``QueueMessage.priority``)
        for a queue with ``flow_control``; a store without flow control may ignore them.
        """

    @abc.abstractmethod
    async def session_input(self, agent: str, run_id: str, stream: str,
                            events: Sequence[NewEvent], messages: Sequence[OutgoingMessage],
                            idempotency_key: str | None = None
                            ) -> tuple[bool, str | None, int]:
        """Give a session the user's input, only if it awaits input, in one transaction.

        Called by ``Runtime.send_message`` and ``Runtime.close_session``. Taking the input
        sets the run ``running``, appends ``events`` at the end of ``stream`` and sends
        ``messages``; a ``UserMessage`` gets its ``turn`` number from the stream in the same
        transaction (its data's ``turn``: one more than the stream's ``UserMessage`` events),
        so of two concurrent inputs one is taken. Returns ``(taken, status, turn)``:
        ``status`` is the session's status as found (``None`` when there is no such session,
        or the run is no session); nothing is written unless taken.
        With an ``idempotency_key`` that a ``UserMessage`` of the stream already carries,
        nothing is written and the result is ``(True, status, that message's turn)``.
        """

    @abc.abstractmethod
    async def acquire_lease(self, run_id: str, stream: str, holder: str,
                            ttl_s: float) -> Lease | None:
        """Take the stream's lease if it is free or expired (bumping the epoch); else ``None``.

        A lease held and unexpired is refused to anyone, its holder included. Each new holder
        of a stream gets a higher epoch than every earlier one (the fencing token appends
        check). The worker's path is ``acquire_and_load``; this one is for tests and tools.
        """

    @abc.abstractmethod
    async def acquire_and_load(self, agent: str, run_id: str, stream: str, holder: str,
                               ttl_s: float, *, with_finished: bool = False
                               ) -> tuple[Lease, list[Event]] | LeaseBusy:
        """``acquire_lease`` and, if it succeeded, the stream from its latest checkpoint on,
        in one round trip.

        Called by the worker for each message it works, before execution folds the stream.
        "From its latest checkpoint": from the stream's last ``TaskCheckpoint`` event on, that
        event included (the whole stream if it has none), in sequence order. With
        ``with_finished`` the events also include every ``TaskFinished`` of the run's
        task streams (what the orchestrator absorbs) and every event of its ``signals``
        stream (the signals a workflow may take). ``LeaseBusy`` if the lease is held
        (by anyone), saying when it expires. The events must include every event committed
        under earlier epochs (their ``created_at`` may be ``None``). The lease should carry
        the run's ``RunCreated`` time and ``traceparent`` (``Lease.run_created_at``): a
        tracing worker starts the run's root span there and joins that trace; without the
        time it reads the run row at the run's end.
        """

    @abc.abstractmethod
    async def release_lease(self, lease: Lease) -> None:
        """Give the lease up early so another worker may take it at once (called by the worker
        when a handler ends without its last append having released it). Only the lease of
        this holder at this epoch: one taken over since is left to its new holder."""

    @abc.abstractmethod
    async def append(self, agent: str, lease: Lease, expected_seq: int,
                     events: Sequence[NewEvent], *, ttl_s: float,
                     messages: Sequence[OutgoingMessage] = (), run_update: RunUpdate | None = None,
                     ack: QueueMessage | None = None, release: bool = False,
                     progress: QueueMessage | None = None) -> None:
        """Append ``events`` at ``expected_seq``, ``expected_seq + 1``, ... in one transaction.

        Called by execution after every durable step (a model response, tool results, a run
        tick). The transaction also renews (or with ``release`` gives up) the lease, writes
        ``messages`` to the outbox, applies ``run_update`` and deletes ``ack`` from the outbox
        if the lease holder claimed it there. It commits only if the lease is still held with
        the same epoch, unexpired (even if nobody took it since), and the run is not
        cancelled; otherwise it raises ``LeaseLost`` or ``RunCancelled`` and writes nothing.
        A store that knows which database server granted a lease raises ``LeaseFenced`` (a
        ``LeaseLost``) for one that another server granted (the primary before a failover,
        whose log may have been longer): the worker hands its message back at once.
        The sequence numbers are a compare-and-swap: if any of them is taken (another append
        wrote there first), it raises ``LeaseLost`` and writes nothing, so of two appends at one
        number exactly one commits. ``run_update`` never changes a run already finished (the
        events are appended all the same). If the connection breaks with the append in
        flight, the store finds out from the log whether it committed before it answers.

        ``progress`` is the message being worked (not acknowledged yet): the append shows that
        this delivery made progress, so its count of failed deliveries starts over. A
        message that kills its worker before making any is still dead-lettered; one that was
        merely in the same worker as such a message is not. ``ack`` and ``progress`` concern
        a queue that reads the outbox; with any other queue the host acknowledges ``ack``
        through the queue once the append has committed (``toren.host.relay``).
        """

    def hand_off_to(self, worker: MessageHandOff | None) -> None:  # noqa: B027
        """Let ``worker`` take the messages its own leased appends send, and the first ones of
        the runs created in its process, claimed for it in the same transaction (no claim
        statement, no wake-up of other workers), as many as its ``room`` says; the others are
        sent as usual. Called by the worker when it starts (``None`` when it stops). By
        default a store hands off nothing."""

    @abc.abstractmethod
    async def append_unleased(self, agent: str, run_id: str, stream: str,
                              events: Sequence[NewEvent], *,
                              run_update: RunUpdate | None = None,
                              only_if_active: bool = True) -> bool:
        """Append at the stream's next sequence number without holding its lease.

        For facts from outside the run: the worker records a dead letter with it. Sequence
        numbers are still compare-and-swap: a concurrent leased append makes one of the two
        retry. With ``only_if_active`` nothing is written (and ``False`` returned) for a
        finished run.
        """

    @abc.abstractmethod
    async def cancel_run(self, run_id: str, reason: str) -> RunRecord | None:
        """Mark the run cancelled, drop its messages from the outbox, record ``RunCancelled``.

        Called by ``Runtime.cancel_run``. The run's status and stop reason become
        ``cancelled`` and it is finished (``finished_at``); ``RunCancelled`` (``reason``) is
        appended to its ``run`` stream, unleased. Returns the updated run, or ``None`` if there
        is no such run. Cancelling a finished run changes nothing (and returns it). Messages
        already in a queue that does not read the outbox stay there and are no-ops when they
        arrive.
        """

    @abc.abstractmethod
    async def run_status(self, agent: str, run_id: str) -> str | None:
        """The run's status (``None`` if there is no such run). Called by the task loop while
        tool calls run, every third of the lease TTL, to notice a cancel and stop waiting."""

    @abc.abstractmethod
    async def ensure_messages(self, agent: str, run_id: str,
                              messages: Sequence[OutgoingMessage]) -> int:
        """Write each message to the outbox unless one of the same kind and
        ``payload["key"]`` is pending there for this run (claimed or not); return how many
        were written.

        Called by the orchestrator on a guardian's tick, to re-send the message of every
        unfinished task and unfired timer.
        """
