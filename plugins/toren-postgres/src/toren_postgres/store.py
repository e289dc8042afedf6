"""The ``postgres`` store driver: every store interface on one Postgres database.

One class per interface, each in its module and each usable alone (they share
``PostgresConnection``): ``PostgresMigrator`` (``migrations``), ``PostgresRunLog`` (``runs``),
``PostgresRunReader`` (``reader``), ``PostgresWorkerRegistry`` (``workers``),
``PostgresGuardian`` (``guardian``), ``PostgresKeyStore`` (``keys``), ``PostgresOutbox``
(``outbox``), ``PostgresPromptStore`` (``prompts``), ``PostgresToolStateStore``
(``tool_state``), ``PostgresApprovalStore`` (``approvals``), ``PostgresScheduleStore``
(``schedules``), ``PostgresLiveText`` (``live_text``), ``PostgresBudgetLedger``
(``budgets``), ``PostgresFileStore`` (``files``), ``PostgresChannelInbox``,
``PostgresChannelChats`` and ``PostgresChannelOutbox`` (``channels``), ``PostgresForkStore``
(``forks``), ``PostgresAgentVersionStore`` (``versions``), ``PostgresRunArchive``
(``archive``), ``PostgresSignalLog`` (``signals``), ``PostgresWebhookStore``
(``webhooks``), ``PostgresRateLimitStore`` (``rate_limits``) ``PostgresAuditStore``
(``audit``), ``PostgresEvalStore`` and ``PostgresEvalLeaseStore`` (``evals``).
``PostgresStore`` is all of them over one connection pool.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg_pool import PoolClosed, PoolTimeout, TooManyRequests

from toren.plugin import DatabaseUnavailable
from toren.plugin.drivers import Store
from toren_postgres.approvals import PostgresApprovalStore
from toren_postgres.archive import PostgresRunArchive
from toren_postgres.audit import PostgresAuditStore
from toren_postgres.budgets import PostgresBudgetLedger
from toren_postgres.channels import (
    PostgresChannelChats,
    PostgresChannelInbox,
    PostgresChannelOutbox,
)
from toren_postgres.connection import out_of_space, out_of_space_error
from toren_postgres.evals import PostgresEvalLeaseStore, PostgresEvalStore
from toren_postgres.files import PostgresFileStore
from toren_postgres.fleet import PostgresFleetReader
from toren_postgres.forks import PostgresForkStore
from toren_postgres.guardian import PostgresGuardian
from toren_postgres.keys import PostgresKeyStore
from toren_postgres.live_text import PostgresLiveText
from toren_postgres.memory import PostgresMemoryStore
from toren_postgres.migrations import PostgresMigrator
from toren_postgres.outbox import PostgresOutbox
from toren_postgres.prompts import PostgresPromptStore
from toren_postgres.questions import PostgresQuestionStore
from toren_postgres.rate_limits import PostgresRateLimitStore
from toren_postgres.reader import PostgresRunReader
from toren_postgres.runs import PostgresRunLog
from toren_postgres.schedules import PostgresScheduleStore
from toren_postgres.signals import PostgresSignalLog
from toren_postgres.tool_state import PostgresToolStateStore
from toren_postgres.versions import PostgresAgentVersionStore
from toren_postgres.webhooks import PostgresWebhookStore
from toren_postgres.workers import PostgresWorkerRegistry

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.7,<2"  # EvalStore

_Method = TypeVar("_Method", bound=Callable[..., Awaitable[Any]])

#: SQLSTATEs of a server that is going away or not yet accepting connections (class 08 is
#: the connection exceptions).
_SERVER_UNAVAILABLE = frozenset({"57P01", "57P02", "57P03"})


def unreachable(exc: psycopg.OperationalError) -> bool:
    """Whether ``exc`` says the database cannot be reached (no connection within the pool's
    timeout, a connection lost or refused), rather than that a statement failed."""
    if isinstance(exc, PoolTimeout | PoolClosed | TooManyRequests):
        return True
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _SERVER_UNAVAILABLE


def _translate_unreachable(method: _Method) -> _Method:
    @functools.wraps(method)
    async def translated(self: PostgresStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return await method(self, *args, **kwargs)
        except psycopg.OperationalError as exc:
            if out_of_space(exc):
                raise out_of_space_error(exc, f"the write of {method.__name__}") from exc
            if not unreachable(exc):
                raise
            # the driver's words may name hosts and addresses: they stay in the cause
            reason = (f"no database connection within {self.settings.pool_timeout_s:g}s "
                      "(TOREN_POOL_TIMEOUT)" if isinstance(exc, PoolTimeout)
                      else "the connection to the database was lost")
            raise DatabaseUnavailable(f"the database is unavailable: {reason}; retry "
                                      "shortly") from exc

    return translated  # type: ignore[return-value]


def _translating_unreachable(cls: type[PostgresStore]) -> type[PostgresStore]:
    """Every public coroutine method of the store (from each interface's class) raises
    ``DatabaseUnavailable`` (retryable; 503 on the HTTP API) when the database cannot be
    reached, or has no disk space for a write (``out_of_space``). Translated here, at the
    store's edge: inside, the run log still sees psycopg's errors (it tells a lost commit
    from a lost connection by them)."""
    for name, member in inspect.getmembers(cls, inspect.iscoroutinefunction):
        if not name.startswith("_"):
            setattr(cls, name, _translate_unreachable(member))
    return cls


@_translating_unreachable
class PostgresStore(PostgresMigrator, PostgresRunLog, PostgresRunReader, PostgresWorkerRegistry,
                    PostgresGuardian, PostgresKeyStore, PostgresOutbox, PostgresPromptStore,
                    PostgresToolStateStore, PostgresApprovalStore, PostgresScheduleStore,
                    PostgresLiveText, PostgresBudgetLedger, PostgresFileStore,
                    PostgresChannelInbox, PostgresChannelChats, PostgresChannelOutbox,
                    PostgresForkStore, PostgresAgentVersionStore, PostgresRunArchive,
                    PostgresFleetReader, PostgresQuestionStore, PostgresSignalLog,
                    PostgresWebhookStore, PostgresRateLimitStore, PostgresAuditStore,
                    PostgresMemoryStore, PostgresEvalStore, PostgresEvalLeaseStore, Store):
    """State in Postgres: ``DATABASE_URL`` if set, else the embedded server under TOREN_HOME.

    Its outbox is the queue table, so the ``postgres`` queue reads it directly.
    """
