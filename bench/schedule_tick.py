"""What a worker's schedule loop costs the database: the idle look (one indexed read) and the
transaction that fires one slot, with N schedules in the table (docs/guides/scheduling.md).

    .venv/bin/python bench/schedule_tick.py [--schedules 1000] [--ticks 2000]

Uses DATABASE_URL, else an embedded Postgres in a temporary directory. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from toren_postgres.queries import query

from toren.config import Settings
from toren.core.schedules import ScheduleSpec
from toren.host.runtime import Runtime
from toren.testing import write_agent_dir


def server_url() -> tuple[str, object]:
    import os

    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"], None
    import pgserver

    server = pgserver.get_server(Path(tempfile.mkdtemp(prefix="toren-tick-")) / "pgdata",
                                 cleanup_mode="delete")
    return server.get_uri("postgres"), server


async def measure(url: str, schedules: int, ticks: int) -> dict[str, object]:
    directory = write_agent_dir(Path(tempfile.mkdtemp()), "ticker")
    settings = Settings(database_url=url, load_plugins=())
    runtime = Runtime([directory], settings=settings)
    await runtime.start(workers=False)
    try:
        # many schedules that are not due, and one that is (set due before each fire below)
        specs = [ScheduleSpec(name=f"s{i:05d}", cron="0 7 * * *") for i in range(schedules)]
        await runtime.store.sync_schedules("ticker", specs)
        agents = ["ticker"]
        idle = []
        for _ in range(ticks):
            start = time.perf_counter()
            await runtime.store.seconds_to_next_slot(agents)
            idle.append(time.perf_counter() - start)
        fire = []
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            base = datetime.now(UTC).replace(microsecond=0)
            for i in range(min(ticks, 200)):
                due = base - timedelta(seconds=1 + i / 1000)  # a distinct slot each time
                await conn.execute("UPDATE toren_control.schedules SET next_fire_at = %s "
                                   "WHERE name = 's00000'", [due])
                start = time.perf_counter()
                fired = await runtime.fire_due_schedules()
                fire.append(time.perf_counter() - start)
                assert len(fired) == 1, fired
            plan = await (await conn.execute(
                b"EXPLAIN (ANALYZE, BUFFERS) " + query("next_due_schedule").encode(),
                {"agents": agents})).fetchall()
    finally:
        await runtime.stop()

    def ms(values: list[float], q: float) -> float:
        return round(statistics.quantiles(values, n=100)[int(q) - 1] * 1000, 3)

    return {"schedules": schedules, "idle_look": {"statements": 1, "p50_ms": ms(idle, 50),
                                                  "p99_ms": ms(idle, 99)},
            "fire_one_slot": {"statements": "5 + BEGIN/COMMIT, then an empty claim (3)",
                              "p50_ms": ms(fire, 50), "p99_ms": ms(fire, 99)},
            "idle_plan": [row[0] for row in plan]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=2000)
    args = parser.parse_args()
    url, server = server_url()
    try:
        print(json.dumps(asyncio.run(measure(url, args.schedules, args.ticks)), indent=2))
    finally:
        if server is not None:
            server.cleanup()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
