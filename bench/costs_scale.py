"""``GET /costs`` at scale: the route's latency over an agent with 100,000 runs (and their
model calls) spread over 90 days, a thousand of them forks with copied calls.

    DATABASE_URL=postgresql://postgres@127.0.0.1/postgres .venv/bin/python bench/costs_scale.py
    .venv/bin/python bench/costs_scale.py --runs 10000 --calls 3      # smaller

Prints one JSON document on stdout (progress on stderr). Uses a fresh database on the server
of DATABASE_URL (the role needs CREATEDB). The agent schema is the real one (migrations applied
by ``Runtime.start``); runs and events are written by SQL in bulk, each run a ``run`` stream of
three events and a ``task:main`` stream of a ``TaskStarted``, ``--calls`` steps of
``ModelCallStarted``, ``ModelCallCompleted`` (about 700 bytes of data: text, usage, cost; one
in twenty without a known price) and ``ToolCallCompleted``, and a ``TaskFinished``. The route
is served in process (``create_app``) and timed from an HTTP client: the default window (30
days by day), 12 weeks by week, a year by day, and one agent's last day.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import psycopg

from toren.agents import schema_name_for
from toren.config import Settings
from toren.host.runtime import Runtime
from toren.server.app import create_app
from toren.testing import serve_on_free_port, write_agent_dir

AGENT = "costs-bench"
MODELS = ("anthropic/claude-sonnet-4-5", "openai/gpt-5-mini", "anthropic/claude-haiku-4-5")

SEED = """
INSERT INTO {s}.runs (id, status, input, created_at, updated_at, finished_at)
SELECT md5('run' || n)::uuid, 'completed', '"x"'::jsonb,
       now() - (n % {days}) * interval '1 day' - (n % 86400) * interval '1 second',
       now(), now()
FROM generate_series(1, {runs}) n;

INSERT INTO {s}.events (run_id, stream, seq, type, data, created_at)
SELECT r.id, 'run', k, (ARRAY['RunCreated', 'TaskScheduled', 'RunCompleted'])[k],
       '{{"note": "bench"}}'::json, r.created_at + k * interval '1 millisecond'
FROM {s}.runs r, generate_series(1, 3) k;

INSERT INTO {s}.events (run_id, stream, seq, type, data, created_at)
SELECT r.id, 'task:main', 1, 'TaskStarted', '{{"task_id": "main"}}'::json, r.created_at
FROM {s}.runs r;

INSERT INTO {s}.events (run_id, stream, seq, type, data, created_at)
SELECT r.id, 'task:main', 2 + (step - 1) * 3 + part,
       (ARRAY['ModelCallStarted', 'ModelCallCompleted', 'ToolCallCompleted'])[part + 1],
       CASE part WHEN 1 THEN json_build_object(
           'step', step, 'epoch', 1,
           'model', (ARRAY[{models}])[1 + (hashtext(r.id::text) & 1023) % 3],
           'text', repeat('a considered answer ', 30),
           'tool_calls', '[]'::json, 'stop_reason', 'tool_use',
           'usage', json_build_object('input_tokens', 1200 + step, 'output_tokens', 150,
                                      'cache_read_tokens', 0, 'cache_write_tokens', 0),
           'cost_usd', CASE WHEN (hashtext(r.id::text) & 1023) % 20 = 0 THEN NULL
                            ELSE 0.0036 + step * 0.0001 END,
           'latency_ms', 850.0, 'repeated', false)
       ELSE json_build_object('step', step, 'epoch', 1) END,
       r.created_at + (step * 3 + part) * interval '1 second'
FROM {s}.runs r, generate_series(1, {calls}) step, generate_series(0, 2) part;

INSERT INTO {s}.events (run_id, stream, seq, type, data, created_at)
SELECT r.id, 'task:main', 2 + {calls} * 3, 'TaskFinished', '{{"status": "completed"}}'::json,
       r.created_at + interval '1 minute'
FROM {s}.runs r;

-- forks: the first {forks} runs, each forked at its step 1 (one copied call, TaskForked, one
-- live call)
INSERT INTO {s}.runs (id, status, input, created_at, updated_at, finished_at, forked_from)
SELECT md5('fork' || n)::uuid, 'completed', '"x"'::jsonb, now() - interval '1 hour', now(),
       now(), md5('run' || n)::uuid
FROM generate_series(1, {forks}) n;

