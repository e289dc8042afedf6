"""Retention against real Postgres and a real archive directory: finished runs past their
agent's retention are archived whole, deleted from the hot tables, and still read back
identical; runs something still refers to are kept; one pass at a time; a pass that died
mid-purge is finished by the next; live appends proceed while a big pass runs."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from toren.core import events as ev
from toren.core.events import NewEvent
from toren.core.retention import decode_archive, encode_archive_object
from toren.errors import ArchiveNotConfigured, ArchiveUnavailable, RunNotFound
from toren.host.runtime import Runtime
from toren.testing import write_agent_dir

TOOLS = '''
from toren import tool

@tool(idempotent=True)
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"
'''
SCHEMA = "agent_keeper"


def agent_dir(tmp_path: Path, retention: str | None = "30d", name: str = "keeper") -> Path:
    fields = {"retention": retention} if retention else {}
    return write_agent_dir(tmp_path, name, tools_py=TOOLS, **fields)


def sql(database_url: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def age_runs(database_url: str, run_ids: list[str], days: int = 40,
             schema: str = SCHEMA) -> None:
    """Make runs look as if they ended ``days`` ago (the pass compares with the database
    clock)."""
    sql(database_url, f"UPDATE {schema}.runs SET finished_at = now() - %s * interval '1 day' "
                      "WHERE id = ANY(%s::uuid[])", (days, run_ids))


def hot_counts(database_url: str, run_id: str, schema: str = SCHEMA) -> tuple[int, int]:
    rows = sql(database_url, f"SELECT (SELECT count(*) FROM {schema}.runs WHERE id = %s), "
                             f"(SELECT count(*) FROM {schema}.events WHERE run_id = %s)",
               (run_id, run_id))
    return int(rows[0][0]), int(rows[0][1])


async def finished_runs(runtime: Runtime, count: int, agent: str = "keeper") -> list[str]:
    ids = [await runtime.start_run(agent, f"topic {n}") for n in range(count)]
    for run_id in ids:
        record = await runtime.wait_for_run(run_id, timeout_s=60)
        assert record.status == "completed"
    return ids


async def test_archived_runs_leave_the_hot_tables_and_read_back_identical(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    archive_dir = tmp_path / "archive"
    runtime = await make_runtime(dirs=[agent_dir(tmp_path)],
                                 archive_url=archive_dir.as_uri())
    old = await finished_runs(runtime, 2)
    recent = (await finished_runs(runtime, 1))[0]
    age_runs(database_url, old)
    before = {run_id: (await runtime.get_run(run_id), await runtime.events(run_id),
                       await runtime.receipt(run_id)) for run_id in old}

    dry = await runtime.archive_runs(dry_run=True)
    assert sorted(run["id"] for run in dry["runs"]) == sorted(old)
    assert all(hot_counts(database_url, run_id)[1] > 0 for run_id in old)
    assert not archive_dir.exists()  # a dry run writes nothing

    report = await runtime.archive_runs()
    counts = report["agents"]["keeper"]
    assert counts["archived"] == 2 and counts["retention_s"] == 30 * 86400
    assert counts["events"] == sum(len(before[run_id][1]) for run_id in old)
    for run_id in old:
        assert hot_counts(database_url, run_id) == (0, 0)
        record, events, receipt = before[run_id]
        archived = await runtime.get_run(run_id)
        assert archived.extra["archive"]["location"].startswith(archive_dir.as_uri())
        assert archived.to_json() == record.to_json()
        # every event identical: stream, seq, type, data and commit time
        assert await runtime.events(run_id) == events
        assert await runtime.receipt(run_id) == receipt
        assert [e async for e in runtime.follow(run_id)] == events
    assert hot_counts(database_url, recent)[0] == 1  # not old enough: untouched

    listed = await runtime.list_archived_runs()
    assert {run.id for run in listed} == set(old)
    summary = listed[0].extra["archive"]["summary"]
    assert summary["events"] > 0 and summary["model_calls"] >= 1 and summary["bytes"] > 0
    files = sorted(archive_dir.rglob("*.jsonl.gz"))
    assert len(files) == 2 and all(f.parent.parent.parent.name == "keeper" for f in files)
    assert decode_archive(files[0].read_bytes()).record.id in old

    again = await runtime.archive_runs()
    assert again["agents"]["keeper"]["archived"] == 0

    # restorable: back into the hot tables, whole
    restored = await runtime.restore_run(old[0])
    assert restored.to_json() == before[old[0]][0].to_json() and not restored.extra
    assert hot_counts(database_url, old[0]) == (1, len(before[old[0]][1]))
    assert await runtime.events(old[0]) == before[old[0]][1]
    assert await runtime.receipt(old[0]) == before[old[0]][2]
    assert {run.id for run in await runtime.list_archived_runs()} == {old[1]}
    with pytest.raises(RunNotFound, match="no archived run"):
        await runtime.restore_run(old[0])


async def test_an_archived_session_reads_its_transcript_and_cancels_as_a_no_op(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await make_runtime(dirs=[agent_dir(tmp_path)],
                                 archive_url=(tmp_path / "archive").as_uri())
    session_id = await runtime.start_session("keeper")
    await runtime.send_message(session_id, "postgres")
    await runtime.wait_for_turn(session_id, timeout_s=60)
    await runtime.close_session(session_id)
    await runtime.wait_for_run(session_id, timeout_s=60)
    age_runs(database_url, [session_id])
    before = await runtime.get_session(session_id)
    assert (await runtime.archive_runs())["agents"]["keeper"]["archived"] == 1
    assert hot_counts(database_url, session_id) == (0, 0)
    assert await runtime.get_session(session_id) == before
    cancelled = await runtime.cancel_run(session_id)
    assert cancelled.status == "completed" and cancelled.extra["archive"]


async def test_runs_still_referred_to_are_kept(make_runtime, tmp_path: Path,
                                               database_url: str) -> None:
    runtime = await make_runtime(dirs=[agent_dir(tmp_path)],
                                 archive_url=(tmp_path / "archive").as_uri())
    (queued_for, leased, watched, approval, child_of_live, parent_of_live, scheduled,
     free) = await finished_runs(runtime, 8)
    live_session = await runtime.start_session("keeper")  # awaiting input: not finished
    control = "toren_control"
    # (a message due later, so this runtime's own worker cannot claim it and ack it first; a
    # lease and a watch under names of their own, so its worker and server cannot let them go)
    sql(database_url, f"INSERT INTO {control}.queue (agent, run_id, kind, available_at) "
                      "VALUES ('keeper', %s, 'run', now() + interval '1 hour')", (queued_for,))
    sql(database_url, f"INSERT INTO {control}.leases VALUES (%s, 'run', 'elsewhere', 9, "
                      "now() + interval '1 hour') ON CONFLICT (run_id, stream) DO UPDATE "
                      "SET holder = EXCLUDED.holder, epoch = EXCLUDED.epoch, "
                      "expires_at = EXCLUDED.expires_at", (leased,))
    sql(database_url, f"INSERT INTO {control}.watched_runs VALUES (%s, 'another-server', "
                      "now() + interval '1 hour')", (watched,))
    sql(database_url, f"INSERT INTO {control}.approvals (id, agent, run_id, task_id, call_id, "
                      "tool, arguments, wake) VALUES (%s, 'keeper', %s, 'main', 'c1', "
                      "'lookup', '{}', '{}')", (str(uuid.uuid4()), approval))
    # a child whose parent (a live session) waits for it, and a parent whose child is live
    sql(database_url, f"UPDATE {SCHEMA}.runs SET parent_agent = 'keeper', parent_run_id = %s, "
                      "parent_task = 'main', child_kind = 'peer' WHERE id = %s",
        (live_session, child_of_live))
    sql(database_url, f"UPDATE {SCHEMA}.runs SET parent_agent = 'keeper', parent_run_id = %s, "
                      "parent_task = 'main', child_kind = 'background' WHERE id = %s",
        (parent_of_live, live_session))
    # the latest run of a schedule still in agent.yaml
    sql(database_url, f"INSERT INTO {control}.schedules (agent, name, spec, next_fire_at) "
                      "VALUES ('keeper', 'nightly', '0 3 * * *', now() + interval '1 day')")
    sql(database_url, f"INSERT INTO {control}.schedule_fires (agent, schedule, slot_at, "
                      "run_id, trigger) VALUES ('keeper', 'nightly', now(), %s, 'cron')",
        (scheduled,))
    everything = [queued_for, leased, watched, approval, child_of_live, parent_of_live,
                  scheduled, free]
    age_runs(database_url, everything)

    report = await runtime.archive_runs()
    assert [run["id"] for run in report["runs"]] == [free]
    assert report["agents"]["keeper"]["skipped_referenced"] == 2  # the cross-run relations
    for run_id in everything[:-1]:
        assert hot_counts(database_url, run_id)[0] == 1, run_id

    # once the relations are gone, the runs go too
    sql(database_url, f"DELETE FROM {control}.queue WHERE run_id = %s", (queued_for,))
    await runtime.close_session(live_session)
    await runtime.wait_for_run(live_session, timeout_s=60)
    second = await runtime.archive_runs()
    assert {run["id"] for run in second["runs"]} == {queued_for, child_of_live, parent_of_live}


async def test_one_pass_at_a_time_and_a_died_purge_is_finished_by_the_next(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await make_runtime(dirs=[agent_dir(tmp_path)],
                                 archive_url=(tmp_path / "archive").as_uri())
    run_id = (await finished_runs(runtime, 1))[0]
    events = await runtime.events(run_id)
    age_runs(database_url, [run_id])
    async with runtime.store.archive_lock() as held:
        assert held
        busy = await runtime.archive_runs()
        assert busy["skipped"] == "another process is archiving" and busy["runs"] == []

    # a pass that died after indexing the run, with half its events deleted
    exported = await runtime.store.export_run("keeper", run_id)
    assert exported is not None
    encoded = encode_archive_object(*exported)
    location = await runtime.archive_backend().put(f"keeper/died/{run_id}.jsonl.gz",
                                                   encoded.data)
    assert await runtime.store.index_archived_run("keeper", exported[0], location,
                                                  {"events": len(events)}, len(events),
                                                  encoded.digest)
    sql(database_url, f"DELETE FROM {SCHEMA}.events WHERE ctid IN (SELECT ctid FROM "
                      f"{SCHEMA}.events WHERE run_id = %s LIMIT 3)", (run_id,))
    assert await runtime.events(run_id) == events  # the archive is read, not the half log
    report = await runtime.archive_runs()
    assert report["agents"]["keeper"]["resumed_purges"] == 1
    assert hot_counts(database_url, run_id) == (0, 0)
    assert await runtime.events(run_id) == events


async def test_an_archive_that_cannot_be_read_is_a_typed_error(make_runtime, tmp_path: Path,
                                                               database_url: str) -> None:
    archive_dir = tmp_path / "archive"
    runtime = await make_runtime(dirs=[agent_dir(tmp_path)], archive_url=archive_dir.as_uri())
    run_id = (await finished_runs(runtime, 1))[0]
    age_runs(database_url, [run_id])
    await runtime.archive_runs()
    for path in archive_dir.rglob("*.jsonl.gz"):
        path.write_bytes(path.read_bytes()[:40])  # truncated
    with pytest.raises(ArchiveUnavailable, match="damaged"):
        await runtime.events(run_id)
    for path in archive_dir.rglob("*.jsonl.gz"):
        path.unlink()
    with pytest.raises(ArchiveUnavailable, match="cannot read archived run"):
        await runtime.receipt(run_id)
    with pytest.raises(RunNotFound):
        await runtime.get_run(str(uuid.uuid4()))


async def test_without_an_archive_nothing_is_archived(make_runtime, tmp_path: Path,
                                                      database_url: str) -> None:
    runtime = await make_runtime(dirs=[agent_dir(tmp_path)])
    run_id = (await finished_runs(runtime, 1))[0]
    age_runs(database_url, [run_id])
    with pytest.raises(ArchiveNotConfigured, match="TOREN_ARCHIVE"):
        await runtime.archive_runs()
    assert [r["id"] for r in (await runtime.archive_runs(dry_run=True))["runs"]] == [run_id]
    assert hot_counts(database_url, run_id)[0] == 1


async def test_the_elected_worker_archives_on_its_maintenance_loop(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    directory = agent_dir(tmp_path, retention=None)
    setup = await make_runtime(dirs=[directory])
    run_id = (await finished_runs(setup, 1))[0]
    age_runs(database_url, [run_id], days=3)
    # two workers, the fleet default retention (TOREN_RETENTION=2d), a pass every 0.2 s
    for _ in range(2):
        await make_runtime(dirs=[directory], archive_url=(tmp_path / "a").as_uri(),
                           default_retention_s=2 * 86400.0, archive_interval_s=0.2)
    deadline = time.monotonic() + 30
    while hot_counts(database_url, run_id)[0] and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert hot_counts(database_url, run_id) == (0, 0)
    assert len(list((tmp_path / "a").rglob("*.jsonl.gz"))) == 1
    assert (await setup.get_run(run_id)).extra["archive"]


@pytest.mark.slow
async def test_live_appends_proceed_while_a_big_pass_archives(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    runtime = await make_runtime(dirs=[agent_dir(tmp_path)], workers=False,
                                 archive_url=(tmp_path / "archive").as_uri(), archive_batch=500)
    # 300 finished runs of 400 events each (120,000 events), ended 40 days ago
    sql(database_url, f"""
        WITH made AS (
            INSERT INTO {SCHEMA}.runs (id, status, input, finished_at, created_at)
            SELECT gen_random_uuid(), 'completed', '"x"', now() - interval '40 days',
                   now() - interval '41 days'
            FROM generate_series(1, 300) RETURNING id)
        INSERT INTO {SCHEMA}.events (run_id, stream, seq, type, data)
        SELECT made.id, 'task:main', n, 'WorkflowLogged',
               json_build_object('n', n, 'message', repeat('log line ', 20), 'fields', '{{}}'::json)
        FROM made, generate_series(1, 400) AS n""")
    live = await runtime.start_run("keeper", "live one")

    async def append_once() -> float:
        started = time.perf_counter()
        ok = await runtime.store.append_unleased(
            "keeper", live, ev.RUN_STREAM,
            [NewEvent.of(ev.WorkflowLogged(n=0, message="still here", fields={}))])
        assert ok
        return (time.perf_counter() - started) * 1000

    idle = [await append_once() for _ in range(50)]
    during: list[float] = []
    archiving = asyncio.create_task(runtime.archive_runs())
    while not archiving.done():
        during.append(await append_once())
    report = archiving.result()
    assert report["agents"]["keeper"]["archived"] == 300
    assert report["agents"]["keeper"]["events"] == 120_000
    # the appends interleaved with the pass instead of waiting for it
    assert len(during) >= 20
    print(json.dumps({"appends_idle_ms_p50": round(statistics.median(idle), 2),
                      "appends_during_ms_p50": round(statistics.median(during), 2),
                      "appends_during_ms_max": round(max(during), 2),
                      "appends_during": len(during),
                      "pass_s": report["duration_s"]}))


async def test_an_archived_run_takes_its_queue_priority_with_it(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    """control migration 0024 keeps a row per run with a priority or a concurrency key; an
    archived run has no message left to give them to, so its purge deletes that row too."""
    runtime = await make_runtime(dirs=[agent_dir(tmp_path)],
                                 archive_url=(tmp_path / "archive").as_uri())
    old = await runtime.start_run("keeper", "topic", priority=3)
    kept = await runtime.start_run("keeper", "topic", priority=4)
    for run_id in (old, kept):
        assert (await runtime.wait_for_run(run_id, timeout_s=60)).status == "completed"
    flow = "SELECT run_id::text, priority FROM toren_control.run_flow ORDER BY priority"
    assert sql(database_url, flow) == [(old, 3), (kept, 4)]
    age_runs(database_url, [old])
    assert (await runtime.archive_runs())["agents"]["keeper"]["archived"] == 1
    assert sql(database_url, flow) == [(kept, 4)]
