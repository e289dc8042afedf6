"""The store's interfaces, one module per concern, and ``Store``, the composite a driver provides.

Like pyeventsourcing's layered recorders, each interface is a handful of methods documented
with who calls them and when, so a second driver can implement and test one at a time:

- ``StoreLifecycle`` (``lifecycle``): description, open, close, health;
- ``Migrator`` (``migrations``): schemas, migrations, registered agents;
- ``RunLog`` (``runlog``): runs, stream leases, appends, and the outbox writes they carry;
- ``RunReader`` (``reader``): runs and events as the host API reads them;
- ``WorkerRegistry`` (``workers``): heartbeats, sign-out, live workers;
- ``Guardian`` (``guardian``): the sweep that heals runs with no message;
- ``KeyStore`` (``keys``): API keys;
- ``Outbox`` (``outbox``): claims and acknowledgements of the outbox relay;
- ``PromptStore`` (``prompts``): the text of every system prompt, once per distinct prompt;
- ``ToolStateStore`` (``tool_state``): blobs and manifests tools keep beside a run.
- ``ApprovalStore`` (``approvals``): tool calls waiting for a person, decided once.
- ``QuestionStore`` (``questions``): what agents ask a person (``ask_user``), answered once.
- ``ScheduleStore`` (``schedules``): schedules, and the claim that fires each slot once.
- ``LiveText`` (``live``): pieces of model text as they are generated, across processes.
- ``BudgetLedger`` (``budgets``): reservations of model-call cost against run and daily budgets.
- ``FileStore`` (``files``): uploaded files, content-addressed.
- ``ChannelInbox``, ``ChannelChats``, ``ChannelOutbox`` (``channels``): chat channels' poller
  lease and incoming updates; chats' sessions and pairing; messages to send.
- ``ForkStore`` (``forks``): a run created with a log copied from another run's.
- ``AgentVersionStore`` (``versions``): agent definitions by version, and each run's version.
- ``RunArchiveIndex`` (``archive``): finished runs archived out of the hot tables.
- ``RateLimitStore`` (``rate_limits``): provider rate limits shared by the fleet, per window.
- ``FleetReader`` (``fleet``): queue, runs and workers at a glance (metrics, ``toren top``).
- ``SignalLog`` (``signals``): signals to runs, on each run's ``signals`` stream.
- ``WebhookStore`` (``webhooks``): completion webhooks' deliveries, written with the status
  change that calls for them, claimed and sent by the host.
- ``AuditStore`` (``audit``): the audit trail, who did what and how it ended.
- ``MemoryStore`` (``memory``): what agents keep beyond a session (``memory:``), written
  once per tool call, listed and erased by people.
- ``EvalStore`` (``evals``): evals, their case runs (one durable run each) and grades.
- ``EvalLeaseStore`` (``evals``): which server works an eval started over HTTP (a lease).

Consumers take the narrowest one: execution a ``RunLog``, the server's auth a ``KeyStore``.
"""

from __future__ import annotations

from toren.seams.store.approvals import ApprovalStore
from toren.seams.store.archive import RunArchiveIndex
from toren.seams.store.audit import AuditStore
from toren.seams.store.budgets import BudgetLedger
from toren.seams.store.channels import ChannelChats, ChannelInbox, ChannelOutbox
from toren.seams.store.evals import EvalLeaseStore, EvalStore
from toren.seams.store.files import FileStore
from toren.seams.store.fleet import FleetReader
from toren.seams.store.forks import ForkStore
from toren.seams.store.guardian import Guardian
from toren.seams.store.keys import KeyStore
from toren.seams.store.lifecycle import StoreLifecycle
from toren.seams.store.live import LiveText
from toren.seams.store.memory import MemoryStore
from toren.seams.store.migrations import Migrator
from toren.seams.store.outbox import Outbox
from toren.seams.store.prompts import PromptStore
from toren.seams.store.questions import QuestionStore
from toren.seams.store.rate_limits import RateLimitStore
from toren.seams.store.reader import RunReader
from toren.seams.store.runlog import MessageHandOff, RunLog
from toren.seams.store.schedules import ScheduleStore
from toren.seams.store.signals import SignalLog
from toren.seams.store.tool_state import ManifestSeqTaken, ToolManifest, ToolStateStore
from toren.seams.store.versions import AgentVersionStore, VersionSummary
from toren.seams.store.webhooks import WebhookStore
from toren.seams.store.workers import WorkerRegistry

__all__ = ["AgentVersionStore", "ApprovalStore", "AuditStore", "BudgetLedger", "ChannelChats",
           "ChannelInbox",
           "ChannelOutbox", "EvalLeaseStore", "EvalStore", "FileStore", "FleetReader",
           "ForkStore", "Guardian",
           "KeyStore",
           "LiveText",
           "ManifestSeqTaken", "MemoryStore", "MessageHandOff", "Migrator", "Outbox", "PromptStore",
           "QuestionStore", "RateLimitStore", "RunArchiveIndex", "RunLog",
           "RunReader", "ScheduleStore", "SignalLog", "Store", "StoreLifecycle", "ToolManifest",
           "ToolStateStore", "VersionSummary", "WebhookStore", "WorkerRegistry"]


class Store(StoreLifecycle, Migrator, RunLog, RunReader, WorkerRegistry, Guardian, KeyStore,
            Outbox, PromptStore, ToolStateStore, ApprovalStore, ScheduleStore, LiveText,
            BudgetLedger, FileStore, ChannelInbox, ChannelChats, ChannelOutbox, ForkStore,
            AgentVersionStore, RunArchiveIndex, FleetReader, QuestionStore, SignalLog,
            WebhookStore, RateLimitStore, AuditStore, MemoryStore, EvalStore, EvalLeaseStore):
    """Durable state: what an entry point in ``toren.store`` (``TOREN_STORE``) provides.

    Every interface above, on one database. Made by the host at startup
    (``driver(settings)``); ``open`` is awaited before any other method and ``close`` once at
    shutdown.
    """
