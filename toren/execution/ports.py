"""What execution is handed to work one queue message: the host's capabilities, passed in.

The worker (``toren.host.worker``) makes one ``ExecutionPorts`` per process and passes it to
``work_task`` and ``tick_run``. Execution code reaches nothing else: no worker, no host API, no
plugin host; a test can hand it ports of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from toren.config import Settings
from toren.core.events import Event, NewEvent
from toren.execution.tool_threads import ToolThreads
from toren.seams.model import Model
from toren.seams.shapes import Lease, QueueMessage
from toren.seams.store import FileStore, PromptStore, RunLog

#: Take a stream's lease and read it from its latest checkpoint on, for the message being
#: worked: ``(message, stream, with_finished)`` -> the lease and events, or ``None`` when another
#: worker holds the lease (the message has then been handed back to come again later).
#: ``with_finished`` adds every ``TaskFinished`` of the run's task streams (a run tick absorbs
#: them).
Acquire = Callable[[QueueMessage, str, bool], Awaitable[tuple[Lease, list[Event]] | None]]
#: Told after every successful append: ``(agent, stream, first_seq, events)``.
AppendObserver = Callable[[str, str, int, Sequence[NewEvent]], None]
#: Resolve a model id (``anthropic/...``) for an agent's ``baseUrl`` (or ``None``).
ResolveModel = Callable[[str, str | None], Model]


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
    #: Uploaded files, which tools read through ``ToolCallContext.read_file``.
    files: FileStore | None = None
