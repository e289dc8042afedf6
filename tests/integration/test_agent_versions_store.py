"""The agent versions of the Postgres store: files kept once by hash, versions loaded back
whole or not at all, the compare-and-set that moves a run, and the column the log keeps."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from toren.agents.versions import AgentVersion
from toren.core import events as ev
from toren.core.events import NewEvent
from toren.errors import AgentNotRegistered, AgentVersionMissing
from toren.seams.shapes import LeaseBusy
from toren.testing import write_agent_dir

SLOW = '''
import time

def wait(text: str) -> str:
    """Take a while."""
    time.sleep(0.2)
    return "waited"
'''


def upgraded(version: AgentVersion, before: str | None, by: str) -> list[NewEvent]:
    return [NewEvent.of(ev.AgentVersionUpgraded(version=version.hash, human_version=version.human,
                                                from_version=before, reason="requested",
                                                requested_by=by))]


async def test_versions_are_kept_once_and_read_back_whole(make_runtime, database_url: str,
                                                          tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "keeper", version="1")
    runtime = await make_runtime(dirs=[directory], workers=False)
    store = runtime.store
    first = runtime.agents["keeper"].version
    assert first is not None
    # a second version changes the prompt only: it shares the other files
    second = AgentVersion.of({**first.files, "prompt.md": b"You are changed.\n"}, "1")
    for version in (first, second, first, second):
        await store.save_agent_version("keeper", version)
    with psycopg.connect(database_url) as conn:
        files = conn.execute("SELECT count(*) FROM agent_keeper.definition_files").fetchone()
        versions = conn.execute("SELECT count(*) FROM agent_keeper.agent_versions").fetchone()
    # agent.yaml once, two prompts: three files for two versions
    assert (files, versions) == ((3,), (2,))
    loaded = await store.load_agent_version("keeper", second.hash)
    assert loaded is not None and loaded.files == second.files and loaded.human == "1"
    assert await store.load_agent_version("keeper", "0" * 64) is None

    # a kept file that went missing: the version is not loaded half (and a worker says so)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DELETE FROM agent_keeper.definition_files WHERE sha256 = %s",
                     [second.manifest["prompt.md"]])
    assert await store.load_agent_version("keeper", second.hash) is None
    with pytest.raises(AgentVersionMissing, match="toren jobs upgrade"):
        await runtime.versions.load("keeper", second.hash)


async def test_moving_a_run_is_a_compare_and_set_recorded_in_its_log(
        make_runtime, database_url: str, tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "mover", tools_py=SLOW, version="1")
    runtime = await make_runtime(dirs=[directory], workers=False)
    store = runtime.store
    first = runtime.agents["mover"].version
    assert first is not None
    run_id = await runtime.start_run("mover", "go")
    assert await store.run_agent_version("mover", run_id) == (True, first.hash)
    assert await store.run_agent_version("mover", "not-a-uuid") == (False, None)
    assert await store.run_agent_version("mover", "00000000-0000-4000-8000-000000000000") == (
        False, None)

    second = AgentVersion.of({**first.files, "prompt.md": b"Two.\n"}, "2")
    await store.save_agent_version("mover", second)
    # ten movers race from the same version: exactly one wins
    won = await asyncio.gather(*(store.set_run_version("mover", run_id, first.hash,
                                                       upgraded(second, first.hash, f"m{n}"))
                                 for n in range(10)))
    assert sum(won) == 1
    record = await runtime.get_run(run_id)
    assert (record.agent_version, record.agent_human_version) == (second.hash, "2")
    events = await runtime.events(run_id)
    moves = [e for e in events if e.type == ev.AGENT_VERSION_UPGRADED]
    assert len(moves) == 1 and moves[0].data["from_version"] == first.hash
    # a stale expectation loses
    assert not await store.set_run_version("mover", run_id, first.hash,
                                           upgraded(second, first.hash, "late"))
    listed = {v.hash: v for v in await store.list_agent_versions("mover")}
    assert (listed[first.hash].runs, listed[second.hash].runs) == (0, 1)
    assert listed[second.hash].active_runs == 1

    await runtime.cancel_run(run_id)
    assert not await store.set_run_version("mover", run_id, second.hash,
                                           upgraded(first, second.hash, "after"))
    listed = {v.hash: v for v in await store.list_agent_versions("mover")}
    assert listed[second.hash].active_runs == 0


async def test_a_run_created_without_a_version_is_pinned_by_its_first_worker(
        make_runtime, database_url: str, tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "legacy")
    runtime = await make_runtime(dirs=[directory], workers=False)
    run_id = await runtime.start_run("legacy", "from before versions")
    # as a run created before this feature (or by another agent's task) is: no version
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DELETE FROM agent_legacy.events WHERE type = 'AgentVersionPinned'")
        conn.execute("UPDATE agent_legacy.runs SET agent_version = NULL, "
                     "agent_human_version = NULL")
    await runtime.stop()
    worker = await make_runtime(dirs=[directory])
    record = await worker.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed"
    version = worker.agents["legacy"].version
    assert version is not None and record.agent_version == version.hash
    pins = [e for e in await worker.events(run_id) if e.type == ev.AGENT_VERSION_PINNED]
    assert [p.data["version"] for p in pins] == [version.hash]


async def test_agent_versions_of_an_unknown_agent_is_a_typed_error(make_runtime,
                                                                   tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "known")], workers=False)
    listed = await runtime.agent_versions("known")
    assert listed["current"] == runtime.agents["known"].version.hash  # type: ignore[union-attr]
    assert [v["current"] for v in listed["versions"]] == [True]
    with pytest.raises(AgentNotRegistered, match="no agent 'unknown' in this database"):
        await runtime.agent_versions("unknown")


async def test_each_append_tells_the_version_its_run_is_on(make_runtime, tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "teller", version="1")
    runtime = await make_runtime(dirs=[directory], workers=False)
    store = runtime.store
    first = runtime.agents["teller"].version
    assert first is not None
    run_id = await runtime.start_run("teller", "go")
    told: list[tuple[str, str | None]] = []
    store.on_run_version(lambda run, version: told.append((run, version)))
    found = await store.acquire_and_load("teller", run_id, "task:side", "me", 30)
    assert not isinstance(found, LeaseBusy)
    lease, _events = found
    note = [NewEvent("TestNote", {"note": 1})]
    await store.append("teller", lease, 1, note, ttl_s=30)
    assert told == [(run_id, first.hash)]

    # moved to another version: the next append says so (no read of its own needed)
    second = AgentVersion.of({**first.files, "prompt.md": b"Two.\n"}, "2")
    await store.save_agent_version("teller", second)
    assert await store.set_run_version("teller", run_id, first.hash,
                                       upgraded(second, first.hash, "test"))
    await store.append("teller", lease, 2, note, ttl_s=30, release=True)
    assert told[-1] == (run_id, second.hash)


async def test_a_task_message_starts_on_a_version_an_append_told_moments_ago(
        make_runtime, tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "quick", version="1")
    runtime = await make_runtime(dirs=[directory], workers=False)
    versions, store = runtime.versions, runtime.store
    served = runtime.agents["quick"]
    first = served.version
    assert first is not None
    run_id = await runtime.start_run("quick", "go")
    second = AgentVersion.of({**first.files, "prompt.md": b"Two.\n"}, "2")
    await store.save_agent_version("quick", second)
    versions.seen(run_id, first.hash)  # an append of the run said so just now
    assert await store.set_run_version("quick", run_id, first.hash,
                                       upgraded(second, first.hash, "test"))
    # a task message takes what it was told (as a task's step does, for recheck_s)...
    assert await versions.spec_for_run("quick", run_id, "w", task=True) is served
    # ...a run tick reads afresh, and so does a task once what it was told is old
    ticked = await versions.spec_for_run("quick", run_id, "w")
    assert ticked.version is not None and ticked.version.hash == second.hash
    versions.seen(run_id, first.hash)
    versions.recheck_s = 0.0
    tasked = await versions.spec_for_run("quick", run_id, "w", task=True)
    assert tasked.version is not None and tasked.version.hash == second.hash


async def test_a_run_tick_checks_its_version_under_the_lease_and_ticks_again_if_moved(
        make_runtime, tmp_path: Path) -> None:
    """A run tick starts on the definition the worker last saw the run on, with no read of
    its own: the lease it takes reads the run's version, and a tick handed another version
    lets its lease go without appending, resolves the version and ticks again on it."""
    directory = write_agent_dir(tmp_path, "ticker", version="1")
    runtime = await make_runtime(dirs=[directory], workers=False)
    versions, store = runtime.versions, runtime.store
    served = runtime.agents["ticker"]
    first = served.version
    assert first is not None
    run_id = await runtime.start_run("ticker", "go")
    found = await store.acquire_and_load("ticker", run_id, "run", "me", 30)
    assert not isinstance(found, LeaseBusy)
    lease, _events = found
    assert lease.version_read and lease.agent_version == first.hash
    assert versions.under_lease(served, lease)
    await store.release_lease(lease)

    # the run is moved to a version this process does not serve: the served spec is refused
    second = AgentVersion.of({**first.files, "prompt.md": b"Two.\n"}, "2")
    await store.save_agent_version("ticker", second)
    assert await store.set_run_version("ticker", run_id, first.hash,
                                       upgraded(second, first.hash, "test"))
    found = await store.acquire_and_load("ticker", run_id, "run", "me", 30)
    assert not isinstance(found, LeaseBusy)
    moved, _events = found
    assert moved.agent_version == second.hash and not versions.under_lease(served, moved)
    await store.release_lease(moved)
    # a worker then ticks on the run's own version, and the run completes on it
    worker = await make_runtime(dirs=[directory])
    record = await worker.wait_for_run(run_id, timeout_s=60)
    assert record.status == "completed"
    tried = worker.versions.spec_to_try("ticker", run_id)
    assert tried is not worker.agents["ticker"] and tried.version is not None
    assert tried.version.hash == second.hash
