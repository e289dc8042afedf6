"""Which methods of each driver interface the contract suites call (read from their source).

``python -m toren.testing.contracts`` prints the table; the kernel's tests keep every abstract
method of a covered interface called.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from importlib import import_module

from toren.seams.archive import ArchiveBackend
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
    LiveText,
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
    StoreLifecycle,
    ToolStateStore,
    WebhookStore,
    WorkerRegistry,
)

#: Every driver interface, in the order ``Store`` lists them, then the queue's and the archive
#: backend's.
INTERFACES: tuple[type, ...] = (
    StoreLifecycle, Migrator, RunLog, RunReader, WorkerRegistry, Guardian, KeyStore, Outbox,
    PromptStore, ToolStateStore, ApprovalStore, ScheduleStore, LiveText, BudgetLedger,
    FileStore, ChannelInbox, ChannelChats, ChannelOutbox, ForkStore, AgentVersionStore,
    RunArchiveIndex, FleetReader, QuestionStore, SignalLog, WebhookStore, RateLimitStore,
    AuditStore, MemoryStore, EvalStore, EvalLeaseStore, Queue,
    ArchiveBackend)
#: Interfaces the suites do not cover yet (a later pass adds them): none now.
NOT_YET: frozenset[type] = frozenset()
#: The modules of the suites.
MODULES = ("base", "runs", "fleet", "records", "decisions", "store", "queue", "files",
           "channels", "archive", "questions", "webhooks", "rate_limits", "audit", "memory",
           "evals")
#: The names the suites give the driver objects they call.
RECEIVERS = frozenset({"store", "queue", "other", "second", "workers", "backend"})
#: Called by the driver's own fixture (``make_queue`` opens each queue and closes it).
BY_THE_FIXTURE: dict[type, frozenset[str]] = {Queue: frozenset({"open", "close"})}


@dataclass(frozen=True)
class Coverage:
    """One interface: its abstract methods, its methods with a default, and which of each
    the suites call."""

    interface: type
    abstract: tuple[str, ...]
    optional: tuple[str, ...]
    called: frozenset[str]

    @property
    def abstract_called(self) -> tuple[str, ...]:
        return tuple(name for name in self.abstract
                     if name in self.called | BY_THE_FIXTURE.get(self.interface, frozenset()))

    @property
    def optional_called(self) -> tuple[str, ...]:
        return tuple(name for name in self.optional if name in self.called)

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(name for name in self.abstract if name not in self.abstract_called)


def called_names() -> frozenset[str]:
    """Every attribute the suites use on a driver object (``store.append(...)``,
    ``queue.claim(...)``, ``store.description``, ``workers[0].enqueue(...)``)."""
    found: set[str] = set()
    for module in MODULES:
        tree = ast.parse(inspect.getsource(import_module(f"toren.testing.contracts.{module}")))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            receiver = node.value
            if isinstance(receiver, ast.Subscript):
                receiver = receiver.value
            if isinstance(receiver, ast.Name) and receiver.id in RECEIVERS:
                found.add(node.attr)
    return frozenset(found)


def _own_methods(interface: type) -> tuple[str, ...]:
    """The public methods and properties ``interface`` itself defines."""
    return tuple(name for name, value in vars(interface).items()
                 if not name.startswith("_") and (callable(value) or isinstance(value, property)))


def coverage() -> list[Coverage]:
    called = called_names()
    report = []
    for interface in INTERFACES:
        abstract = tuple(sorted(getattr(interface, "__abstractmethods__", ())))
        optional = tuple(sorted(set(_own_methods(interface)) - set(abstract)))
        report.append(Coverage(interface, abstract, optional, called))
    return report


def table() -> str:
    """The report as a Markdown table, with totals."""
    lines = ["| interface | abstract methods | called by the contracts | optional called | "
             "not called |", "| --- | --- | --- | --- | --- |"]
    total = covered = 0
    for item in coverage():
        name = item.interface.__name__ + (" (not yet)" if item.interface in NOT_YET else "")
        total += len(item.abstract)
        covered += len(item.abstract_called)
        optional = f"{len(item.optional_called)}/{len(item.optional)}" if item.optional else "-"
        lines.append(f"| {name} | {len(item.abstract)} | {len(item.abstract_called)} | "
                     f"{optional} | {', '.join(item.missing) or '-'} |")
    lines.append(f"| total | {total} | {covered} | | |")
    return "\n".join(lines)
