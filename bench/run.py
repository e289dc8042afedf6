#!/usr/bin/env python3
"""Run Toren's benchmarks beside DBOS, procrastinate and raw Postgres, against one Postgres.

    .venv/bin/python bench/run.py            # full: every figure, median of 3 repetitions
    .venv/bin/python bench/run.py --smoke    # tiny sizes, one repetition: checks it all runs

Prints a table and one JSON line per figure on stdout, and writes bench/RESULTS.md
(``--smoke`` writes bench/out/RESULTS.smoke.md instead). Peers run in their own virtualenv
(``.venv-peers``, created on first use from bench/requirements-peers.txt).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import guards  # bench/guards.py, beside this script
import psycopg
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PEERS = BENCH / "peers"
PEERS_VENV = ROOT / ".venv-peers"
console = Console(stderr=True)

HISTORY = BENCH / "history"
TOREN_FIGURES = ("throughput", "latency", "queue", "resume", "memory", "scaleout", "recovery",
                 "inflight", "growth", "fanout", "delivery", "caching", "ratelimits",
                 "processes")
#: Figures measured by a script of their own (its arguments: --server-url URL [--smoke]).
OWN_SCRIPT = {"caching": "prompt_caching.py", "ratelimits": "rate_limits.py",
              "processes": "processes.py"}
#: Figures --smoke leaves out unless --only names them (they take more than a few seconds).
NOT_IN_SMOKE = ("fanout", "inflight")
#: Figures a full run leaves out unless --only names them (minutes each: agent scale).
NOT_BY_DEFAULT = ("inflight", "growth", "processes")
#: Connection counts raw Postgres is measured at (Toren is compared at the one it used).
RAW_CONNECTIONS = (1, 2, 4, 8, 12)


def log(message: str) -> None:
    console.print(f"[dim][bench][/] {message}")


def peers_python() -> Path:
    """The interpreter of the peers' virtualenv, created and filled on first use."""
    python = PEERS_VENV / "bin" / "python"
    if not python.exists():
        log(f"creating {PEERS_VENV} for the peers (dbos, procrastinate)…")
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-r",
                        str(BENCH / "requirements-peers.txt")], check=True)
    return python


def start_postgres() -> tuple[str, Any, str]:
    """``(server_url, handle, description)``: DATABASE_URL's server or an embedded one."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url, None, "DATABASE_URL"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    pgdata = Path(tempfile.mkdtemp(prefix="toren-bench-pg-")) / "pgdata"
    server = pgserver.get_server(pgdata, cleanup_mode="delete")
    return server.get_uri("postgres"), server, "embedded (pgserver)"


def run_json(command: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run a benchmark script; its last stdout line is its JSON result."""
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    lines = [line for line in done.stdout.splitlines() if line.strip().startswith("{")]
    if not lines:
        tail = "\n".join(done.stderr.splitlines()[-15:])
        return {"ok": False, "error": f"no JSON from {command[1:3]} (exit {done.returncode}): "
                                      f"{tail}"}
    result: dict[str, Any] = json.loads(lines[-1])
    result["wall_s"] = round(time.perf_counter() - started, 1)
    return result


def server_facts(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT current_setting('server_version'), current_setting('fsync'), "
            "current_setting('synchronous_commit'), current_setting('shared_buffers')"
        ).fetchone()
    assert row is not None
    return dict(zip(("server_version", "fsync", "synchronous_commit", "shared_buffers"), row,
                    strict=True))


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def dig(result: dict[str, Any], *path: str | int) -> Any:
    value: Any = result
    for key in path:
        if isinstance(value, dict):
            value = value.get(key)  # type: ignore[call-overload]
        elif isinstance(value, list) and isinstance(key, int) and key < len(value):
            value = value[key]
        else:
            return None
    return value


def procrastinate_at(result: dict[str, Any], concurrency: int) -> float | None:
    for run in result.get("runs", []):
        if run.get("worker_concurrency") == concurrency:
            return run.get("jobs_per_s")  # type: ignore[no-any-return]
    return None


def toren_queue_at(result: dict[str, Any], concurrency: int, field: str = "jobs_per_s"
                   ) -> float | None:
    for run in result.get("runs", []):
        if run.get("concurrency") == concurrency:
            return run.get(field)  # type: ignore[no-any-return]
    return None


def raw_at(result: dict[str, Any], connections: int | None, field: str = "commits_per_s"
           ) -> tuple[int, float] | None:
    """Raw Postgres at the smallest measured connection count >= ``connections`` (the largest
    measured if none is): ``(count, value)``."""
    modes = sorted((m for m in result.get("modes", []) if m.get("synchronous_commit") == "on"),
                   key=lambda m: m["connections"])
    if not modes or connections is None:
        return None
    mode = next((m for m in modes if m["connections"] >= connections), modes[-1])
    return int(mode["connections"]), mode[field]


def spread(values: list[float]) -> str:
    return f"{min(values):g}-{max(values):g}" if len(values) > 1 else ""