-- as create_fork writes them: the copied events and the marker in one statement
INSERT INTO {s}.events (run_id, stream, seq, type, data, created_at)
SELECT f.id, e.stream, e.seq, e.type, e.data, now() - interval '1 hour'
FROM {s}.runs f JOIN {s}.events e ON e.run_id = f.forked_from
WHERE f.forked_from IS NOT NULL AND e.stream = 'task:main' AND e.seq <= 4
UNION ALL
SELECT f.id, 'task:main', 5, 'TaskForked', '{{"at_step": 1}}'::json, now() - interval '1 hour'
FROM {s}.runs f WHERE f.forked_from IS NOT NULL;

INSERT INTO {s}.events (run_id, stream, seq, type, data, created_at)
SELECT f.id, 'task:main', 6, 'ModelCallCompleted', e.data, now() - interval '59 minutes'
FROM {s}.runs f JOIN {s}.events e ON e.run_id = f.forked_from
WHERE f.forked_from IS NOT NULL AND e.stream = 'task:main' AND e.seq = 3;
"""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def timed(http: aiohttp.ClientSession, url: str, repeat: int) -> dict[str, Any]:
    times, body = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        async with http.get(url) as answer:
            body = await answer.json()
            assert answer.status == 200, body
        times.append((time.perf_counter() - started) * 1000)
    assert body is not None
    return {"p50_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1),
            "calls": body["totals"]["calls"], "cost_usd": round(body["totals"]["cost_usd"], 4),
            "buckets": len(body["buckets"])}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=3, help="model calls per run")
    parser.add_argument("--forks", type=int, default=1000)
    parser.add_argument("--days", type=int, default=90, help="days the runs are spread over")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the database (for EXPLAIN)")
    args = parser.parse_args()
    admin = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1/postgres")
    name = f"toren_costs_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = psycopg.conninfo.make_conninfo(admin, dbname=name)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            directory = write_agent_dir(Path(tmp), AGENT)
            runtime = Runtime([directory], settings=Settings(database_url=url,
                                                             home=Path(tmp) / "home"))
            await runtime.start(workers=False)
            schema = schema_name_for(AGENT)
            log(f"seeding {args.runs:,} runs, {args.runs * args.calls:,} model calls ...")
            started = time.perf_counter()
            sql = SEED.format(s=f'"{schema}"', runs=args.runs, calls=args.calls,
                              forks=args.forks, days=args.days,
                              models=", ".join(f"'{m}'" for m in MODELS))
            with psycopg.connect(url, autocommit=True) as conn:
                for statement in sql.split(";\n"):
                    if statement.strip():
                        conn.execute(statement)
                # what agent migration 0029's trigger records as each run finishes
                conn.execute(f"""
                    INSERT INTO "{schema}".model_call_costs
                    SELECT c.* FROM "{schema}".runs r
                    CROSS JOIN LATERAL "{schema}".model_call_cost_rows(r.id) c
                    WHERE r.finished_at IS NOT NULL ON CONFLICT DO NOTHING""")
                conn.execute(f'VACUUM ANALYZE "{schema}".events')
                conn.execute(f'VACUUM ANALYZE "{schema}".runs')
                conn.execute(f'VACUUM ANALYZE "{schema}".model_call_costs')
                events = conn.execute(f'SELECT count(*) FROM "{schema}".events').fetchone()
                size = conn.execute(f"SELECT pg_size_pretty(pg_total_relation_size("
                                    f"'\"{schema}\".events'))").fetchone()
            log(f"seeded in {time.perf_counter() - started:.0f}s")
            year_ago = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 365 * 86400))
            runner, base = await serve_on_free_port(create_app(runtime, require_keys=False))
            try:
                async with aiohttp.ClientSession() as http:
                    await timed(http, f"{base}/costs", 1)  # warm the pool and the cache
                    results = {
                        "30 days by day": await timed(http, f"{base}/costs", args.repeat),
                        "12 weeks by week": await timed(http, f"{base}/costs?period=week",
                                                        args.repeat),
                        "a year by day": await timed(
                            http, f"{base}/costs?since={year_ago}", args.repeat),
                        "one agent, today": await timed(
                            http, f"{base}/costs?agent={AGENT}&since="
                                  f"{time.strftime('%Y-%m-%d', time.gmtime())}", args.repeat),
                    }
            finally:
                await runner.cleanup()
                await runtime.stop()
        print(json.dumps({"runs": args.runs + args.forks, "model_calls_per_run": args.calls,
                          "events": events[0] if events else None,
                          "events_table": size[0] if size else None, "results": results},
                         indent=2))
    finally:
        if args.keep:
            log(f"kept the database {name}")
        else:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    asyncio.run(main())
