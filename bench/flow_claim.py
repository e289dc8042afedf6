"""The claim's cost with flow control (control migration 0024) against the claim before it
(0012), side by side on the same tables, interleaved sample by sample.

    DATABASE_URL=postgresql://... .venv/bin/python bench/flow_claim.py [--smoke] [--backlog N]

A database with both claims: 0012's function (its text, from the migration file, under
another name; 0024 makes the five-argument name call the new claim), so each pair of samples
reads the same rows, indexes and cache: the ratio is the flow-control claim's cost over the
old one's, which the machine's load moves alike. Prints one JSON object: per scenario the p50
of each side (ms) and the median of the per-pair ratios:

* ``empty``: one message enqueued, claimed and acknowledged (the idle worker's claim).
* ``backlog``: one claim of one message with ``--backlog`` ready messages of the same agent
  waiting (priority 0, as every deployment without priorities has), handed back after.
* ``backlog_priorities``: the same backlog spread over 5 priorities (the skip scan's levels).
* ``limited_blocked`` (new side only): an agent with ``concurrency: 2`` whose two slots are
  taken, with ``--blocked`` ready runs waiting: the claim reads them all to find nothing.
* ``insert``: inserting 100 messages of runs (the trigger copying run_flow), against the same
  insert with the trigger disabled.
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

import psycopg

OLD = ("SELECT o_id FROM toren_control.claim_messages_0012(%s::text[], 'bench', %s::int, "
       "30::float8, 100::int)")
MIGRATIONS = (Path(__file__).resolve().parent.parent / "plugins" / "toren-postgres" / "src"
              / "toren_postgres" / "sql" / "migrations")
NEW = ("SELECT o_id FROM toren_control.claim_messages(%s::text[], 'bench', %s::int, "
       "30::float8, 100::int, 30::float8)")
HAND_BACK = ("UPDATE toren_control.queue SET available_at = now(), attempts = 0, "
             "claimed_by = NULL WHERE id = ANY(%s)")


def timed(conn: psycopg.Connection, statement: str, params: list[Any]) -> tuple[float, list[int]]:
    started = time.perf_counter()
    ids = [row[0] for row in conn.execute(statement, params).fetchall()]
    return 1000 * (time.perf_counter() - started), ids


def pairs(conn: psycopg.Connection, samples: int, agent: str, after: str) -> dict[str, Any]:
    """``samples`` pairs of one-message claims (old, new; the order alternating), each
    followed by ``after`` on what it claimed (hand back, or acknowledge)."""
    old_ms, new_ms, ratios = [], [], []
    for n in range(samples):
        if after == "ack":
            conn.execute("INSERT INTO toren_control.queue (agent, kind) VALUES (%s, 'noop'), "
                         "(%s, 'noop')", [agent, agent])
        found = {}
        for side in (("old", "new") if n % 2 == 0 else ("new", "old")):
            ms, ids = timed(conn, OLD if side == "old" else NEW, [[agent], 1])
            found[side] = ms
            conn.execute(HAND_BACK if after == "hand_back" else
                         "DELETE FROM toren_control.queue WHERE id = ANY(%s)", [ids])
        old_ms.append(found["old"])
        new_ms.append(found["new"])
        ratios.append(found["new"] / found["old"])
    return {"old_ms_p50": round(statistics.median(old_ms), 3),
            "new_ms_p50": round(statistics.median(new_ms), 3),
            "ratio_new_to_old": round(statistics.median(ratios), 3),
            "ratio_spread": [round(min(ratios), 3), round(max(ratios), 3)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--blocked", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    if args.smoke:
        args.backlog, args.blocked, args.samples = 1000, 200, 20
    server = os.environ.get("DATABASE_URL")
    if not server:
        raise SystemExit("set DATABASE_URL to a Postgres server (the role needs CREATEDB)")
    name = f"toren_flow_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = psycopg.conninfo.make_conninfo(server, dbname=name)
    try:
        asyncio.run(migrate(url))
        with psycopg.connect(url, autocommit=True) as conn:
            old = (MIGRATIONS / "0012_claim_messages.sql").read_text()
            conn.execute(old.replace("toren_control.claim_messages(",
                                     "toren_control.claim_messages_0012("))
            out: dict[str, Any] = {"backlog_messages": args.backlog, "blocked_runs": args.blocked,
                                   "samples": args.samples}
            for _ in range(5):  # warm-up: plans made, caches filled
                timed(conn, OLD, [["bench"], 1])
                timed(conn, NEW, [["bench"], 1])
            out["empty"] = pairs(conn, args.samples, "bench", "ack")
            conn.execute("INSERT INTO toren_control.queue (agent, kind, available_at) "
                         "SELECT 'bench', 'noop', now() - interval '1 hour' "
                         "FROM generate_series(1, %s)", [args.backlog])
            conn.execute("ANALYZE toren_control.queue")
            out["backlog"] = pairs(conn, args.samples, "bench", "hand_back")
            conn.execute("UPDATE toren_control.queue SET priority = (id % 5) - 2")
            conn.execute("ANALYZE toren_control.queue")
            out["backlog_priorities"] = pairs(conn, args.samples, "bench", "hand_back")
            out["limited_blocked"] = limited(conn, args)
            out["insert"] = inserts(conn, args.samples)
        print(json.dumps(out))
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return 0


def limited(conn: psycopg.Connection, args: argparse.Namespace) -> dict[str, Any]:
    for _ in range(2):  # both slots taken
        conn.execute("INSERT INTO toren_control.queue (agent, run_id, kind, claimed_by, "
                     "available_at, attempts) VALUES ('bench_limited', gen_random_uuid(), "
                     "'task', 'elsewhere', now() + interval '1 hour', 1)")
    conn.execute("INSERT INTO toren_control.queue (agent, run_id, kind) "
                 "SELECT 'bench_limited', gen_random_uuid(), 'task' "
                 "FROM generate_series(1, %s)", [args.blocked])
    conn.execute("ANALYZE toren_control.queue")
    timings = []
    for _ in range(args.samples):
        ms, ids = timed(conn, NEW, [["bench_limited"], 1])
        assert ids == [], "a full limit let a run through"
        timings.append(ms)
    return {"new_ms_p50": round(statistics.median(timings), 3)}


def inserts(conn: psycopg.Connection, samples: int) -> dict[str, Any]:
    statement = ("INSERT INTO toren_control.queue (agent, run_id, kind, available_at) "
                 "SELECT 'bench_inserts', gen_random_uuid(), 'task', now() + interval '1 day' "
                 "FROM generate_series(1, 100)")
    with_ms, without_ms, ratios = [], [], []
    for n in range(samples):
        found = {}
        for side in (("with", "without") if n % 2 == 0 else ("without", "with")):
            conn.execute("ALTER TABLE toren_control.queue "
                         + ("ENABLE" if side == "with" else "DISABLE") + " TRIGGER queue_flow")
            found[side], _ = timed(conn, statement + " RETURNING id", [])
        with_ms.append(found["with"])
        without_ms.append(found["without"])
        ratios.append(found["with"] / found["without"])
    conn.execute("ALTER TABLE toren_control.queue ENABLE TRIGGER queue_flow")
    return {"without_trigger_ms_p50": round(statistics.median(without_ms), 3),
            "with_trigger_ms_p50": round(statistics.median(with_ms), 3),
            "ratio_with_to_without": round(statistics.median(ratios), 3)}


async def migrate(url: str) -> None:
    from toren.config import Settings
    from toren.host.runtime import Runtime
    from toren.testing import write_agent_dir

    with tempfile.TemporaryDirectory() as work:
        dirs = [write_agent_dir(Path(work), "bench"),
                write_agent_dir(Path(work), "bench_limited", concurrency=2),
                write_agent_dir(Path(work), "bench_inserts")]
        runtime = Runtime(dirs, settings=Settings(database_url=url, home=Path(work) / "home",
                                                  load_plugins=()))
        await runtime.start(workers=False)
        await runtime.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    raise SystemExit(main())