def figures(reps: list[dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Headline figures: the median over repetitions, the peer, the median of the per-pair
    ratios (Toren and the peer of the same repetition) and their spread, the target."""

    def each(name: str, *path: str | int) -> list[float | None]:
        return [dig(rep.get(name, {}), *path) for rep in reps]

    rows: list[dict[str, Any]] = []

    def add(figure: str, name: str, mine: list[float | None], unit: str, *,
            theirs: list[float | None] | None = None, peer_name: str = "", target: str = "",
            check: Any = None, invert: bool = False) -> None:
        """``mine``/``theirs``: one value per repetition; ratios are taken per pair.
        ``check(value, ratio)`` says whether the target is met."""
        value = median(mine)
        peer = median(theirs) if theirs else None
        ratios = [round((b / a) if invert else (a / b), 3)
                  for a, b in zip(mine, theirs or [], strict=False)
                  if a is not None and b]
        ratio = round(statistics.median(ratios), 2) if ratios else None
        met = None
        if check is not None and value is not None and (theirs is None or ratio is not None):
            met = bool(check(value, ratio))
        rows.append({"figure": figure, "name": name, "value": value, "unit": unit,
                     "peer": peer, "peer_name": peer_name, "ratio": ratio,
                     "ratio_spread": spread(ratios), "pairs": len(ratios), "target": target,
                     "met": met})

    ops = each("toren_throughput", "operations_per_s")
    # connections Toren had in use at once (statements running or in a transaction), at peak;
    # the pool may hold more open and idle
    conns = each("toren_throughput", "connections_peak_busy")
    shape = median(each("toren_throughput", "operations_per_run"))
    add("1 throughput", f"durable operations/s (1 worker process, {shape or 0:g} per run, "
        "run creation in the window)", ops, "ops/s",
        theirs=each("dbos", "steps_per_s"), peer_name="DBOS steps/s, same shape",
        target=">= 3x DBOS", check=lambda v, r: r >= 3)
    raws = [raw_at(rep.get("pg_raw", {}), None if c is None else int(c))
            for rep, c in zip(reps, conns, strict=True)]
    at = sorted({r[0] for r in raws if r})
    add("1 throughput", f"durable operations/s vs raw commits/s at Toren's connection count "
        f"({'/'.join(map(str, at)) or '?'})", ops, "ops/s",
        theirs=[r[1] if r else None for r in raws], peer_name="raw INSERT+COMMIT/s",
        target=">= 1.0x raw", check=lambda v, r: r >= 1.0)
    add("1 throughput", "durable operations/s vs raw commits/s (1 connection)", ops, "ops/s",
        theirs=each("pg_raw", "commits_per_s_1conn"), peer_name="raw INSERT+COMMIT/s")
    add("1 throughput", "agent steps/s (model call + tool call)",
        each("toren_throughput", "steps_per_s"), "steps/s",
        theirs=[None if v is None else v / 2 for v in each("dbos", "steps_per_s")],
        peer_name="DBOS steps/s / 2")
    add("1 throughput", "runs/s", each("toren_throughput", "runs_per_s"), "runs/s",
        theirs=each("dbos", "workflows_per_s"), peer_name="DBOS workflows/s")
    add("1 throughput", "events/s", each("toren_throughput", "events_per_s"), "events/s")
    add("1 throughput", "Postgres transactions per operation, run creation included",
        each("toren_throughput", "pg_xacts_per_operation"), "xacts",
        theirs=each("dbos", "sequential", "pg_xacts_per_step_approx"),
        peer_name="DBOS xacts/step", target="<= 1.0", check=lambda v, r: v <= 1.0)
    add("1 throughput", "worker CPU per durable operation", each("toren_throughput",
        "cpu_ms_per_operation"), "ms")
    add("1 throughput", "Postgres backends' CPU per durable operation (the server's side of "
        "the same work)", each("toren_throughput", "pg_backend_cpu_ms_per_operation"), "ms")
    add("1 throughput", "connections in use at once (peak)", conns, "conns")
    add("1 throughput", "connections open at once (peak)",
        each("toren_throughput", "connections_peak_open"), "conns")
    op_p50 = each("toren_latency", "ms_per_operation_p50")
    add("2 per-step overhead", "ms per durable operation, p50", op_p50, "ms",
        theirs=each("pg_raw", "modes", 0, "latency_ms_p50"), peer_name="raw commit p50 ms",
        target="<= 2x raw", check=lambda v, r: r <= 2)
    add("2 per-step overhead", "ms per durable operation (p50) against a DBOS step, one at a "
        "time", op_p50, "ms", theirs=each("dbos", "sequential", "ms_per_step"),
        peer_name="DBOS ms per step, sequential")
    add("2 per-step overhead", "ms per durable operation, p99",
        each("toren_latency", "ms_per_operation_p99"), "ms",
        theirs=each("pg_raw", "modes", 0, "latency_ms_p99"), peer_name="raw commit p99 ms")
    add("2 per-step overhead", "worker CPU per durable operation (concurrency 1)",
        each("toren_latency", "cpu_ms_per_operation"), "ms")
    add("2 per-step overhead", "Postgres backends' CPU per durable operation (concurrency 1)",
        each("toren_latency", "pg_backend_cpu_ms_per_operation"), "ms")
    add("2 per-step overhead", "ms per agent step (model call + tool call), p50",
        each("toren_latency", "ms_per_step_p50"), "ms")
    add("2 per-step overhead", "Python function calls per durable operation, a warm run (a "
        "count: it does not move with the machine's load)",
        each("toren_latency", "python_calls_per_operation"), "calls")
    for level in (1, 10):
        add("3 queue", f"no-op jobs/s at concurrency {level} (worker started and stopped in "
            "the window)", [toren_queue_at(rep.get("toren_queue", {}), level) for rep in reps],
            "jobs/s", theirs=[procrastinate_at(rep.get("procrastinate", {}), level)
                              for rep in reps],
            peer_name=f"procrastinate c={level}", target=">= 2x procrastinate",
            check=lambda v, r: r >= 2)
    add("3 queue", "Postgres backends' CPU per no-op job at concurrency 1",
        [toren_queue_at(rep.get("toren_queue", {}), 1, "pg_backend_cpu_ms_per_job")
         for rep in reps], "ms")
    add("3 queue", "wake-up latency p50 (idle worker)", each("toren_queue", "wakeup", "p50_ms"),
        "ms", target="<= 5 ms", check=lambda v, r: v <= 5)
    add("3 queue", "wake-up latency p99 (idle worker)", each("toren_queue", "wakeup", "p99_ms"),
        "ms", target="<= 50 ms", check=lambda v, r: v <= 50)
    lengths = sorted({int(k) for rep in reps
                      for k in dig(rep.get("toren_resume", {}), "lengths") or {}})
    for length in lengths:
        big = length >= 10000
        add("4 resume", f"load + fold + continue, {length} events",
            each("toren_resume", "lengths", str(length)), "ms",
            target="<= 100 ms" if big else "", check=(lambda v, r: v <= 100) if big else None)
    add("5 memory", "idle worker RSS", each("toren_memory", "idle_rss_mb"), "MB",
        target="<= 120 MB", check=lambda v, r: v <= 120)
    add("5 memory", "added RSS per 1,000 runs in flight",
        each("toren_memory", "added_mb_per_1000_runs"), "MB", target="<= 50 MB",
        check=lambda v, r: v <= 50)
    waiting = median(each("toren_memory", "inflight_runs"))
    add("5 memory", f"{waiting or 0:,.0f} runs waiting in a model call on one worker: Postgres "
        "transactions/s (its heartbeat and guardian, none per run)",
        each("toren_memory", "waiting_xacts_per_s"), "xacts/s", target="O(workers)")
    for processes in ("1", "2", "4"):
        add("6 scale-out", f"durable operations/s, {processes} worker process(es)",
            each("toren_scaleout", "processes", processes, "operations_per_s"), "ops/s")
        add("6 scale-out", f"transactions per operation, {processes} process(es)",
            each("toren_scaleout", "processes", processes, "pg_xacts_per_operation"), "xacts")
    add("7 crash recovery", "SIGKILL to progress on a new worker (default settings)",
        each("toren_recovery", "recovery_s_median"), "s", target="<= 10 s",
        check=lambda v, r: v <= 10)
    add("7 crash recovery", "same, TOREN_LEASE_TTL=2",
        each("toren_recovery_ttl2", "recovery_s_median"), "s", target="configurable")
    viewers = median(each("toren_fanout", "streams"))
    add("8 stream fan-out", f"Postgres transactions/s per idle SSE viewer ({viewers or 0:g} "
        "viewers)", each("toren_fanout", "xacts_per_s_per_idle_viewer"), "xacts/s",
        target="<= 0.5", check=lambda v, r: v <= 0.5)
    add("8 stream fan-out", "message sent to viewer receiving it, p50",
        each("toren_fanout", "wakeup_ms_p50"), "ms")
    subscribers = median(each("toren_delivery", "subscribers"))
    add("8 stream fan-out", f"{subscribers or 0:,.0f} SSE subscribers to running runs: append "
        "to delivery, p99", each("toren_delivery", "append_to_delivery_ms_p99"), "ms",
        target="<= 100 ms", check=lambda v, r: v <= 100)
    add("8 stream fan-out", "same, p50", each("toren_delivery", "append_to_delivery_ms_p50"),
        "ms")
    add("8 stream fan-out", "same, of which append to notice (the commit and Postgres's "
        "NOTIFY), p99", each("toren_delivery", "append_to_notice_ms_p99"), "ms")
    add("8 stream fan-out", "same, of which notice to delivery (the API process's read and "
        "writes, the client's read), p99", each("toren_delivery", "notice_to_delivery_ms_p99"),
        "ms")
    add("8 stream fan-out", "same: subscribers missing an event or seeing one out of order",
        each("toren_delivery", "subscribers_missing_or_misordered"), "",
        target="0", check=lambda v, r: v == 0)
    add("8 stream fan-out", "same: API process CPU per frame written (an event or a piece of "
        "model text, to one subscriber)", each("toren_delivery", "server_cpu_us_per_frame"),
        "us")
    add("8 stream fan-out", "same: share of the time the API process's event loop ran / waited "
        "for a CPU", each("toren_delivery", "server_loop_running_share"), "",
        theirs=each("toren_delivery", "server_loop_waiting_for_cpu_share"),
        peer_name="waited")
    add("8 stream fan-out", "same: API process RSS, peak",
        each("toren_delivery", "server_rss_mb_peak"), "MB")
    levels = sorted({int(k) for rep in reps
                     for k in dig(rep.get("toren_inflight", {}), "levels") or {}})
    latency = median(each("toren_inflight", "model_latency_s"))
    for n in levels:
        key = str(n)
        # issue 41: 90% at 10,000 with 20 s model calls (500 calls/s); 75% with 2 s (5,000/s)
        goal = 0.9 if n <= 1000 or (latency or 0) >= 20 else 0.75
        add("9 in flight", f"{n:,} runs: model calls/s against N / latency (efficiency), "
            "steady state (all N in flight)",
            each("toren_inflight", "levels", key, "working", "steady_efficiency"), "",
            theirs=each("dbos_inflight", "levels", key, "steady_efficiency"),
            peer_name=f"DBOS, {n:,} workflows",
            target=f">= {goal:.0%}", check=lambda v, r, goal=goal: v >= goal)
        worked = [w for w in each("toren_inflight", "levels", key, "working", "efficiency")
                  if w is not None]
        if worked and rows[-1]["value"] is None:  # it ran, but never had all N in flight
            rows[-1] |= {"shown": "none: the first run finished before the last one made its "
                                  "first model call", "met": False}
        add("9 in flight", f"{n:,} runs: the same over the whole window (starting {n:,} runs "
            "and the last ones' tail included)",
            each("toren_inflight", "levels", key, "working", "efficiency"), "",
            theirs=each("dbos_inflight", "levels", key, "efficiency"),
            peer_name=f"DBOS, {n:,} workflows")
        add("9 in flight", f"{n:,} runs: started within (the first run's first model call to "
            f"the last run's; {latency or 0:g} s model calls)",
            each("toren_inflight", "levels", key, "working", "started_within_s"), "s",
            target="<= 10 s" if n >= 10000 else "",
            check=(lambda v, r: v <= 10) if n >= 10000 else None)
        add("9 in flight", f"{n:,} runs working: model calls/s per worker core (1,000 / the CPU "
            "ms per model call: the capacity, at the efficiency above)",
            [None if c in (None, 0) else round(1000 / c, 1) for c in each(
                "toren_inflight", "levels", key, "working", "cpu_ms_per_model_call")],
            "calls/s/core", target=">= 2,000" if latency == 2 else "",
            check=(lambda v, r: v >= 2000) if latency == 2 else None)
        add("9 in flight", f"{n:,} runs working: worker CPU per model call (with its appends, "
            "reads and live text)", each("toren_inflight", "levels", key, "working",
                                         "cpu_ms_per_model_call"), "ms",
            theirs=each("dbos_inflight", "levels", key, "cpu_ms_per_model_call"),
            peer_name="DBOS CPU ms per model step")
        add("9 in flight", f"{n:,} runs working: share of the time the worker's event loop "
            "ran / waited for a CPU", each("toren_inflight", "levels", key, "working",
                                          "loop_running_share"), "",
            theirs=each("toren_inflight", "levels", key, "working",
                        "loop_waiting_for_cpu_share"), peer_name="waited")
        add("9 in flight", f"{n:,} runs waiting: Postgres transactions/s (all of them)",
            each("toren_inflight", "levels", key, "waiting", "xacts_per_s"), "xacts/s",
            target="O(workers), not O(runs)")
        add("9 in flight", f"{n:,} runs waiting: Postgres transactions/s per run",
            each("toren_inflight", "levels", key, "waiting", "xacts_per_s_per_run"), "xacts/s")
        add("9 in flight", f"{n:,} runs waiting: connections busy, time average (the "
            "worker's own heartbeat and guardian statements; none per run)",
            each("toren_inflight", "levels", key, "waiting", "connections_busy_mean"), "conns",
            target="0 per run", check=lambda v, r: v < 1)
        add("9 in flight", f"{n:,} runs waiting: connections busy (peak) / open (peak)",
            each("toren_inflight", "levels", key, "waiting", "connections_peak_busy"), "conns",
            theirs=each("toren_inflight", "levels", key, "waiting", "connections_peak_open"),
            peer_name="open")
        add("9 in flight", f"{n:,} runs waiting: worker RSS",
            each("toren_inflight", "levels", key, "waiting", "rss_mb"), "MB",
            target="<= 600 MB" if n >= 10000 else "",
            check=(lambda v, r: v <= 600) if n >= 10000 else None)
    size = median(each("toren_growth", "size_events"))

    def growth_pairs(side: str, key: str) -> list[float | None]:
        """One value per pair of samples (empty and loaded, interleaved) of every repetition;
        files recorded before the pairs have one per repetition."""
        found: list[float | None] = []
        for rep, pairs in zip(reps, each("toren_growth", "pairs"), strict=True):
            if pairs:
                found += [pair[side][key] for pair in pairs]
            elif "toren_growth" in rep:
                found.append(rep["toren_growth"].get(side, {}).get(key))
        return found

    add("10 cost growth", f"durable operations/s with {size or 0:,.0f} events and "
        f"{(size or 0) / 10:,.0f} finished runs in the tables, against empty tables "
        "(pairs of samples, interleaved)",
        growth_pairs("loaded", "operations_per_s"), "ops/s",
        theirs=growth_pairs("empty", "operations_per_s"), peer_name="empty tables",
        target="within 15%", check=lambda v, r: r >= 0.85)
    add("10 cost growth", "claim latency p50, same tables against empty",
        growth_pairs("loaded", "claim_ms_p50"), "ms",
        theirs=growth_pairs("empty", "claim_ms_p50"), peer_name="empty tables",
        target="within 15%", check=lambda v, r: r <= 1.15)
    backlog = median(each("toren_growth", "backlog"))
    add("10 cost growth", f"claim latency p50 with {backlog or 0:,.0f} ready messages waiting",
        each("toren_growth", "backlog_claim", "claim_ms_p50"), "ms",
        theirs=each("toren_growth", "empty", "claim_ms_p50"), peer_name="empty queue",
        target="<= 2x empty", check=lambda v, r: r <= 2)
    add("10 cost growth", f"claim latency p50 with {backlog or 0:,.0f} ready messages of "
        "another agent waiting", each("toren_growth", "foreign_backlog_claim", "claim_ms_p50"),
        "ms", theirs=each("toren_growth", "empty", "claim_ms_p50"), peer_name="empty queue",
        target="<= 2x empty", check=lambda v, r: r <= 2)
    loop = median(each("toren_caching", "steps"))
    add("11 prompt caching", f"Anthropic, a {loop or 0:g}-step tool loop: cost with "
        "promptCaching (cache_control breakpoints) against without, Sonnet 4.6 prices",
        each("toren_caching", "anthropic", "cost_with_usd"), "USD",
        theirs=each("toren_caching", "anthropic", "cost_without_usd"),
        peer_name="promptCaching: false", target="<= 0.5x", check=lambda v, r: r <= 0.5)
    add("11 prompt caching", "OpenAI (automatic caching), the same loop: cost against its cost "
        "at the uncached price, gpt-4o-mini prices",
        each("toren_caching", "openai", "cost_usd"), "USD",
        theirs=each("toren_caching", "openai", "cost_at_uncached_price_usd"),
        peer_name="uncached price")
    add("11 prompt caching", "receipts' costs equal to the fakes' bills (1: every run)",
        [None if rep.get("toren_caching", {}).get("anthropic") is None else float(
            rep["toren_caching"]["anthropic"]["receipts_match_provider_bill"]
            and rep["toren_caching"]["openai"]["receipt_matches_provider_bill"])
         for rep in reps], "", target="1", check=lambda v, r: v == 1)
    limited = median(each("toren_ratelimits", "limit_requests"))
    window = median(each("toren_ratelimits", "window_s"))
    runs_n = median(each("toren_ratelimits", "with_limiter", "runs"))
    add("12 rate limits", f"3 workers, {runs_n or 0:g} runs, a fake enforcing {limited or 0:g} "
        "requests and "
        f"{median(each('toren_ratelimits', 'limit_input_tokens')) or 0:,.0f} input tokens per "
        f"{window or 0:g} s: 429s with TOREN_RATE_LIMITS against without",
        each("toren_ratelimits", "with_limiter", "status_429"), "429s",
        theirs=each("toren_ratelimits", "without_limiter", "status_429"),
        peer_name="no limiter (each worker backs off alone)", target="0",
        check=lambda v, r: v == 0)
    add("12 rate limits", "retries the runs recorded, with the limiter against without",
        each("toren_ratelimits", "with_limiter", "retries"), "retries",
        theirs=each("toren_ratelimits", "without_limiter", "retries"), peer_name="no limiter")
    add("12 rate limits", "throughput: requests per window over the windows the work took, "
        "against the limit", each("toren_ratelimits", "with_limiter", "throughput_vs_limit"),
        "x limit", theirs=each("toren_ratelimits", "without_limiter", "throughput_vs_limit"),
        peer_name="no limiter", target=">= 0.95", check=lambda v, r: v >= 0.95)
    add("12 rate limits", "most requests the fake admitted in any one window (the limit: "
        f"{limited or 0:g})", each("toren_ratelimits", "with_limiter",
                                   "most_requests_in_a_window"), "requests",
        target=f"<= {limited or 0:g}", check=lambda v, r: limited is not None and v <= limited)
    # bench/processes.py: toren worker --processes 2 against 1, ABAB pairs inside each run
    add("13 worker processes", "durable operations/s with 2 worker processes vs raw commits/s "
        "at their total connection count", each("toren_processes", "throughput",
                                                 "operations_per_s", "two_processes"), "ops/s",
        theirs=each("toren_processes", "throughput", "two_processes_raw_commits_per_s"),
        peer_name="raw INSERT+COMMIT/s", target=">= 0.7x raw", check=lambda v, r: r >= 0.7)
    add("13 worker processes", "durable operations/s, 2 processes over 1 (no model latency)",
        each("toren_processes", "throughput", "operations_per_s", "ratio_two_to_one"), "x")
    add("13 worker processes", "model calls/s, 2 processes over 1 (model latency dominates)",
        each("toren_processes", "model_latency", "model_calls_per_s", "ratio_two_to_one"), "x",
        target=">= 1.6x", check=lambda v, r: v >= 1.6)
    return rows


def render(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="Toren vs peers (median of repetitions)")
    for column in ("figure", "measure", "Toren", "peer", "ratio (spread)", "target", "met"):
        table.add_column(column)
    for row in rows:
        if row["value"] is None and "shown" not in row:
            continue
        met = {True: "[green]yes[/]", False: "[red]no[/]", None: ""}[row["met"]]
        table.add_row(row["figure"], row["name"], *cells(row)[:3], row["target"], met)
    return table


def cells(row: dict[str, Any]) -> tuple[str, str, str]:
    """Toren's value, the peer's, and the ratio with its per-pair spread, as text."""
    value = (row.get("shown", "n/a") if row["value"] is None
             else f"{row['value']:g} {row['unit']}".strip())
    peer = "" if row["peer"] is None else f"{row['peer']:g} ({row['peer_name']})"
    ratio = "" if row["ratio"] is None else f"{row['ratio']:g}x"
    if ratio and row.get("ratio_spread"):
        ratio += f" ({row['ratio_spread']})"
    return value, peer, ratio


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any],
             reps: list[dict[str, dict[str, Any]]]) -> str:
    lines = [
        "# Benchmark results",
        "",
        f"Generated by `bench/run.py` on {meta['date']} from the raw results in "
        f"`{meta.get('history', 'bench/history/')}`; every figure is the median of its "
        f"repetitions ({meta['repetitions']} for the first file), Toren and the peers in one "
        "invocation against the same Postgres, interleaved (ABAB, the order alternating by "
        "repetition). A ratio is the median of the per-repetition ratios (Toren and the "
        "peer of the same repetition), the range after it their spread.",
        "",
        "## Machine and versions",
        "",
        *[f"- {key}: {value}" for key, value in meta["machine"].items()],
        "",
        "## Figures",
        "",
        "| figure | measure | Toren | peer | ratio (spread) | target | met |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if row["value"] is None and "shown" not in row:
            continue
        value, peer, ratio = cells(row)
        met = {True: "yes", False: "**no**", None: ""}[row["met"]]
        lines.append(f"| {row['figure']} | {row['name']} | {value} | {peer} | {ratio} | "
                     f"{row['target']} | {met} |")
    lines += before_after()
    notes = BENCH / "history.md"
    if notes.exists():
        lines += ["", notes.read_text().strip()]
    lines += first_token()
    lines += rate_limits_section()
    lines += ["", "## Raw results", "", "One JSON object per benchmark and repetition.", "",
              "```json"]
    for index, rep in enumerate(reps, 1):
        for name, result in rep.items():
            lines.append(json.dumps({"repetition": index, "name": name} | result))
    lines += ["```", ""]
    return "\n".join(lines)


#: ``bench/first_token.py``'s recorded runs (one JSON object each, newest last by name).
FIRST_TOKEN_HISTORY = HISTORY / "first-token"
#: Extra latency to the first token a reader may see through Toren (issue 20).
FIRST_TOKEN_TARGET_MS = 20.0


def first_token() -> list[str]:
    """The section on first-token latency, from the newest run recorded under
    bench/history/first-token/ (``bench/first_token.py`` is its own command: it needs a
    fake provider and ``toren`` processes, not the figures' harness)."""
    recorded = sorted(FIRST_TOKEN_HISTORY.glob("*.json")) if FIRST_TOKEN_HISTORY.exists() else []
    if not recorded:
        return []
    path = recorded[-1]
    data = json.loads(path.read_text())
    lines = ["", "## First token through Toren", "",
             f"`.venv/bin/python {data.get('command', 'bench/first_token.py')}` (see "
             "[README](README.md#first-token-through-toren)), recorded in "
             f"[{path.relative_to(BENCH)}]({path.relative_to(BENCH)}) at commit "
             f"`{data.get('commit', '?')}` (load average {data.get('load_average_1m', '?')}): "
             "latency from the fake provider writing the first text chunk to the reader "
             "receiving it.", "",
             "| way | p50 | p90 | min | extra p50 over direct | target | met |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    ways = (("direct", "direct: `openai` SDK streaming from the fake", None),
            ("toren_dev", "`toren dev` (worker and server in one process), `/runs/{id}/events` "
             "`text_delta`", "extra_toren_dev_p50_ms"),
            ("toren_split", "`toren worker` + `toren serve` (the piece crosses Postgres NOTIFY)",
             "extra_toren_split_p50_ms"))
    for key, title, extra_key in ways:
        way = data.get(key)
        if not way:
            continue
        extra = data.get(extra_key) if extra_key else None
        target = met = ""
        if extra is not None:
            target = f"<= {FIRST_TOKEN_TARGET_MS:g} ms"
            met = "yes" if extra <= FIRST_TOKEN_TARGET_MS else "**no**"
        lines.append(f"| {title} | {way['p50_ms']} ms | {way['p90_ms']} ms | {way['min_ms']} ms "
                     f"| {'' if extra is None else f'**{extra} ms**'} | {target} | {met} |")
    return lines


#: ``bench/rate_limits.py``'s recorded full runs (one JSON object each, newest last by name).
RATE_LIMITS_HISTORY = HISTORY / "ratelimits"


def rate_limits_section() -> list[str]:
    """The section on provider rate limits across a fleet, from the newest full run recorded
    under bench/history/ratelimits/ (figure 12 at its real sizes takes minutes: a one-minute
    window, twice over)."""
    recorded = (sorted(RATE_LIMITS_HISTORY.glob("*.json")) if RATE_LIMITS_HISTORY.exists()
                else [])
    if not recorded:
        return []
    path = recorded[-1]
    data = json.loads(path.read_text())
    limit = data["limit_requests"]
    lines = ["", "## Provider rate limits across a fleet", "",
             "`.venv/bin/python bench/rate_limits.py --server-url URL` (figure 12; see "
             "[README](README.md#provider-rate-limits)), recorded in "
             f"[{path.relative_to(BENCH)}]({path.relative_to(BENCH)}) (load average "
             f"{', '.join(str(x) for x in data.get('load_average', []))}): "
             f"{data['workers']} `toren worker` processes, {data['with_limiter']['runs']} runs of "
             f"two model calls, a fake Anthropic API enforcing {limit} requests and "
             f"{data['limit_input_tokens']:,} input tokens per {data['window_s']:g} s.", "",
             "| mode | 429s | retries | calls that waited | most requests in a window | "
             "most input tokens in a window | throughput vs limit | elapsed |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, title in (("with_limiter", "`TOREN_RATE_LIMITS` (one budget in Postgres)"),
                       ("without_limiter", "no limiter (each worker backs off alone)")):
        mode = data.get(key)
        if mode:
            lines.append(f"| {title} | {mode['status_429']} | {mode['retries']} | "
                         f"{mode['waited_calls']} | {mode['most_requests_in_a_window']} | "
                         f"{mode['most_input_tokens_in_a_window']:,} | "
                         f"{mode['throughput_vs_limit']:.3f}x | {mode['elapsed_s']:.0f} s |")
    return lines


#: The measures the before-and-after table follows across recorded runs (name prefix).
TRACKED = (
    ("ops/s", "durable operations/s (1 worker process", "value"),
    ("x DBOS", "durable operations/s (1 worker process", "ratio"),
    ("x raw, same connections", "durable operations/s vs raw commits/s at Toren's", "ratio"),
    ("xacts/op", "Postgres transactions per operation", "value"),
    ("CPU ms/op", "worker CPU per durable operation", "value"),
    ("ms/op p50", "ms per durable operation, p50", "value"),
    ("x raw p50", "ms per durable operation, p50", "ratio"),
    ("calls/op c=1", "Python function calls per durable operation", "value"),
    ("queue c=1 x procrastinate", "no-op jobs/s at concurrency 1", "ratio"),
    ("in flight 1,000: efficiency, steady state", "1,000 runs: model calls/s against",
     "value"),
    ("in flight 1,000: efficiency, whole window", "1,000 runs: the same over the whole",
     "value"),
    ("in flight 1,000: CPU ms/model call", "1,000 runs working: worker CPU per model call",
     "value"),
    ("in flight 10,000: efficiency, steady state", "10,000 runs: model calls/s against",
     "value"),
    ("in flight 10,000: efficiency, whole window", "10,000 runs: the same over the whole",
     "value"),
)


def before_after() -> list[str]:
    """A row per recorded run in bench/history/ (its label, settings and headline figures),
    generated from the raw JSON kept there, oldest first."""
    recorded = sorted(HISTORY.glob("*.json")) if HISTORY.exists() else []
    if not recorded:
        return []
    lines = ["", "## Before and after (from bench/history/)", "",
             "Each row is one recorded invocation of `bench/run.py` (the file under "
             "`bench/history/` holds its raw JSON); ratios are medians of per-repetition pairs.",
             "", "| recorded | label | Toren settings | reps | "
             + " | ".join(title for title, _, _ in TRACKED) + " |",
             "| --- | --- | --- | --- | " + " | ".join("---" for _ in TRACKED) + " |"]
    for path in recorded:
        data = json.loads(path.read_text())
        # from the raw repetitions, so a column added later is filled for older runs too
        rows = figures(data["reps"]) if data.get("reps") else data.get("rows", [])
        values = []
        for _title, prefix, field in TRACKED:
            row = next((r for r in rows if r["name"].startswith(prefix)
                        and r.get(field) is not None), None)
            values.append("" if row is None else f"{row[field]:g}")
        env = " ".join(f"{k}={v}" for k, v in sorted(data["meta"].get("toren_env", {}).items()))
        lines.append(f"| [{path.name}](history/{path.name}) | {data['meta'].get('label', '')} | "
                     f"{env or 'defaults'} | {data['meta']['repetitions']} | "
                     + " | ".join(values) + " |")
    return lines


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes and one repetition (CI): proves the harness runs")
    parser.add_argument("--reps", type=int, default=None,
                        help="repetitions per figure (default 3, smoke 1)")
    parser.add_argument("--no-peers", action="store_true", help="skip DBOS and procrastinate")
    parser.add_argument("--only", default=None,
                        help="comma-separated Toren figures to run (default: all; --smoke "
                             f"leaves out {', '.join(NOT_IN_SMOKE)})")
    parser.add_argument("--out", type=Path, default=None, help="where to write the Markdown")
    parser.add_argument("--label", default=None,
                        help="names the run in bench/history/ (e.g. before-group-commit)")
    parser.add_argument("--toren-env", action="append", default=[], metavar="KEY=VALUE",
                        help="a TOREN_* setting for Toren's side (e.g. TOREN_GROUP_COMMIT=0)")
    parser.add_argument("--toren-arg", action="append", default=[], metavar="ARG",
                        help="an argument for toren_bench.py, e.g. --toren-arg=--size=1000000 "
                             "(recorded with the run)")
    parser.add_argument("--no-guards", action="store_true",
                        help="do not check the figures that must not regress (bench/guards.py; "
                             "checked by default: --smoke exits non-zero when one fails)")
    parser.add_argument("--render", type=Path, nargs="+", default=None, metavar="HISTORY_JSON",
                        help="write the Markdown from recorded runs, running nothing (several "
                             "files: their figures together, repetition by repetition, the "
                             "first file's machine and settings; where two files have the same "
                             "result, the earlier file's)")
    return parser.parse_args()


def write_markdown(out: Path, record: dict[str, Any]) -> None:
    rows = figures(record["reps"])
    record["rows"] = rows
    Console(width=max(160, Console().width)).print(render(rows))
    for row in rows:
        if row["value"] is not None:
            print(json.dumps({"figure": row["figure"], "measure": row["name"]}
                             | {k: row[k] for k in ("value", "unit", "peer", "peer_name",
                                                    "ratio", "ratio_spread", "target",
                                                    "met")}), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(markdown(rows, record["meta"], record["reps"]))
    log(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


def main() -> int:
    args = parse_args()
    reps_n = args.reps or (1 if args.smoke else 3)
    out = args.out or (BENCH / "out" / "RESULTS.smoke.md" if args.smoke
                       else BENCH / "RESULTS.md")
    if args.render is not None:
        records = [json.loads(path.read_text()) for path in args.render]
        record = records[0]
        for other in records[1:]:
            for index, rep in enumerate(other["reps"]):
                if index < len(record["reps"]):
                    # an earlier file's results win: a later run made with the peers on has
                    # their results too, paired with its own figures, not the earlier ones
                    record["reps"][index] = rep | record["reps"][index]
                else:
                    record["reps"].append(rep)
        record["meta"]["history"] = ", ".join(
            str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT)
            else str(path) for path in args.render)
        write_markdown(out, record)
        return 0
    if args.only is None:
        only = [f for f in TOREN_FIGURES if f not in (NOT_IN_SMOKE if args.smoke
                                                       else NOT_BY_DEFAULT)]
    else:
        only = [f for f in args.only.split(",") if f]
    toren_env = dict(item.split("=", 1) for item in args.toren_env)
    if any(not key.startswith("TOREN_") for key in toren_env):
        raise SystemExit("--toren-env takes TOREN_* settings only")
    server_url, server, source = start_postgres()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOREN_")}
    env["DATABASE_URL"] = server_url
    toren_env_full = env | toren_env
    peer_python = None if args.no_peers else peers_python()
    smoke = ["--smoke"] if args.smoke else []
    raw_levels = ",".join(map(str, RAW_CONNECTIONS))
    peer_commands: dict[str, list[str]] = {
        "pg_raw": [str(peer_python or sys.executable), str(PEERS / "bench_pg_raw.py"),
                   "--seconds", "1" if args.smoke else "3", "--connections", raw_levels],
    }
    if peer_python is not None:
        # the same shape as Toren's runs: 2 * steps + 1 durable operations per workflow
        # (toren_bench.py: 5 steps full, 3 smoke), from 8 client threads (Toren: 8 pollers)
        peer_commands["dbos"] = [str(peer_python), str(PEERS / "bench_dbos.py"),
                                 *(["-n", "60", "-k", "11"] if args.smoke
                                   else ["-n", "200", "-k", "11", "-c", "8"])]
        peer_commands["procrastinate"] = [str(peer_python), str(PEERS / "bench_procrastinate.py"),
                                          *(["-m", "300"] if args.smoke else [])]
        if "inflight" in only:
            # figure 9's shape on DBOS: N workflows of 4 model steps (each waiting the model
            # latency) and 3 tool steps in one process, at Toren's levels and latency
            peer_commands["dbos_inflight"] = [
                str(peer_python), str(PEERS / "bench_dbos.py"), "--phases", "inflight",
                *inflight_shape(args.toren_arg, args.smoke)]
    reps: list[dict[str, dict[str, Any]]] = []
    failures = 0
    try:
        meta: dict[str, Any] = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "repetitions": reps_n,
            "label": args.label or ("smoke" if args.smoke else ""), "toren_env": toren_env,
            "commit": git_commit(), "figures": only, "toren_args": args.toren_arg,
            "machine": {
                "cpus": os.cpu_count(), "platform": platform.platform(),
                "python": platform.python_version(), "toren": version("toren"),
                "psycopg": version("psycopg"), "postgres": source,
                "load_average_at_start": os.getloadavg()[0], **server_facts(server_url)}}
        for rep in range(1, reps_n + 1):
            results: dict[str, dict[str, Any]] = {}

            def peers(rep: int = rep, results: dict[str, dict[str, Any]] = results) -> None:
                for name, command in peer_commands.items():
                    log(f"repetition {rep}/{reps_n}: {name}")
                    results[name] = run_json(command, env, timeout=1800)

            def toren(rep: int = rep, results: dict[str, dict[str, Any]] = results) -> None:
                for figure in only:
                    log(f"repetition {rep}/{reps_n}: toren {figure}")
                    command = [sys.executable, str(BENCH / "toren_bench.py"), figure,
                               "--server-url", server_url, *smoke, *args.toren_arg]
                    if figure in OWN_SCRIPT:
                        command = [sys.executable, str(BENCH / OWN_SCRIPT[figure]),
                                   "--server-url", server_url, *smoke]
                    results[f"toren_{figure}"] = run_json(command, toren_env_full,
                                                          timeout=3600)
                    if figure == "recovery":
                        results["toren_recovery_ttl2"] = run_json(
                            [*command, "--lease-ttl", "2"], toren_env_full, timeout=1800)

            # ABAB: the peers first in odd repetitions, Toren first in even ones
            for part in ((peers, toren) if rep % 2 else (toren, peers)):
                part()
            for name, result in results.items():
                if not result.get("ok"):
                    failures += 1
                    log(f"[red]{name} failed:[/] {result.get('error')}")
            reps.append(results)
        if peer_python is not None:
            for peer, dist in (("dbos", "dbos"), ("procrastinate", "procrastinate")):
                probe = subprocess.run([str(peer_python), "-c",
                                        f"from importlib.metadata import version as v; "
                                        f"print(v('{dist}'))"],
                                       capture_output=True, text=True, check=False)
                meta["machine"][peer] = probe.stdout.strip() or "?"
        record = {"meta": meta, "reps": reps}
        if not args.smoke:
            HISTORY.mkdir(exist_ok=True)
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M")
            path = HISTORY / f"{stamp}-{args.label or 'run'}.json"
            meta["history"] = str(path.relative_to(ROOT))
            record["rows"] = figures(reps)
            path.write_text(json.dumps(record, indent=1) + "\n")
            log(f"recorded {path.relative_to(ROOT)}")
            write_markdown(out, record)
        else:
            write_markdown(out, record)
        if not args.no_guards:
            load = max(meta["machine"]["load_average_at_start"], os.getloadavg()[0])
            failures += report_guards(record["rows"], fail=args.smoke,
                                      load_per_core=round(load / (os.cpu_count() or 1), 2))
    finally:
        if server is not None:
            server.cleanup()
            shutil.rmtree(Path(server.pgdata).parent, ignore_errors=True)
    return 1 if failures else 0


def report_guards(rows: list[dict[str, Any]], *, fail: bool, load_per_core: float) -> int:
    """Check the rows against bench/guards.py's bounds; log each failure (to stderr, naming the
    figure, its ratio or value, the bound and the noise allowance). Return how many failed if
    ``fail`` (the smoke), else 0 (a full run reports them, and its table says what is met).
    ``load_per_core``: the busiest the machine was (a timing's failure above
    ``guards.BUSY_LOAD_PER_CORE`` is reported, excused)."""
    found = guards.check(rows, load_per_core=load_per_core)
    failed = [f for f in found if f.excused_at_load is None]
    for failure in found:
        log(f"[{'red' if failure in failed else 'yellow'}]{failure.message()}[/]")
        print(failure.message(), file=sys.stderr, flush=True)
    missing = guards.unchecked(rows)
    if missing:
        log("guards not checked (their figures did not run): "
            + "; ".join(f"{g.figure} '{g.measure}'" for g in missing))
    if not failed:
        log(f"guards: {len(guards.GUARDS) - len(missing)} checked, none failed (load "
            f"{load_per_core:g} per core)")
    return len(failed) if fail else 0


def inflight_shape(toren_args: list[str], smoke: bool) -> list[str]:
    """``--inflight-levels`` and ``--model-latency`` for DBOS's side of figure 9: Toren's
    (toren_bench.py's defaults, its --smoke sizes, or what ``--toren-arg`` set)."""
    shape = {"--inflight-levels": "20" if smoke else "1000,10000",
             "--model-latency": "0.5" if smoke else "2"}
    for index, arg in enumerate(toren_args):
        name, _, value = arg.partition("=")
        if name in shape and not smoke:
            shape[name] = value or (toren_args[index + 1] if index + 1 < len(toren_args)
                                    else shape[name])
    return [item for pair in shape.items() for item in pair]


def git_commit(path: Path = ROOT) -> str:
    """The checkout's commit, ``+changes`` after it when tracked files differ from it."""
    done = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain",
                            "--untracked-files=no"],
                           capture_output=True, text=True, check=False).stdout.strip()
    return (done.stdout.strip() or "?") + ("+changes" if dirty else "")


if __name__ == "__main__":
    sys.exit(main())
