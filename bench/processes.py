#!/usr/bin/env python3
"""Worker processes across the machine's cores (issue 41, goal 2): ``toren worker --processes
N`` with 1 and 2 processes, side by side in one invocation, in ABAB order (1, 2, 2, 1, ...).

    python bench/processes.py --server-url URL [--smoke] [--pairs N]

Two figures, each in a fresh database per sample:

* ``throughput``: ``--runs`` runs of ``--steps`` agent steps (offline model, no delay: 2 *
  steps + 1 durable operations each), created by 8 concurrent callers in this process while
  the supervisor's processes (``TOREN_CONCURRENCY=--concurrency`` each) work them. Durable
  operations/s over the window of figure 1 (first run created to last run finished), the
  connections busy at once at peak (all processes together), and raw Postgres's INSERT+COMMIT/s
  at that connection count measured right after on the same server
  (``bench/peers/bench_pg_raw.py``): the ratio is the goal's "durable operations/s across the
  machine vs raw commits/s at the same total connection count". Also each side's worker CPU
  per operation (the children's, from /proc) and Postgres backends' CPU per operation.
* ``model_latency``: every model call takes ``--delay`` seconds (``TOREN_SCRIPTED_DELAY``);
  ``--latency-runs`` runs of one step (two model calls and a tool call each), all created
  before the workers start, ``--latency-concurrency`` slots per process: model calls/s from
  the first model call started to the last completed, against the ideal (slots x processes /
  delay), and 2 processes over 1. With enough slots one process spends its CPU on the calls'
  bookkeeping and falls short of its ideal; a second process on another core adds its own.

Prints one JSON object with the load average at the start and end: these are wall-clock
figures, only comparable when read on a quiet machine (load under 1 at the start).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH / "peers")]

from bench_pg_raw import DDL, measure  # noqa: E402  (bench/peers, beside this script)
from toren_bench import (  # noqa: E402
    TOREN,
    BenchDatabase,
    ConnectionSampler,
    bench_crew,
    create_runs,
    process_cpu_s,
    wait_terminal,
    window,
)

#: Concurrent run creators in this process (figure 1's shape: 8 callers).
CALLERS = 8


def log(message: str) -> None:
    print(f"[processes] {message}", file=sys.stderr, flush=True)


class Supervised:
    """``toren worker --processes N --json`` in a subprocess, once it printed its ready line."""

    def __init__(self, crew: Path, url: str, processes: int, **env: str) -> None:
        environment = {k: v for k, v in os.environ.items()
                       if not k.startswith("TOREN_") and k != "DATABASE_URL"}
        environment |= {"DATABASE_URL": url, "TOREN_LOAD_PLUGINS": "", **env}
        self.proc = subprocess.Popen(
            [str(TOREN), "worker", "--dir", str(crew), "--processes", str(processes), "--json"],
            env=environment, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"toren worker --processes {processes} exited before ready")
        ready = json.loads(line)
        # one process: the worker is this process; more: its children (the supervisor's own
        # CPU, reading their pipes, is counted too)
        self.pids = [self.proc.pid, *(child["pid"] for child in ready.get("children", []))]

    def cpu_s(self) -> float:
        return sum(process_cpu_s(pid) for pid in self.pids)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


async def throughput_sample(server_url: str, work: Path, processes: int,
                            args: argparse.Namespace) -> dict[str, Any]:
    db = BenchDatabase(server_url, f"proc{processes}")
    try:
        crew = bench_crew(work / f"t{processes}-{time.monotonic_ns()}", args.steps)
        # the workers migrate the fresh database as they start, before the window
        workers = Supervised(crew, db.url, processes,
                             TOREN_CONCURRENCY=str(args.concurrency))
        try:
            with ConnectionSampler(db) as sampler:
                cpu0 = workers.cpu_s()
                await create_runs(db.url, crew, args.runs, callers=CALLERS)
                await wait_terminal(db, args.runs)
                backend_cpu = sampler.backend_cpu_s()
                cpu = workers.cpu_s() - cpu0
        finally:
            workers.stop()
        span = window(db)
        ops = span["operations"]
        connections = max(1, sampler.peak_busy)
        with psycopg.connect(db.url, autocommit=True) as conn:
            conn.execute(DDL)
        raw = measure(db.url, connections, args.raw_seconds, "on")
        ops_per_s = ops / span["seconds"]
        return {"processes": processes, "operations": ops,
                "seconds": round(span["seconds"], 3),
                "operations_per_s": round(ops_per_s, 1),
                "connections_peak_busy": sampler.peak_busy,
                "connections_peak_open": sampler.peak_open,
                "raw_commits_per_s": raw["commits_per_s"],
                "ratio_to_raw": round(ops_per_s / raw["commits_per_s"], 3),
                # run creation in this process is not in it (figure 1 counts it)
                "worker_cpu_ms_per_operation": round(1000 * cpu / ops, 3),
                "pg_backend_cpu_ms_per_operation": (
                    None if backend_cpu is None else round(1000 * backend_cpu / ops, 3)),
                "not_completed": span["not_completed"]}
    finally:
        db.close()


async def latency_sample(server_url: str, work: Path, processes: int,
                         args: argparse.Namespace) -> dict[str, Any]:
    db = BenchDatabase(server_url, f"lat{processes}")
    try:
        crew = bench_crew(work / f"l{processes}-{time.monotonic_ns()}", 1)
        # every run created before the workers start: the creator (this process) is not
        # what bounds the model calls/s, and the window is the workers' alone
        await create_runs(db.url, crew, args.latency_runs, callers=CALLERS)
        workers = Supervised(crew, db.url, processes,
                             TOREN_CONCURRENCY=str(args.latency_concurrency),
                             TOREN_SCRIPTED_DELAY=str(args.delay))
        try:
            cpu0 = workers.cpu_s()
            await wait_terminal(db, args.latency_runs)
            cpu = workers.cpu_s() - cpu0
        finally:
            workers.stop()
        with psycopg.connect(db.url) as conn:
            first, last, calls, failed = conn.execute(
                "SELECT min(created_at) FILTER (WHERE type = 'ModelCallStarted'), "
                "max(created_at) FILTER (WHERE type = 'ModelCallCompleted'), "
                "count(*) FILTER (WHERE type = 'ModelCallCompleted'), "
                "(SELECT count(*) FROM agent_bench.runs WHERE status <> 'completed') "
                "FROM agent_bench.events").fetchone()
        seconds = (last - first).total_seconds()
        ideal = processes * args.latency_concurrency / args.delay
        return {"processes": processes, "model_calls": calls,
                # first model call started to last one completed (figure 9's whole window)
                "seconds": round(seconds, 3),
                "model_calls_per_s": round(calls / seconds, 1),
                "ideal_model_calls_per_s": round(ideal, 1),
                "efficiency": round(calls / seconds / ideal, 3),
                "worker_cpu_ms_per_model_call": round(1000 * cpu / calls, 3),
                "not_completed": failed}
    finally:
        db.close()


def paired(samples: list[dict[str, Any]], field: str) -> dict[str, Any]:
    """Medians per side and the median of the per-pair ratios (2 processes over 1)."""
    one = [s[field] for s in samples if s["processes"] == 1]
    two = [s[field] for s in samples if s["processes"] == 2]
    ratios = [b / a for a, b in zip(one, two, strict=True) if a]
    return {"one_process": statistics.median(one), "two_processes": statistics.median(two),
            "ratio_two_to_one": round(statistics.median(ratios), 3) if ratios else None,
            "ratio_spread": [round(min(ratios), 3), round(max(ratios), 3)] if ratios else None}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    order = [p for pair in range(args.pairs) for p in ((1, 2) if pair % 2 == 0 else (2, 1))]
    out: dict[str, Any] = {"order": order}
    with tempfile.TemporaryDirectory(prefix="toren-processes-") as tmp:
        work = Path(tmp)
        throughput, latency = [], []
        for processes in order if "throughput" in args.figures else ():
            log(f"throughput, {processes} process(es)")
            throughput.append(await throughput_sample(args.server_url, work, processes, args))
        for processes in order if "model_latency" in args.figures else ():
            log(f"model latency, {processes} process(es)")
            latency.append(await latency_sample(args.server_url, work, processes, args))
    if latency:
        out["model_latency"] = {
            "delay_s": args.delay, "runs": args.latency_runs,
            "concurrency_per_process": args.latency_concurrency, "samples": latency,
            # the goal: 2 processes >= 1.6x one when the model latency dominates
            "model_calls_per_s": paired(latency, "model_calls_per_s"),
            "efficiency": paired(latency, "efficiency"),
        }
    if not throughput:
        return out
    two = [s for s in throughput if s["processes"] == 2]
    out["throughput"] = {
        "runs": args.runs, "steps_per_run": args.steps,
        "concurrency_per_process": args.concurrency, "samples": throughput,
        "operations_per_s": paired(throughput, "operations_per_s"),
        # the goal: >= 0.7x raw commits/s at the same total connection count
        "two_processes_ratio_to_raw": statistics.median(s["ratio_to_raw"] for s in two),
        "two_processes_raw_commits_per_s": statistics.median(s["raw_commits_per_s"]
                                                             for s in two),
        "one_process_ratio_to_raw": statistics.median(
            s["ratio_to_raw"] for s in throughput if s["processes"] == 1),
        "worker_cpu_ms_per_operation": paired(throughput, "worker_cpu_ms_per_operation"),
    }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server-url", default=os.environ.get("DATABASE_URL"),
                        help="a Postgres server whose role may create databases "
                             "(default: DATABASE_URL)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (< 30 s)")
    parser.add_argument("--pairs", type=int, default=2, help="ABAB pairs (1 and 2 processes)")
    parser.add_argument("--figures", type=lambda text: text.split(","),
                        default=["throughput", "model_latency"],
                        help="comma-separated: throughput, model_latency (default both)")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8,
                        help="TOREN_CONCURRENCY of each process (throughput)")
    parser.add_argument("--raw-seconds", type=float, default=3.0)
    parser.add_argument("--delay", type=float, default=0.5,
                        help="seconds per model call (model_latency)")
    parser.add_argument("--latency-runs", type=int, default=2000)
    parser.add_argument("--latency-concurrency", type=int, default=500)
    args = parser.parse_args()
    if not args.server_url:
        parser.error("--server-url (or DATABASE_URL) is required")
    if args.smoke:
        args.pairs, args.runs, args.steps, args.raw_seconds = 1, 40, 2, 1.0
        args.delay, args.latency_runs, args.latency_concurrency = 0.2, 100, 50
    result: dict[str, Any] = {"bench": "toren_processes", "smoke": args.smoke,
                              "load_average_at_start": os.getloadavg(),
                              "cpus": os.cpu_count()}
    started = time.monotonic()
    try:
        result |= asyncio.run(run(args))
        result["ok"] = True
    except Exception as exc:
        log(f"failed: {exc!r}")
        result |= {"ok": False, "error": repr(exc)[:500]}
    result["load_average_at_end"] = os.getloadavg()
    result["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
