"""The driver side of the plugin API, version 1: what a store, queue, archive, worker runtime,
tracer or secret source (stevedore groups ``toren.store``, ``toren.queue``, ...) implements and
the records it reads and writes (docs/reference/plugins.md, "Writing a second driver").

A store driver implements the interfaces below (``Store`` is all of them) and proves it with
``toren.testing.contracts``. These names follow the same policy as ``toren.plugin``
(docs/reference/versioning.md).
"""

from toren.agents import schema_name_for
from toren.core import events
from toren.core.approvals import ApprovalRecord, arguments_digest
from toren.core.audit import AuditEntry, AuditQuery, AuditRecord
from toren.core.budgets import (
    BudgetDecision,
    BudgetRequest,
    BudgetScope,
    BudgetSpend,
    decide_reservation,
)
from toren.core.costs import ModelCosts, Period
from toren.core.eval_cases import Case, Dataset, Grader
from toren.core.evals import CaseRun, EvalRecord
from toren.core.events import ApprovalRequested, Event, NewEvent, QuestionAsked
from toren.core.memory import (
    MIN_SIMILARITY,
    RECENCY_HALF_LIFE_DAYS,
    MemoryRecord,
    MemoryVector,
    MemoryView,
    MemoryWriteResult,
    NewMemory,
    is_memory_id,
)
from toren.core.questions import QuestionRecord
from toren.core.retention import ArchiveDigest, record_from_row, run_row
from toren.core.runs import KEEP, RUN_SORTS, ChildLink, RunRecord, RunSearch, RunTotals, RunUpdate
from toren.core.schedules import RECENT_FIRES, ScheduleRecord, ScheduleSpec, due_slots, next_slot
from toren.core.versions import AgentVersion
from toren.files import (
    CHUNK_BYTES,
    FileContent,
    StorageQuotaExceeded,
    StoredFile,
    content_chunks,
    content_size,
    parse_file_id,
    storage_quota_message,
)
from toren.host.worker import Worker
from toren.keys import (
    ApiKey,
    KeyNameTaken,
    check_key_grant,
    check_key_name,
    generate_key,
    hash_secret,
    parse_key,
    parse_key_reference,
)
from toren.seams.archive import ArchiveBackend
from toren.seams.queue import Queue
from toren.seams.secrets import SecretSource
from toren.seams.shapes import (
    AgentSchema,
    Lease,
    LeaseBusy,
    Migration,
    OutboxEntry,
    OutgoingMessage,
    QueueMessage,
)
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
    ForkStore,
    Guardian,
    KeyStore,
    LiveText,
    ManifestSeqTaken,
    MemoryStore,
    MessageHandOff,
    Migrator,
    Outbox,
    PromptStore,
    QuestionStore,
    RunArchiveIndex,
    RunLog,
    RunReader,
    ScheduleStore,
    SignalLog,
    Store,
    StoreLifecycle,
    ToolManifest,
    ToolStateStore,
    VersionSummary,
    WorkerRegistry,
)
from toren.seams.store.fleet import FleetGauges, FleetReader, QueueGauge, RunInFlight
from toren.seams.store.rate_limits import (
    BucketState,
    RateDecision,
    RateLimitStore,
    RateRequest,
    RateSettlement,
)
from toren.seams.store.schedules import FiredSlot, RunFactory, SlotToFire
from toren.seams.store.webhooks import (
    AttemptOutcome,
    WebhookAttempt,
    WebhookDelivery,
    WebhookDeliveryRecord,
    WebhookStore,
)
from toren.seams.telemetry import Tracer, trace_ids, traceparent_ids
from toren.seams.worker_runtime import WorkerRuntime

__all__ = [
    "CHUNK_BYTES", "KEEP", "MIN_SIMILARITY", "RECENCY_HALF_LIFE_DAYS", "RECENT_FIRES", "RUN_SORTS",
    "AgentSchema", "AgentVersion", "AgentVersionStore", "ApiKey", "ApprovalRecord",
    "ApprovalRequested", "ApprovalStore", "ArchiveBackend", "ArchiveDigest", "AttemptOutcome",
    "AuditEntry", "AuditQuery", "AuditRecord", "AuditStore", "BucketState", "BudgetDecision",
    "BudgetLedger", "BudgetRequest", "BudgetScope", "BudgetSpend", "Case", "CaseRun",
    "ChannelChats", "ChannelInbox", "ChannelOutbox", "ChildLink", "Dataset", "EvalLeaseStore",
    "EvalRecord", "EvalStore", "Event", "FileContent", "FileStore", "FiredSlot", "FleetGauges",
    "FleetReader",
    "ForkStore", "Grader", "Guardian", "KeyNameTaken", "KeyStore", "Lease", "LeaseBusy",
    "LiveText", "ManifestSeqTaken", "MemoryRecord", "MemoryStore", "MemoryVector", "MemoryView",
    "MemoryWriteResult", "MessageHandOff", "Migration", "Migrator", "ModelCosts", "NewEvent",
    "NewMemory", "Outbox", "OutboxEntry", "OutgoingMessage", "Period", "PromptStore",
    "QuestionAsked", "QuestionRecord", "QuestionStore", "Queue", "QueueGauge", "QueueMessage",
    "RateDecision", "RateLimitStore", "RateRequest", "RateSettlement", "RunArchiveIndex",
    "RunFactory", "RunInFlight", "RunLog", "RunReader", "RunRecord", "RunSearch", "RunTotals",
    "RunUpdate", "ScheduleRecord", "ScheduleSpec", "ScheduleStore", "SecretSource", "SignalLog",
    "SlotToFire", "StorageQuotaExceeded", "Store", "StoreLifecycle", "StoredFile", "ToolManifest",
    "ToolStateStore", "Tracer", "VersionSummary", "WebhookAttempt", "WebhookDelivery",
    "WebhookDeliveryRecord", "WebhookStore", "Worker", "WorkerRegistry", "WorkerRuntime",
    "arguments_digest", "check_key_grant", "check_key_name", "content_chunks", "content_size",
    "decide_reservation", "due_slots", "events", "generate_key", "hash_secret", "is_memory_id",
    "next_slot", "parse_file_id", "parse_key", "parse_key_reference", "record_from_row", "run_row",
    "schema_name_for", "storage_quota_message", "trace_ids", "traceparent_ids",
]
