"""Schedules against real Postgres: each slot starts one run however many processes fire at
once; removed, paused and resumed schedules; manual triggers; the missed-slots policy."""

from __future__ import annotations

import asyncio
import itertools
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.durable import check_log, types
from toren.errors import ScheduleNotFound, ScheduleRemoved
from toren.testing import write_agent_dir


def crew(tmp_path: Path, *schedules: dict[str, Any], name: str = "cron-crew") -> Path:
    return write_agent_dir(tmp_path, name, schedules=list(schedules))


def every_second(name: str = "tick", **fields: Any) -> dict[str, Any]:
    return {"name": name, "cron": "* * * * * *", "input": f"scheduled {name}", **fields}


EXAMPLES = Path(__file__).resolve().parents[2] / "contrib" / "examples"


@pytest.fixture(autouse=True)
def seconds_cron(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_SCHEDULE_SECONDS", "1")


async def fires(database_url: str) -> list[tuple[str, datetime, str, str]]:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cursor = await conn.execute(
            "SELECT schedule, slot_at, run_id::text, trigger FROM toren_control.schedule_fires "
            "ORDER BY slot_at")
        return [tuple(row) for row in await cursor.fetchall()]  # type: ignore[misc]


async def set_next_fire(database_url: str, name: str, at: datetime) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("UPDATE toren_control.schedules SET next_fire_at = %s WHERE name = %s",
                           [at, name])


async def test_racing_processes_fire_each_slot_once(make_runtime, database_url: str,
                                                    tmp_path: Path) -> None:
    directory = crew(tmp_path, every_second())
    # three processes' worth of claimers, no workers: only the claim decides who fires
    runtimes = [await make_runtime(dirs=[directory], workers=False) for _ in range(3)]
    await runtimes[0].sync_schedules()
    deadline = asyncio.get_running_loop().time() + 4

    async def hammer(runtime: Any) -> int:
        count = 0
        while asyncio.get_running_loop().time() < deadline:
            count += len(await runtime.fire_due_schedules())
            await asyncio.sleep(0.01)
        return count

    counts = await asyncio.gather(*(hammer(r) for r in runtimes))
    fired = await fires(database_url)
    slots = [slot for _name, slot, _run, _trigger in fired]
    assert sum(counts) == len(fired) >= 3
    assert len(set(slots)) == len(slots)
    # consecutive seconds, none skipped, none twice
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(slots))
    runs = await runtimes[0].list_runs(schedule="tick", limit=100)
    assert sorted(r.id for r in runs) == sorted(run for _n, _s, run, _t in fired)
    assert all(r.schedule == "tick" and r.input == "scheduled tick" for r in runs)
    assert await runtimes[0].list_runs(schedule="other") == []
    record = runs[-1]
    assert record.idempotency_key is not None and record.idempotency_key.startswith("schedule:")
    events = await runtimes[0].events(record.id)
    assert types(events, "run")[:3] == ["RunCreated", "ScheduleFired", "TaskScheduled"]
    fired_event = next(e for e in events if e.type == "ScheduleFired")
    assert fired_event.data["schedule"] == "tick" and fired_event.data["trigger"] == "cron"
    assert datetime.fromisoformat(fired_event.data["slot"]) in slots


async def test_scheduled_runs_run_to_completion_on_workers(make_runtime,
                                                           tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[crew(tmp_path, every_second())],
                                 schedule_interval_s=0.2)
    for _ in range(100):
        runs = await runtime.list_runs(schedule="tick")
        if runs:
            break
        await asyncio.sleep(0.1)
    finished = await runtime.wait_for_run(runs[-1].id, timeout_s=30)
    assert finished.status == "completed" and finished.schedule == "tick"
    check_log(await runtime.events(finished.id))


async def test_a_schedule_removed_from_agent_yaml_stops_firing(make_runtime, database_url: str,
                                                              tmp_path: Path) -> None:
    first = await make_runtime(dirs=[crew(tmp_path / "v1", every_second())], workers=False)
    await first.sync_schedules()
    # the new agent.yaml has no schedule any more: syncing it retires the old one
    second = await make_runtime(dirs=[crew(tmp_path / "v2")], workers=False)
    await second.sync_schedules()
    await asyncio.sleep(1.5)
    assert await second.fire_due_schedules() == []
    assert await first.fire_due_schedules() == []  # an old process cannot revive it either
    assert await fires(database_url) == []
    [record] = await second.list_schedules()
    assert record.state == "removed" and record.to_json()["next_fire_at"] is None
    with pytest.raises(ScheduleRemoved, match=r"no longer in its agent\.yaml"):
        await second.trigger_schedule("cron-crew", "tick")
    # and it comes back when the entry does, from its next slot
    await first.sync_schedules()
    assert (await first.get_schedule("cron-crew", "tick")).state == "active"


