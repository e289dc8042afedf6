"""What execution is handed to work one queue message: the host's capabilities, passed in.

The worker (``toren.host.worker``) makes one ``ExecutionPorts`` per process and passes it to
``work_task`` and ``tick_run``. Execution code reaches nothing else: no worker, no host API, no
plugin host; a test can hand it ports of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from toren.config import Settings
from toren.core.events import Event, NewEvent
from toren.core.runs import ChildLink
from toren.execution.rate_guard import RateLimiter
from toren.execution.tool_threads import ToolThreads
from toren.seams.model import Model
from toren.seams.policies import PolicyHooks
from toren.seams.shapes import Lease, QueueMessage, TextDelta
from toren.seams.store import (
    ApprovalStore,
    BudgetLedger,
    FileStore,
    MemoryStore,
    PromptStore,
    QuestionStore,
    RunLog,
    ToolStateStore,
)

if TYPE_CHECKING:
    from toren.agents import AgentSpec

#: Take a stream's lease and read it from its latest checkpoint on, for the message being
#: worked: ``(message, stream, with_finished)`` -> the lease and events, or ``None`` when another
#: worker holds the lease (the message has then been handed back to come again later).
#: ``with_finished`` adds every ``TaskFinished`` of the run's task streams (a run tick absorbs
#: them).
Acquire = Callable[[QueueMessage, str, bool], Awaitable[tuple[Lease, list[Event]] | None]]
#: Reads one stream of a run: ``(agent, run_id, stream)`` -> its events in order.
ReadStream = Callable[[str, str, str], Awaitable[Sequence[Event]]]
#: Told after every successful append: ``(agent, stream, first_seq, events)``.
AppendObserver = Callable[[str, str, int, Sequence[NewEvent]], None]
#: Told each piece of a model's text as it is generated (live watchers; never blocks).
PublishText = Callable[[TextDelta], None]
#: Resolve a model id (``anthropic/...``) for an agent's ``baseUrl`` (or ``None``).
ResolveModel = Callable[[str, str | None], Model]
#: Embed texts with a registered embedder: ``(embedder name, texts)`` -> one vector per text.
Embed = Callable[[str, Sequence[str]], Awaitable[list[list[float]]]]


@dataclass(frozen=True)
class ChildOutcome:
    """How a child run ended: its status, answer (or error) and its own cost."""

    status: Literal["completed", "stopped", "failed", "cancelled"]
    stop_reason: str | None
    output: str | None
    error: dict[str, Any] | None
    cost_usd: float


class ChildRuns(Protocol):
    """Runs a task starts in other agents (``ask_<peer>``, ``start_background_run``); made by
    the host (``toren.host.children``), called by the task loop (``toren.execution.children``)."""

    async def start(self, *, caller: str, parent: ChildLink, agent: str, request: str,
                    idempotency_key: str) -> tuple[str, int]:
        """Create the run of ``agent`` (or find the one ``idempotency_key`` already made);
        return its id and call depth. ``CallRefused`` when consent is missing on either side,
        the agent is not registered, or the chain of calls is too deep. ``parent.depth`` is
        ignored: the host computes it from the caller's run."""
        ...

    async def outcome(self, agent: str, run_id: str) -> ChildOutcome | None:
        """How the run ended, or ``None`` while it has not."""
        ...


#: Told after a background run's notice is committed to a session: ``(agent, session id,
#: text)``; the host hands it to the channels running in this process (``Channel.notify``).
SessionNotice = Callable[[str, str, str], Awaitable[None]]


#: See ``ExecutionPorts.version_current``.
VersionCurrent = Callable[["AgentSpec", str], Awaitable[bool]]
#: See ``ExecutionPorts.version_under_lease``.
VersionUnderLease = Callable[["AgentSpec", Lease], bool]


@dataclass(frozen=True)
class ExecutionPorts:
    """The capabilities a task loop or a run tick uses, made by the host."""

    #: The run log: appends, and the outbox messages they carry (``toren.seams.store.RunLog``).
    store: RunLog
    settings: Settings
    model: ResolveModel
    acquire: Acquire
    appended: AppendObserver
    #: ``TOREN_CRASH_AT``: SIGKILL this process at a named point (tests only).
    crash_point: Callable[[str], None]
    #: Where sync tools run (``TOREN_TOOL_THREADS`` at once).
    tool_threads: ToolThreads
    #: Keeps the text of each system prompt a task starts with (the audit trail).
    prompts: PromptStore
    #: Starts and reads runs of other agents for peer calls and background runs.
    children: ChildRuns
    session_notice: SessionNotice
    #: Reservations of model-call cost against run and daily budgets (``limits:``).
    budgets: BudgetLedger
    #: Keeps the approvals a task waits for, and reads their decisions.
    approvals: ApprovalStore
    #: Keeps the questions ``ask_user`` asks, and reads their answers; ``None``: the tool
    #: answers that nobody can be asked here.
    questions: QuestionStore | None = None
    #: Keeps what agents with ``memory:`` remember; ``None``: the memory tools answer that
    #: this host keeps no memories.
    memory: MemoryStore | None = None
    #: Embeds memories and recall queries for agents with ``memory.embeddings``
    #: (``register_embedders``); ``None``: recall is by words only.
    embed: Embed | None = None
    #: Reads one stream of a run (``RunReader.load_stream``): a tool that waits for a signal
    #: reads the run's signals with it; ``None``: tools cannot wait here.
    read_stream: ReadStream | None = None
    #: Where tools keep durable state beside a run (``ToolCallContext.state``); ``None``: none.
    tool_state: ToolStateStore | None = None
    #: Where the pieces of model text go as they are generated (``toren.host.live``); by
    #: default nowhere.
    text_delta: PublishText = field(default=lambda delta: None)
    #: Uploaded files, which tools read through ``ToolCallContext.read_file``.
    files: FileStore | None = None
    #: Asks the policy plugins an agent lists under ``policies:`` (``None``: none installed).
    policies: PolicyHooks | None = None
    #: Whether a task may take its next step on the definition it was handed:
    #: ``(agent, run_id)`` -> ``False`` once the run was upgraded to another version (or the
    #: served definition's ``onChange: upgrade`` wants it moved); the task then hands its
    #: message back so the next handler runs the version now due. By default always ``True``.
    version_current: VersionCurrent | None = None
    #: Whether a run tick or a task handed ``agent`` may go on with it: ``(agent, lease)`` ->
    #: ``False`` when the run's version, as the store read it with the lease, is not
    #: ``agent``'s (or is not pinned yet, or the served definition wants it upgraded); the
    #: handler then raises ``RunVersionStale`` without appending, and the host resolves the
    #: version and hands the message over again. By default always ``True``.
    version_under_lease: VersionUnderLease | None = None
    #: The fleet's provider rate limits (``TOREN_RATE_LIMITS``) and their shared budget;
    #: ``None`` (the default): none configured, and a model call reaches no rate-limit store.
    rate_limits: RateLimiter | None = None
    #: The database's clock (``toren.host.db_clock``): the deadlines execution records (tool
    #: and signal waits, timers) and the delays of its wake-ups (an approval's or question's
    #: expiry) are computed by it, as the store decides leases, delays and expiries by it; by
    #: default this host's clock.
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
