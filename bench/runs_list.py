"""The runs list at scale (issue 43 §1): ``GET /runs`` over HTTP with 100,000 runs in the
database, for each way the console asks (a page newest first, the next page, words, a
version, a date range, sorted by cost, model calls or duration, with and without an agent).

    .venv/bin/python bench/runs_list.py                    # 100,000 runs (about a minute)
    .venv/bin/python bench/runs_list.py --runs 10000       # smaller
    DATABASE_URL=postgresql://postgres@127.0.0.1/postgres .venv/bin/python bench/runs_list.py

Prints one JSON document on stdout (progress on stderr): per request, the latency over
``--samples`` requests (p50, p95) and how many runs it returned. Uses a fresh database on the
server of DATABASE_URL (the role needs CREATEDB), or an embedded Postgres in a temporary
directory. The runs are the real agent schema's rows (migrations applied by
``Runtime.start``), each with its run and task events as a run of three steps writes them:
three model calls of known cost, three tool calls; inputs and outputs are sentences of words
drawn from a 2,000-word vocabulary. Finished runs keep their totals in their row (as agent
migration 0029's trigger does when a run finishes); one run in a hundred is left running,
its totals added up when it is read. Not part of ``bench/run.py --smoke``: seeding takes a
minute.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toren.config import Settings
from toren.host.runtime import Runtime
from toren.server.app import create_app
from toren.testing import serve_on_free_port, write_agent_dir

SCHEMA = "agent_bench"
WORDS = 2000


def log(message: str) -> None:
    print(f"[runs-list bench] {message}", file=sys.stderr, flush=True)


def seed(url: str, runs: int) -> dict[str, Any]:
    """``runs`` finished runs over the last 100 days, newest every 86 s or so; the events of
    each as a three-step run writes them (10 events)."""
    started = time.perf_counter()
    batch = 10_000
    with psycopg.connect(url, autocommit=True) as conn:
        for start in range(0, runs, batch):
            count = min(batch, runs - start)
            conn.execute(f"""
                WITH made AS (
                    SELECT gen_random_uuid() AS id, k,
                           now() - (k * 86400.0 * 100 / {runs}) * interval '1 second' AS at,
                           (SELECT string_agg('w' || ((k * 7919 + i * 104729) % {WORDS}), ' ')
                            FROM generate_series(1, 12) AS i) AS question
                    FROM generate_series({start}, {start + count - 1}) AS k
                ), runs_written AS (
                    INSERT INTO {SCHEMA}.runs (id, status, input, output, stop_reason,
                                               created_at, updated_at, finished_at,
                                               agent_version, agent_human_version)
                    SELECT id, 'completed', to_jsonb(question),
                           to_jsonb('an answer about ' || question), 'end_turn', at,
                           at + (5 + k % 60) * interval '1 second',
                           at + (5 + k % 60) * interval '1 second',
                           CASE WHEN k % 2 = 0 THEN 'aaaa' ELSE 'bbbb' END
                             || md5('v' || (k % 2)), CASE WHEN k % 2 = 0 THEN '1.0' ELSE '2.0'
                           END
                    FROM made
                )
                INSERT INTO {SCHEMA}.events (run_id, stream, seq, type, data, created_at)
                SELECT made.id, e.stream, e.seq, e.type, e.data, made.at
                FROM made, LATERAL (VALUES
                    ('run', 1, 'RunCreated', json_build_object('agent', 'bench',
                                                               'input', made.question)),
                    ('task:main', 1, 'TaskStarted', json_build_object('task_id', 'main')),
                    ('task:main', 2, 'ModelCallCompleted', json_build_object(
                        'step', 1, 'cost_usd', (made.k % 97) / 1000.0, 'text', made.question)),
                    ('task:main', 3, 'ToolCallCompleted', json_build_object(
                        'step', 1, 'result', repeat('tool output ', 20))),
                    ('task:main', 4, 'ModelCallCompleted', json_build_object(
                        'step', 2, 'cost_usd', 0.001, 'text', made.question)),
                    ('task:main', 5, 'ToolCallCompleted', json_build_object(
                        'step', 2, 'result', repeat('tool output ', 20))),
                    ('task:main', 6, 'ModelCallCompleted', json_build_object(
                        'step', 3, 'cost_usd', 0.002, 'text', made.question)),
                    ('task:main', 7, 'ToolCallCompleted', json_build_object(
                        'step', 3, 'result', repeat('tool output ', 20))),
                    ('task:main', 8, 'TaskFinished', json_build_object('task_id', 'main')),
                    ('run', 2, 'RunCompleted', json_build_object('output', 'done'))
                ) AS e(stream, seq, type, data)""")
            log(f"seeded {start + count}/{runs} runs")
        # what the trigger of agent migration 0029 keeps in each row when its run finishes;
        # one run in a hundred is left running (its totals are added up when it is read)
        conn.execute(f"""
            UPDATE {SCHEMA}.runs r SET (model_calls, steps, cost_usd, cost_unknown_calls) = (
                SELECT t.model_calls, t.steps, t.cost_usd, t.cost_unknown_calls
                FROM {SCHEMA}.run_totals(r.id) t)""")
        conn.execute(f"""
            UPDATE {SCHEMA}.runs SET status = 'running', finished_at = NULL, output = NULL,
                model_calls = NULL, steps = NULL, cost_usd = NULL, cost_unknown_calls = NULL
            WHERE ctid IN (SELECT ctid FROM {SCHEMA}.runs TABLESAMPLE BERNOULLI (1))""")
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.runs")
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.events")
        row = conn.execute("SELECT count(*) FROM agent_bench.events").fetchone()
    return {"runs": runs, "events": row[0] if row else 0,
            "seed_s": round(time.perf_counter() - started, 1)}


async def measure(base: str, samples: int) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http:
        async def get(query: str) -> dict[str, Any]:
            async with http.get(f"{base}/runs?{query}") as response:
                body = await response.json()
                assert response.status == 200, body
                return body

        first = await get("limit=50")
        second_page = f"limit=50&cursor={first['next_cursor']}"
        after_cost = (await get("limit=50&sort=-cost"))["next_cursor"]
        week = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 7 * 86400))
        queries = {
            "newest_first": "limit=50",
            "newest_first_agent": "limit=50&agent=bench",
            "second_page": second_page,
            "words_1": "limit=50&q=w17",
            "words_or": "limit=50&q=w17%20or%20w1201",
            "words_none": "limit=50&q=nosuchword",
            "version_hash": "limit=50&version=aaaa",
            "version_name": "limit=50&version=2.0",
            "last_7_days": f"limit=50&since={week}",
            "sort_cost": "limit=50&sort=-cost",
            "sort_cost_page_2": f"limit=50&sort=-cost&cursor={after_cost}",
            "sort_cost_7_days": f"limit=50&sort=-cost&since={week}",
            "sort_model_calls": "limit=50&sort=-model_calls",
            "sort_duration": "limit=50&sort=-duration",
            "limit_200": "limit=200",
        }
        results: dict[str, Any] = {}
        for name, query in queries.items():
            await get(query)  # warm: the plan and the pages in Postgres's cache
            times: list[float] = []
            count = 0
            for _ in range(samples):
                started = time.perf_counter()
                count = len((await get(query))["runs"])
                times.append((time.perf_counter() - started) * 1000)
            ordered = sorted(times)
            results[name] = {"query": query, "runs": count,
                             "p50_ms": round(statistics.median(ordered), 1),
                             "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 1)}
            log(f"{name}: {results[name]}")
        return results


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        url = args.database_url
        if url is None:
            from toren_postgres.embedded import ensure_embedded

            embedded = ensure_embedded(home / "pg")
            url = embedded.url
        admin = url
        name = f"toren_runs_list_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        db_url = psycopg.conninfo.make_conninfo(admin, dbname=name)
        try:
            directory = write_agent_dir(home / "agents", "bench")
            runtime = Runtime([directory], settings=Settings(
                database_url=db_url, home=home / "toren", load_plugins=(), pool_size=4))
            await runtime.start(workers=False)
            try:
                seeded = await asyncio.to_thread(seed, db_url, args.runs)
                runner, base = await serve_on_free_port(create_app(runtime, require_keys=False))
                try:
                    results = await measure(base, args.samples)
                finally:
                    await runner.cleanup()
            finally:
                await runtime.stop()
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return {"bench": "runs_list", "load_avg_1m": os.getloadavg()[0], **seeded,
            "requests": results}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL"))
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
