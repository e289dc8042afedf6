"""Retention of the audit trail (real Postgres): the workers delete entries older than
``TOREN_AUDIT_RETENTION`` and keep the rest; ``never`` keeps them all; a malformed age is a
config error naming the variable."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import psycopg
import pytest

from toren.config import Settings
from toren.core.audit import AuditEntry, AuditQuery
from toren.errors import ConfigError
from toren.host.runtime import Runtime
from toren.testing import write_agent_dir

MakeRuntime = Callable[..., Awaitable[Runtime]]


def entry(action: str) -> AuditEntry:
    return AuditEntry(actor_kind="cli", actor_id="alice", actor_name="cli:alice",
                      action=action, source="cli")


async def test_workers_delete_entries_past_the_retention_and_keep_the_rest(
        toren_runtime: MakeRuntime, tmp_path: Path, database_url: str) -> None:
    keeper = await toren_runtime([write_agent_dir(tmp_path / "k", "keeper")],
                                 audit_retention_s=None)  # never: records, deletes none
    old = await keeper.audit.record(entry("run.cancel"))
    recent = await keeper.audit.record(entry("run.start"))
    assert old is not None and recent is not None
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE toren_control.audit SET at = now() - interval '40 days' "
                     "WHERE id = %s", (old.id,))

    # a worker with a 30-day retention deletes the old entry when it starts, then hourly
    await toren_runtime([write_agent_dir(tmp_path, "crew")], audit_retention_s=30 * 86400.0)
    for _ in range(100):
        kept = [r.id for r in (await keeper.audit.page(AuditQuery())).items]
        if old.id not in kept:
            break
        await asyncio.sleep(0.05)
    assert kept == [recent.id]


def test_the_retention_is_read_from_the_environment() -> None:
    assert Settings.from_env({}).audit_retention_s == 365 * 86400.0
    assert Settings.from_env({"TOREN_AUDIT_RETENTION": "90d"}).audit_retention_s == 90 * 86400.0
    assert Settings.from_env({"TOREN_AUDIT_RETENTION": "never"}).audit_retention_s is None
    with pytest.raises(ConfigError, match="TOREN_AUDIT_RETENTION"):
        Settings.from_env({"TOREN_AUDIT_RETENTION": "a year"})
