"""Retention at scale: append latency and table size before, during and after an archive pass
over millions of events, and the same log partitioned by month for comparison.

    .venv/bin/python bench/retention.py                       # 2,000,000 events (minutes)
    .venv/bin/python bench/retention.py --events 200000       # smaller
    DATABASE_URL=postgresql://postgres@127.0.0.1/postgres .venv/bin/python bench/retention.py

Prints one JSON document on stdout (progress on stderr). Uses a fresh database on the server
of DATABASE_URL (the role needs CREATEDB), or an embedded Postgres in a temporary directory.
Not part of ``bench/run.py --smoke``: it takes minutes. What it measures:

1. ``toren``: the real agent schema (migrations applied by ``Runtime.start``). Half the runs
   ended 40 days ago (retention 30d), half 5 days ago. Appends are the run log's own statement
   (``append_unleased``) on a live run; the archive pass is ``Runtime.archive_runs`` to a file
   archive. Append latency idle, then during the pass from a second connection pool; table
   size before, after the pass, after ``VACUUM``, and after appending as many events again
   (does the table reuse the space, or grow?).
2. ``partitioned``: the same events in a table range-partitioned by month on ``created_at``
   (the primary key then has to include it), and the plain table beside it: the same single-row
   INSERT into each, interleaved (latency ratio), and the old half removed by dropping its
   partitions against deleting it in batches of 1000 from the plain table (time, space).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toren.config import Settings
from toren.core import events as ev
from toren.core.events import NewEvent
from toren.host.runtime import Runtime
from toren.testing import write_agent_dir

SCHEMA = "agent_bench"
EVENT_DATA = ("json_build_object('n', n, 'message', repeat('step output ', 12), "
              "'fields', '{}'::json)")


def log(message: str) -> None:
    print(f"[retention bench] {message}", file=sys.stderr, flush=True)


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"n": len(ordered), "p50_ms": round(statistics.median(ordered), 3),
            "p95_ms": at(0.95), "p99_ms": at(0.99), "max_ms": round(ordered[-1], 3)}


def sizes(conn: psycopg.Connection, *tables: str) -> dict[str, int]:
    found = {}
    for table in tables:
        row = conn.execute("SELECT pg_total_relation_size(%s::regclass)", [table]).fetchone()
        found[table] = int(row[0]) if row else 0
    return found


def partition_size(conn: psycopg.Connection, parent: str) -> int:
    row = conn.execute("SELECT COALESCE(sum(pg_total_relation_size(inhrelid)), 0) "
                       "FROM pg_inherits WHERE inhparent = %s::regclass", [parent]).fetchone()
    return int(row[0]) if row else 0


def seed(conn: psycopg.Connection, table: str, runs: int, per_run: int,
         with_runs: bool) -> None:
    """``runs`` finished runs of ``per_run`` events; half ended 40 days ago, half 5 days ago,
    and their events were written when they ran (spread over the two months before)."""
    batch = max(1, 200_000 // per_run)
    for start in range(0, runs, batch):
        count = min(batch, runs - start)
        conn.execute(f"""
            WITH made AS (
                SELECT gen_random_uuid() AS id, k,
                       now() - ((CASE WHEN k % 2 = 0 THEN 40 ELSE 5 END) || ' days')::interval
                         AS ended
                FROM generate_series({start}, {start + count - 1}) AS k
            ), runs_written AS (
                INSERT INTO {SCHEMA}.runs (id, status, input, created_at, finished_at)
                SELECT id, 'completed', '"bench"', ended - interval '1 hour', ended
                FROM made WHERE {with_runs}
            )
            INSERT INTO {table} (run_id, stream, seq, type, data, created_at)
            SELECT made.id, 'task:main', n, 'WorkflowLogged', {EVENT_DATA},
                   made.ended - interval '1 hour' + n * interval '1 millisecond'
            FROM made, generate_series(1, {per_run}) AS n""")
        log(f"seeded {start + count}/{runs} runs into {table}")


def seed_toren(url: str, runs: int, per_run: int) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        seed(conn, f"{SCHEMA}.events", runs, per_run, True)
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.events")
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.runs")
        return sizes(conn, f"{SCHEMA}.events", f"{SCHEMA}.runs")


def refill(url: str, runs: int, per_run: int
           ) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Sizes after the pass, after VACUUM, and after appending as many events again."""
    with psycopg.connect(url, autocommit=True) as conn:
        after = sizes(conn, f"{SCHEMA}.events", f"{SCHEMA}.runs")
        conn.execute(f"VACUUM {SCHEMA}.events")
        vacuumed = sizes(conn, f"{SCHEMA}.events")
        log("appending as many events again, to see whether the space is reused")
        seed(conn, f"{SCHEMA}.events", runs // 2, per_run, True)
        return after, vacuumed, sizes(conn, f"{SCHEMA}.events")


async def toren_side(url: str, home: Path, runs: int, per_run: int,
                     samples: int) -> dict[str, Any]:
    agents = home / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    directory = write_agent_dir(agents, "bench", retention="30d")
    settings = Settings(database_url=url, home=home / "toren", load_plugins=(),
                        archive_url=(home / "archive").as_uri(), pool_size=4)
    runtime = Runtime([directory], settings=settings)
    appender = Runtime([directory], settings=dataclasses.replace(settings, pool_size=2))
    await runtime.start(workers=False)
    await appender.start(workers=False, migrate=False)
    try:
        before = await asyncio.to_thread(seed_toren, url, runs, per_run)
        live = await runtime.start_run("bench", "live")

        async def append() -> float:
            started = time.perf_counter()
            assert await appender.store.append_unleased(
                "bench", live, ev.RUN_STREAM,
                [NewEvent.of(ev.WorkflowLogged(n=0, message="live", fields={}))])
            return (time.perf_counter() - started) * 1000

        # a second process appends all along: the database's side alone, without sharing
        # this process's CPU and event loop with the pass
        out, stop = home / "appends.json", home / "stop"
        child = subprocess.Popen([sys.executable, __file__, "--append-loop",  # noqa: ASYNC220
                                  url, live, str(out), str(stop)])
        await asyncio.sleep(3)
        idle = [await append() for _ in range(samples)]
        log("archiving (appends continue from a second pool and a second process)")
        during: list[float] = []
        pass_started = time.time()
        task = asyncio.create_task(runtime.archive_runs())
        while not task.done():
            during.append(await append())
        pass_ended = time.time()
        report = task.result()
        idle_after = [await append() for _ in range(samples)]
        stop.touch()
        await asyncio.to_thread(child.wait, 60)
        external = json.loads(out.read_text())
        ext_idle = [ms for at, ms in external if at < pass_started]
        ext_during = [ms for at, ms in external if pass_started <= at <= pass_ended]
        after, vacuumed, refilled = await asyncio.to_thread(refill, url, runs, per_run)
        archived_events = report["agents"]["bench"]["events"]
        counts = report["agents"]["bench"]
        return {
            "events_seeded": runs * per_run, "runs_seeded": runs,
            "archived_runs": counts["archived"], "archived_events": archived_events,
            "archive_bytes": counts["bytes"], "pass_s": report["duration_s"],
            "archived_events_per_s": round(archived_events / max(report["duration_s"], 1e-9)),
            "append_idle": percentiles(idle), "append_during_pass": percentiles(during),
            "append_idle_after": percentiles(idle_after),
            "other_process_append_idle": percentiles(ext_idle),
            "other_process_append_during_pass": percentiles(ext_during),
            "other_process_during_over_idle_p50": round(
                statistics.median(ext_during) / statistics.median(ext_idle), 3),
            "during_over_idle_p50": round(statistics.median(during) / statistics.median(idle),
                                          3),
            "events_table_bytes": {"before": before[f"{SCHEMA}.events"],
                                   "after_pass": after[f"{SCHEMA}.events"],
                                   "after_vacuum": vacuumed[f"{SCHEMA}.events"],
                                   "after_refill_same_volume": refilled[f"{SCHEMA}.events"]},
        }
    finally:
        await appender.stop()
        await runtime.stop()


def partitioned_side(url: str, runs: int, per_run: int, samples: int) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS bench_part")
        conn.execute(f"CREATE TABLE bench_part.plain (LIKE {SCHEMA}.events INCLUDING ALL)")
        conn.execute("""CREATE TABLE bench_part.parted (
            run_id uuid NOT NULL, stream text NOT NULL, seq integer NOT NULL,
            type text NOT NULL, data json NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (run_id, stream, seq, created_at)) PARTITION BY RANGE (created_at)""")
        months = conn.execute("""SELECT m, m + interval '1 month' FROM generate_series(
                                 date_trunc('month', now()) - interval '3 months',
                                 date_trunc('month', now()) + interval '1 month',
                                 interval '1 month') AS m""").fetchall()
        for start, end in months:
            conn.execute(sql.SQL("CREATE TABLE {} PARTITION OF bench_part.parted FOR VALUES "
                                 "FROM ({}) TO ({})").format(
                sql.Identifier("bench_part", f"parted_{start:%Y%m}"), sql.Literal(start),
                sql.Literal(end)))
        for table in ("bench_part.plain", "bench_part.parted"):
            seed(conn, table, runs, per_run, False)
            conn.execute(f"VACUUM ANALYZE {table}")
        size_plain = sizes(conn, "bench_part.plain")["bench_part.plain"]
        size_parted = partition_size(conn, "bench_part.parted")
        run_id = str(uuid.uuid4())
        latencies: dict[str, list[float]] = {"plain": [], "parted": []}
        for seq in range(1, samples + 1):
            for table in ("plain", "parted") if seq % 2 else ("parted", "plain"):
                started = time.perf_counter()
                conn.execute(f"INSERT INTO bench_part.{table} (run_id, stream, seq, type, data) "
                             "VALUES (%s, 'run', %s, 'WorkflowLogged', '{\"n\": 0}')",
                             [run_id, seq])
                latencies[table].append((time.perf_counter() - started) * 1000)
        cutoff = conn.execute("SELECT now() - interval '30 days'").fetchone()[0]  # type: ignore[index]
        old_parts = [name for (name,) in conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'bench_part.parted'::regclass AND "
            "pg_get_expr(c.relpartbound, c.oid) IS NOT NULL ORDER BY c.relname").fetchall()]
        # drop whole months older than the cutoff (what partitioning by time offers)
        started = time.perf_counter()
        dropped = 0
        for name in old_parts:
            upper = conn.execute(f"SELECT max(created_at) FROM bench_part.{name}").fetchone()
            if upper and upper[0] is not None and upper[0] < cutoff:
                conn.execute(f"DROP TABLE bench_part.{name}")
                dropped += 1
        drop_s = time.perf_counter() - started
        # the same rows deleted from the plain table the way an archive pass does
        started = time.perf_counter()
        deleted = 0
        while True:
            cursor = conn.execute("DELETE FROM bench_part.plain WHERE ctid IN (SELECT ctid FROM "
                                  "bench_part.plain WHERE created_at < %s LIMIT 1000)", [cutoff])
            deleted += cursor.rowcount
            if cursor.rowcount < 1000:
                break
        delete_s = time.perf_counter() - started
        conn.execute("VACUUM bench_part.plain")
        result = {
            "events_each": runs * per_run,
            "insert_plain": percentiles(latencies["plain"]),
            "insert_partitioned": percentiles(latencies["parted"]),
            "partitioned_over_plain_p50": round(statistics.median(latencies["parted"])
                                                / statistics.median(latencies["plain"]), 3),
            "bytes_before": {"plain": size_plain, "partitioned": size_parted},
            "remove_old_half": {
                "partitions_dropped": dropped, "drop_s": round(drop_s, 3),
                "plain_rows_deleted_in_batches": deleted, "plain_batched_delete_s":
                round(delete_s, 3)},
            "bytes_after_removal": {"plain_after_vacuum":
                                    sizes(conn, "bench_part.plain")["bench_part.plain"],
                                    "partitioned": partition_size(conn, "bench_part.parted")},
        }
        conn.execute("DROP SCHEMA bench_part CASCADE")
        return result