async def test_pause_stops_firing_and_resume_skips_what_passed(make_runtime, database_url: str,
                                                               tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[crew(tmp_path, every_second())], workers=False)
    await runtime.sync_schedules()
    paused = await runtime.pause_schedule("cron-crew", "tick")
    assert paused.state == "paused" and paused.to_json()["next_fire_at"] is None
    await asyncio.sleep(1.5)
    assert await runtime.fire_due_schedules() == []
    resumed = await runtime.resume_schedule("cron-crew", "tick")
    assert resumed.state == "active"
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        row = await (await conn.execute("SELECT now()")).fetchone()
    assert row is not None and resumed.next_fire_at is not None
    assert resumed.next_fire_at > row[0] - timedelta(seconds=1)  # nothing from the pause
    await asyncio.sleep(1.2)
    assert [f.trigger for f in await runtime.fire_due_schedules()] != []
    assert all(f[3] == "cron" for f in await fires(database_url))


async def test_trigger_fires_now_even_while_paused(make_runtime, database_url: str,
                                                  tmp_path: Path) -> None:
    schedule = {"name": "daily", "cron": "0 7 * * *", "timezone": "Europe/Paris",
                "input": {"topic": "news"}}
    runtime = await make_runtime(dirs=[crew(tmp_path, schedule)], workers=False)
    await runtime.sync_schedules()
    await runtime.pause_schedule("cron-crew", "daily")
    fired = await runtime.trigger_schedule("cron-crew", "daily")
    assert fired.trigger == "manual"
    record = await runtime.get_run(fired.run_id)
    assert record.schedule == "daily" and record.input == {"topic": "news"}
    shown = await runtime.get_schedule("cron-crew", "daily")
    assert shown.fires[0]["run_id"] == fired.run_id and shown.fires[0]["trigger"] == "manual"
    assert shown.state == "paused" and shown.last_fired_at is not None
    with pytest.raises(ScheduleNotFound):
        await runtime.trigger_schedule("cron-crew", "nightly")
    with pytest.raises(ScheduleNotFound):
        await runtime.pause_schedule("cron-crew", "nightly")


@pytest.mark.parametrize(("missed", "expected_catchup"), [("skip", 0), ("catchup", 3)])
async def test_missed_slots_follow_the_policy(make_runtime, database_url: str, tmp_path: Path,
                                              missed: str, expected_catchup: int) -> None:
    schedule = {"name": "minutely", "cron": "* * * * *", "missed": missed, "catchupLimit": 3}
    runtime = await make_runtime(dirs=[crew(tmp_path, schedule)], workers=False)
    await runtime.sync_schedules()
    # everything was down for ten minutes
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    await set_next_fire(database_url, "minutely", now - timedelta(minutes=10))
    fired = await runtime.fire_due_schedules()
    catchup = [f for f in fired if f.trigger == "catchup"]
    assert len(catchup) == expected_catchup
    assert [f.trigger for f in fired if f.trigger != "catchup"] in (["cron"], [], ["cron"] * 2)
    record = await runtime.get_schedule("cron-crew", "minutely")
    assert record.skipped_slots >= 10 - 3 - expected_catchup
    assert record.next_fire_at is not None and record.next_fire_at > now - timedelta(minutes=1)
    # the catchup slots are the most recent missed ones
    if catchup:
        assert max(f.slot_at for f in catchup) >= now - timedelta(minutes=3)


async def test_a_schedule_of_a_workflow_agent_starts_its_workflow(make_runtime,
                                                                 tmp_path: Path) -> None:
    directory = Path(shutil.copytree(EXAMPLES / "planner-crew", tmp_path / "planner-crew"))
    with (directory / "agent.yaml").open("a") as yaml_file:
        yaml_file.write("schedules:\n  - name: nightly\n    cron: '0 3 * * *'\n"
                        "    input: How does durable execution use event sourcing?\n")
    runtime = await make_runtime(dirs=[directory])
    fired = await runtime.trigger_schedule("planner-crew", "nightly")
    record = await runtime.wait_for_run(fired.run_id, timeout_s=60)
    assert record.status == "completed", record.error
    assert record.schedule == "nightly" and "Event sourcing stores every change" in record.output
    run_stream = types(await runtime.events(fired.run_id), "run")
    assert run_stream[:2] == ["RunCreated", "ScheduleFired"] and "WaveStarted" in run_stream
