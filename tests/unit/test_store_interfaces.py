"""The store's interfaces: small, disjoint, composed into ``Store``; the Postgres driver has one
class per interface, each complete on its own."""

from __future__ import annotations

import inspect

import pytest
from toren_postgres.approvals import PostgresApprovalStore
from toren_postgres.archive import PostgresRunArchive
from toren_postgres.audit import PostgresAuditStore
from toren_postgres.budgets import PostgresBudgetLedger
from toren_postgres.channels import (
    PostgresChannelChats,
    PostgresChannelInbox,
    PostgresChannelOutbox,
)
from toren_postgres.evals import PostgresEvalLeaseStore, PostgresEvalStore
from toren_postgres.files import PostgresFileStore
from toren_postgres.fleet import PostgresFleetReader
from toren_postgres.forks import PostgresForkStore
from toren_postgres.guardian import PostgresGuardian
from toren_postgres.keys import PostgresKeyStore
from toren_postgres.lifecycle import PostgresConnection
from toren_postgres.memory import PostgresMemoryStore
from toren_postgres.migrations import PostgresMigrator
from toren_postgres.outbox import PostgresOutbox
from toren_postgres.prompts import PostgresPromptStore
from toren_postgres.questions import PostgresQuestionStore
from toren_postgres.queue import PostgresQueue
from toren_postgres.rate_limits import PostgresRateLimitStore
from toren_postgres.reader import PostgresRunReader
from toren_postgres.runs import PostgresRunLog
from toren_postgres.schedules import PostgresScheduleStore
from toren_postgres.signals import PostgresSignalLog
from toren_postgres.store import PostgresStore
from toren_postgres.tool_state import PostgresToolStateStore
from toren_postgres.versions import PostgresAgentVersionStore
from toren_postgres.webhooks import PostgresWebhookStore
from toren_postgres.workers import PostgresWorkerRegistry

from toren.config import Settings
from toren.seams.queue import Queue
from toren.seams.store import (
    AgentVersionStore,
    ApprovalStore,
    AuditStore,
    BudgetLedger,
    ChannelChats,
    ChannelInbox,
    ChannelOutbox,
    EvalLeaseStore,
    EvalStore,
    FileStore,
    FleetReader,
    ForkStore,
    Guardian,
    KeyStore,
    MemoryStore,
    Migrator,
    Outbox,
    PromptStore,
    QuestionStore,
    RateLimitStore,
    RunArchiveIndex,
    RunLog,
    RunReader,
    ScheduleStore,
    SignalLog,
    Store,
    StoreLifecycle,
    ToolStateStore,
    WebhookStore,
    WorkerRegistry,
)

PIECES = {StoreLifecycle: PostgresConnection, Migrator: PostgresMigrator, RunLog: PostgresRunLog,
          RunReader: PostgresRunReader, WorkerRegistry: PostgresWorkerRegistry,
          Guardian: PostgresGuardian, KeyStore: PostgresKeyStore, Outbox: PostgresOutbox,
          PromptStore: PostgresPromptStore, ToolStateStore: PostgresToolStateStore,
          ApprovalStore: PostgresApprovalStore, ScheduleStore: PostgresScheduleStore,
          BudgetLedger: PostgresBudgetLedger,
          FileStore: PostgresFileStore, ChannelInbox: PostgresChannelInbox,
          ChannelChats: PostgresChannelChats, ChannelOutbox: PostgresChannelOutbox,
          ForkStore: PostgresForkStore, AgentVersionStore: PostgresAgentVersionStore,
          RunArchiveIndex: PostgresRunArchive, FleetReader: PostgresFleetReader,
          QuestionStore: PostgresQuestionStore, SignalLog: PostgresSignalLog,
          WebhookStore: PostgresWebhookStore, RateLimitStore: PostgresRateLimitStore,
          AuditStore: PostgresAuditStore, MemoryStore: PostgresMemoryStore,
          EvalStore: PostgresEvalStore, EvalLeaseStore: PostgresEvalLeaseStore}


def test_store_is_exactly_its_interfaces_and_they_do_not_overlap() -> None:
    seen: dict[str, type] = {}
    for interface in PIECES:
        for name in interface.__abstractmethods__:
            assert name not in seen, f"{name} is in both {seen[name]} and {interface}"
            seen[name] = interface
        assert len(interface.__abstractmethods__) <= 10, f"{interface} is not small"
    assert set(Store.__abstractmethods__) == set(seen)


@pytest.mark.parametrize(("interface", "piece"), PIECES.items())
def test_each_postgres_class_implements_its_interface_alone(interface: type,
                                                            piece: type) -> None:
    assert issubclass(piece, interface)
    assert not inspect.isabstract(piece)
    piece(Settings())  # each can be made (and opened) on its own
    assert issubclass(PostgresStore, piece)


def test_every_interface_and_method_is_documented() -> None:
    for interface in [*PIECES, Queue]:
        assert interface.__doc__ and "\n\n" in interface.__doc__, interface  # who calls it
        for name in interface.__abstractmethods__:
            assert getattr(interface, name).__doc__, f"{interface.__name__}.{name}"


def test_only_the_postgres_queue_reads_the_outbox() -> None:
    assert PostgresQueue.reads_outbox
    assert not Queue.reads_outbox
