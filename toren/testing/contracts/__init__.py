"""Driver contract suites: pytest classes a store or queue driver subclasses with one fixture.

Each class checks what the docstrings of one interface of ``toren.seams`` promise, through its
methods only (no SQL, nothing of one driver), concurrency rules included: a driver that passes
is one the host can run on. A store driver runs every store contract at once::

    import pytest_asyncio
    from toren.config import Settings
    from toren.testing.contracts import StoreContract

    class TestMyStore(StoreContract):
        @pytest_asyncio.fixture
        async def store(self):
            store = MyStore(Settings(database_url=...))
            await store.open()
            await store.migrate([])
            yield store
            await store.close()

or adopts one layer at a time (``class TestMyRunLog(RunLogContract)``: each class's docstring
names the interfaces it also uses to look). A queue driver subclasses ``QueueContract`` with a
``make_queue`` fixture, an archive backend ``ArchiveContract`` with a ``backend`` fixture.
Then ``pytest``. The suites need pytest and pytest-asyncio; they mark
their tests, so ``asyncio_mode`` may be ``strict`` or ``auto``.

``python -m toren.testing.contracts`` prints, per interface, its abstract methods and which of
them the suites call.
"""

from __future__ import annotations

from toren.testing.contracts.archive import ArchiveContract, RunArchiveIndexContract
from toren.testing.contracts.audit import AuditStoreContract
from toren.testing.contracts.channels import (
    ChannelChatsContract,
    ChannelInboxContract,
    ChannelOutboxContract,
)
from toren.testing.contracts.decisions import (
    ApprovalStoreContract,
    BudgetLedgerContract,
    ScheduleStoreContract,
)
from toren.testing.contracts.evals import EvalStoreContract
from toren.testing.contracts.files import FileStoreContract
from toren.testing.contracts.fleet import (
    FleetReaderContract,
    GuardianContract,
    OutboxContract,
    WorkerRegistryContract,
)
from toren.testing.contracts.memory import MemoryStoreContract
from toren.testing.contracts.questions import QuestionStoreContract
from toren.testing.contracts.queue import QueueContract
from toren.testing.contracts.rate_limits import RateLimitStoreContract
from toren.testing.contracts.records import (
    AgentVersionStoreContract,
    KeyStoreContract,
    PromptStoreContract,
    ToolStateContract,
)
from toren.testing.contracts.runs import (
    ForkStoreContract,
    RunCostsContract,
    RunLogContract,
    RunReaderContract,
    RunSearchContract,
    SignalLogContract,
)
from toren.testing.contracts.store import (
    LiveTextContract,
    MigratorContract,
    StoreContract,
    StoreLifecycleContract,
)
from toren.testing.contracts.webhooks import WebhookStoreContract

__all__ = [
    "AgentVersionStoreContract",
    "ApprovalStoreContract",
    "ArchiveContract",
    "AuditStoreContract",
    "BudgetLedgerContract",
    "ChannelChatsContract",
    "ChannelInboxContract",
    "ChannelOutboxContract",
    "EvalStoreContract",
    "FileStoreContract",
    "FleetReaderContract",
    "ForkStoreContract",
    "GuardianContract",
    "KeyStoreContract",
    "LiveTextContract",
    "MemoryStoreContract",
    "MigratorContract",
    "OutboxContract",
    "PromptStoreContract",
    "QuestionStoreContract",
    "QueueContract",
    "RateLimitStoreContract",
    "RunArchiveIndexContract",
    "RunCostsContract",
    "RunLogContract",
    "RunReaderContract",
    "RunSearchContract",
    "ScheduleStoreContract",
    "SignalLogContract",
    "StoreContract",
    "StoreLifecycleContract",
    "ToolStateContract",
    "WebhookStoreContract",
    "WorkerRegistryContract",
]
