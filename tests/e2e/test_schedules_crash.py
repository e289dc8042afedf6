"""Schedules through SIGKILL: three ``toren worker`` processes fire a schedule every two
seconds while workers are killed at random; every slot starts exactly one run, none is missed,
and a schedule removed from agent.yaml stops firing."""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from tests.chaos.helpers import start_worker
from tests.conftest import wait_until
from toren.testing import write_agent_dir

SCHEMA = "agent_cron_crew"


def fires(url: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT slot_at, run_id::text, trigger FROM "
                            "toren_control.schedule_fires ORDER BY slot_at").fetchall()


def scheduled_runs(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(f"SELECT id::text, status FROM {SCHEMA}.runs "
                            "WHERE schedule = 'tick'").fetchall()
    return dict(rows)


def fired_events(url: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(f"SELECT run_id::text, data->>'slot' FROM {SCHEMA}.events "
                            "WHERE type = 'ScheduleFired'").fetchall()


@pytest.mark.slow
def test_every_slot_starts_one_run_while_workers_are_killed(start_toren, database_url: str,
                                                           tmp_path: Path) -> None:
    schedule = {"name": "tick", "cron": "*/2 * * * * *", "input": "what is new?"}
    directory = write_agent_dir(tmp_path, "cron-crew", schedules=[schedule])
    env = {"DATABASE_URL": database_url, "TOREN_SCHEDULE_SECONDS": "1",
           "TOREN_SCHEDULE_INTERVAL": "0.5", "TOREN_LEASE_TTL": "1",
           "TOREN_POLL_INTERVAL": "0.2", "TOREN_MAX_DELIVERIES": "100"}
    seed = int(os.environ.get("TOREN_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    workers = [start_worker(start_toren, directory, env) for _ in range(3)]
    kills = 0
    deadline = time.monotonic() + 24
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.5, 3.0))
        victim = workers.pop(rng.randrange(len(workers)))
        victim.proc.kill()
        victim.proc.wait(timeout=10)
        kills += 1
        workers.append(start_worker(start_toren, directory, env))

    # the schedule leaves agent.yaml: a worker with the new file retires it, and the workers
    # still running the old file cannot fire it any more
    directory.joinpath("agent.yaml").write_text("model: toren/scripted\n")
    workers.append(start_worker(start_toren, directory, env))
    retired = len(fires(database_url))
    time.sleep(4)
    for worker in workers[:-1]:
        worker.proc.kill()
        worker.proc.wait(timeout=10)
    assert len(fires(database_url)) == retired, f"a removed schedule fired (seed {seed})"
    assert wait_until(lambda: set(scheduled_runs(database_url).values()) == {"completed"}, 90)

    fired = fires(database_url)
    slots = [slot for slot, _run, _trigger in fired]
    print(json.dumps({"seed": seed, "kills": kills, "slots": len(slots)}))
    assert len(slots) >= 8, f"seed {seed}"
    # every two seconds, none missed, none twice
    assert all(b - a == timedelta(seconds=2) for a, b in itertools.pairwise(slots)), (
        f"seed {seed}: {slots}")
    assert {trigger for _s, _r, trigger in fired} == {"cron"}
    runs = scheduled_runs(database_url)
    assert sorted(runs) == sorted(run for _s, run, _t in fired), f"seed {seed}"
    # each run was started by one slot, and each slot by one run
    events = fired_events(database_url)
    assert sorted(run for run, _slot in events) == sorted(runs)
    assert len({slot for _run, slot in events}) == len(slots)
