"""The version-skew log line: once on transition into skew, again every ``SKEW_RELOG_S`` while
it lasts, once when it clears. Other workers sign in through the real store's ``heartbeat``."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

import toren
from toren.host.worker import SKEW_RELOG_S, Worker
from toren.seams.interfaces import Store
from toren.testing import write_agent_dir

OLD = "0.0.1-old"


def skew_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.name == "toren.host.worker" and "version skew" in record.getMessage()]


async def sign_in(store: Store, worker_id: str, version: str) -> None:
    """A worker of ``version`` signs in (or renews its sign-in) the way every worker does."""
    await store.heartbeat({"id": worker_id, "version": version, "agents": ["a"]}, 5.0, [])


async def test_skew_is_logged_on_transition_while_it_lasts_and_when_it_clears(
        make_runtime, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="toren.host.worker")
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False)
    store = runtime.store
    worker = Worker(runtime)
    await store.heartbeat(worker.info(), 5.0, [])

    await worker._check_version_skew(now=0.0)
    assert skew_lines(caplog) == []  # one version live: nothing to say

    await sign_in(store, "old-worker", OLD)
    await worker._check_version_skew(now=30.0)
    lines = skew_lines(caplog)
    assert len(lines) == 1
    assert f"workers of versions {', '.join(sorted([OLD, toren.__version__]))}" in lines[0]
    assert f"this one is {toren.__version__}" in lines[0]

    # while skew lasts, quiet until the relog interval has passed since the last warning
    for now in (60.0, 90.0, 30.0 + SKEW_RELOG_S - 1):
        await sign_in(store, "old-worker", OLD)
        await worker._check_version_skew(now=now)
    assert len(skew_lines(caplog)) == 1
    await worker._check_version_skew(now=30.0 + SKEW_RELOG_S)
    assert len(skew_lines(caplog)) == 2
    assert skew_lines(caplog)[1] == lines[0]
    await worker._check_version_skew(now=30.0 + SKEW_RELOG_S + 30)
    assert len(skew_lines(caplog)) == 2

    # the old worker signs out: one line saying so, then silence
    await store.sign_out("old-worker")
    await worker._check_version_skew(now=30.0 + SKEW_RELOG_S + 60)
    assert skew_lines(caplog)[2:] == [
        f"version skew cleared: every live worker runs {toren.__version__}"]
    await worker._check_version_skew(now=30.0 + SKEW_RELOG_S + 90)
    await worker._check_version_skew(now=30.0 + 3 * SKEW_RELOG_S)
    assert len(skew_lines(caplog)) == 3

    # a new transition is logged at once, however recent the last warning was
    await sign_in(store, "newer-worker", "99.0.0")
    await worker._check_version_skew(now=30.0 + 3 * SKEW_RELOG_S + 1)
    assert len(skew_lines(caplog)) == 4
    assert "99.0.0" in skew_lines(caplog)[3]


async def test_a_starting_worker_logs_the_skew_it_finds(
        make_runtime, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="toren.host.worker")
    idle = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False)
    await sign_in(idle.store, "old-worker", OLD)

    await make_runtime(dirs=[tmp_path / "a"], workers=True)

    async with asyncio.timeout(15):
        while not skew_lines(caplog):
            await asyncio.sleep(0.05)
    assert len(skew_lines(caplog)) == 1
    assert OLD in skew_lines(caplog)[0]