async def append_loop(url: str, run_id: str, out: Path, stop: Path) -> None:
    """``--append-loop``: append to ``run_id`` until ``stop`` exists; write ``[[time, ms]]``."""
    from toren_postgres.store import PostgresStore

    store = PostgresStore(Settings(database_url=url, load_plugins=(), pool_size=2))
    await store.open()
    samples = []
    try:
        while not stop.exists():  # noqa: ASYNC240
            started = time.perf_counter()
            assert await store.append_unleased(
                "bench", run_id, ev.RUN_STREAM,
                [NewEvent.of(ev.WorkflowLogged(n=0, message="other", fields={}))])
            samples.append((time.time(), (time.perf_counter() - started) * 1000))
            await asyncio.sleep(0.01)
    finally:
        await store.close()
    out.write_text(json.dumps(samples))  # noqa: ASYNC240


def main() -> None:
    if sys.argv[1:2] == ["--append-loop"]:
        url, run_id, out, stop = sys.argv[2:6]
        asyncio.run(append_loop(url, run_id, Path(out), Path(stop)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000, help="events to seed")
    parser.add_argument("--per-run", type=int, default=1000, help="events per run")
    parser.add_argument("--samples", type=int, default=500, help="appends per measurement")
    parser.add_argument("--skip-partitioned", action="store_true")
    args = parser.parse_args()
    runs = max(2, args.events // args.per_run)
    server = os.environ.get("DATABASE_URL")
    with tempfile.TemporaryDirectory(prefix="toren-retention-bench-") as tmp:
        home = Path(tmp)
        embedded = None
        if server is None:
            from toren_postgres.embedded import ensure_embedded

            embedded = ensure_embedded(home / "pg")
            server = embedded.url
        name = f"toren_retention_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = psycopg.conninfo.make_conninfo(server, dbname=name)
        try:
            result: dict[str, Any] = {"figure": "retention",
                                      "server_version": psycopg.connect(url).info.server_version}
            result["toren"] = asyncio.run(toren_side(url, home, runs, args.per_run,
                                                     args.samples))
            if not args.skip_partitioned:
                log("partitioned comparison")
                result["partitioned"] = partitioned_side(url, runs, args.per_run, args.samples)
        finally:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
