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

import psycopg
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PEERS = BENCH / "peers"
PEERS_VENV = ROOT / ".venv-peers"
console = Console(stderr=True)

TOREN_FIGURES = ("throughput", "latency", "queue", "resume", "memory", "scaleout", "recovery",
                 "fanout")
#: Figures --smoke leaves out unless --only names them (they take more than a few seconds).
NOT_IN_SMOKE = ("fanout",)


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


def toren_queue_at(result: dict[str, Any], concurrency: int) -> float | None:
    for run in result.get("runs", []):
        if run.get("concurrency") == concurrency:
            return run.get("jobs_per_s")  # type: ignore[no-any-return]
    return None


def figures(reps: list[dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Headline figures: the median over repetitions, the peer, the ratio, the target."""

    def m(name: str, *path: str | int) -> float | None:
        return median([dig(rep.get(name, {}), *path) for rep in reps])

    def mq(name: str, picker: Any, concurrency: int) -> float | None:
        return median([picker(rep.get(name, {}), concurrency) for rep in reps])

    rows: list[dict[str, Any]] = []

    def add(figure: str, name: str, value: float | None, unit: str, *,
            peer: float | None = None, peer_name: str = "", target: str = "",
            ok: bool | None = None, ratio: float | None = None) -> None:
        if ratio is None and value is not None and peer:
            ratio = round(value / peer, 2)
        rows.append({"figure": figure, "name": name, "value": value, "unit": unit,
                     "peer": peer, "peer_name": peer_name, "ratio": ratio, "target": target,
                     "met": ok})

    ops = m("toren_throughput", "operations_per_s")
    dbos = m("dbos", "steps_per_s")
    raw1 = m("pg_raw", "commits_per_s_1conn")
    add("1 throughput", "durable operations/s (1 worker process)", ops, "ops/s", peer=dbos,
        peer_name="DBOS steps/s", target=">= 3x DBOS",
        ok=None if not (ops and dbos) else ops >= 3 * dbos)
    add("1 throughput", "durable operations/s vs raw commits/s (1 conn)", ops, "ops/s",
        peer=raw1, peer_name="raw INSERT+COMMIT/s", target=">= 0.5x raw",
        ok=None if not (ops and raw1) else ops >= 0.5 * raw1)
    add("1 throughput", "events/s", m("toren_throughput", "events_per_s"), "events/s")
    add("1 throughput", "Postgres transactions per operation",
        m("toren_throughput", "pg_xacts_per_operation"), "xacts",
        peer=m("dbos", "sequential", "pg_xacts_per_step_approx"),
        peer_name="DBOS xacts/step")
    op_p50 = m("toren_latency", "ms_per_operation_p50")
    raw_p50 = median([dig(rep.get("pg_raw", {}), "modes", 0, "latency_ms_p50") for rep in reps])
    add("2 per-step overhead", "ms per durable operation, p50", op_p50, "ms", peer=raw_p50,
        peer_name="raw commit p50 ms", target="<= 2x raw",
        ok=None if not (op_p50 and raw_p50) else op_p50 <= 2 * raw_p50)
    add("2 per-step overhead", "ms per durable operation, p99",
        m("toren_latency", "ms_per_operation_p99"), "ms",
        peer=median([dig(rep.get("pg_raw", {}), "modes", 0, "latency_ms_p99") for rep in reps]),
        peer_name="raw commit p99 ms")
    add("2 per-step overhead", "ms per step (model call + tool call), p50",
        m("toren_latency", "ms_per_step_p50"), "ms")
    for level in (1, 10):
        mine = mq("toren_queue", toren_queue_at, level)
        theirs = mq("procrastinate", procrastinate_at, level)
        add("3 queue", f"no-op jobs/s at concurrency {level}", mine, "jobs/s", peer=theirs,
            peer_name=f"procrastinate c={level}", target=">= 2x procrastinate",
            ok=None if not (mine and theirs) else mine >= 2 * theirs)
    p50 = m("toren_queue", "wakeup", "p50_ms")
    p99 = m("toren_queue", "wakeup", "p99_ms")
    add("3 queue", "wake-up latency p50 (idle worker)", p50, "ms", target="<= 5 ms",
        ok=None if p50 is None else p50 <= 5)
    add("3 queue", "wake-up latency p99 (idle worker)", p99, "ms", target="<= 50 ms",
        ok=None if p99 is None else p99 <= 50)
    lengths = sorted({int(k) for rep in reps
                      for k in dig(rep.get("toren_resume", {}), "lengths") or {}})
    for length in lengths:
        value = median([dig(rep.get("toren_resume", {}), "lengths", str(length)) for rep in reps])
        big = length >= 10000
        add("4 resume", f"load + fold + continue, {length} events", value, "ms",
            target="<= 100 ms" if big else "",
            ok=(value <= 100) if big and value is not None else None)
    idle = m("toren_memory", "idle_rss_mb")
    per = m("toren_memory", "added_mb_per_1000_runs")
    add("5 memory", "idle worker RSS", idle, "MB", target="<= 120 MB",
        ok=None if idle is None else idle <= 120)
    add("5 memory", "added RSS per 1,000 runs in flight", per, "MB", target="<= 50 MB",
        ok=None if per is None else per <= 50)
    for processes in ("1", "2", "4"):
        add("6 scale-out", f"durable operations/s, {processes} worker process(es)",
            m("toren_scaleout", "processes", processes, "operations_per_s"), "ops/s")
        add("6 scale-out", f"transactions per operation, {processes} process(es)",
            m("toren_scaleout", "processes", processes, "pg_xacts_per_operation"), "xacts")
    rec = m("toren_recovery", "recovery_s_median")
    add("7 crash recovery", "SIGKILL to progress on a new worker (default settings)", rec, "s",
        target="<= 10 s", ok=None if rec is None else rec <= 10)
    fast = m("toren_recovery_ttl2", "recovery_s_median")
    add("7 crash recovery", "same, TOREN_LEASE_TTL=2", fast, "s", target="configurable")
    viewers = m("toren_fanout", "streams")
    per_viewer = m("toren_fanout", "xacts_per_s_per_idle_viewer")
    add("8 stream fan-out", f"Postgres transactions/s per idle SSE viewer ({viewers or 0:g} "
        "viewers)", per_viewer, "xacts/s", target="<= 0.5",
        ok=None if per_viewer is None else per_viewer <= 0.5)
    add("8 stream fan-out", "message sent to viewer receiving it, p50",
        m("toren_fanout", "wakeup_ms_p50"), "ms")
    return rows


def render(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="Toren vs peers (median of repetitions)")
    for column in ("figure", "measure", "Toren", "peer", "ratio", "target", "met"):
        table.add_column(column)
    for row in rows:
        value = "n/a" if row["value"] is None else f"{row['value']:g} {row['unit']}"
        peer = "" if row["peer"] is None else f"{row['peer']:g} ({row['peer_name']})"
        met = {True: "[green]yes[/]", False: "[red]no[/]", None: ""}[row["met"]]
        table.add_row(row["figure"], row["name"], value, peer,
                      "" if row["ratio"] is None else f"{row['ratio']:g}x", row["target"], met)
    return table


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any],
             reps: list[dict[str, dict[str, Any]]]) -> str:
    lines = [
        "# Benchmark results",
        "",
        f"Generated by `bench/run.py` on {meta['date']}; every figure is the median of "
        f"{meta['repetitions']} repetition(s), Toren and the peers in one invocation against "
        "the same Postgres.",
        "",
        "## Machine and versions",
        "",
        *[f"- {key}: {value}" for key, value in meta["machine"].items()],
        "",
        "## Figures",
        "",
        "| figure | measure | Toren | peer | ratio | target | met |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        value = "n/a" if row["value"] is None else f"{row['value']:g} {row['unit']}"
        peer = "" if row["peer"] is None else f"{row['peer']:g} ({row['peer_name']})"
        ratio = "" if row["ratio"] is None else f"{row['ratio']:g}x"
        met = {True: "yes", False: "**no**", None: ""}[row["met"]]
        lines.append(f"| {row['figure']} | {row['name']} | {value} | {peer} | {ratio} | "
                     f"{row['target']} | {met} |")
    history = BENCH / "history.md"
    if history.exists():
        lines += ["", history.read_text().strip()]
    lines += ["", "## Raw results", "", "One JSON object per benchmark and repetition.", "",
              "```json"]
    for index, rep in enumerate(reps, 1):
        for name, result in rep.items():
            lines.append(json.dumps({"repetition": index, "name": name} | result))
    lines += ["```", ""]
    return "\n".join(lines)


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
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    reps_n = args.reps or (1 if args.smoke else 3)
    out = args.out or (BENCH / "out" / "RESULTS.smoke.md" if args.smoke
                       else BENCH / "RESULTS.md")
    if args.only is None:
        only = [f for f in TOREN_FIGURES if not (args.smoke and f in NOT_IN_SMOKE)]
    else:
        only = [f for f in args.only.split(",") if f]
    server_url, server, source = start_postgres()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOREN_")}
    env["DATABASE_URL"] = server_url
    peer_python = None if args.no_peers else peers_python()
    smoke = ["--smoke"] if args.smoke else []
    peer_commands: dict[str, list[str]] = {
        "pg_raw": [str(peer_python or sys.executable), str(PEERS / "bench_pg_raw.py"),
                   "--seconds", "1" if args.smoke else "5"],
    }
    if peer_python is not None:
        peer_commands["dbos"] = [str(peer_python), str(PEERS / "bench_dbos.py"),
                                 *(["-n", "20", "-k", "5"] if args.smoke else [])]
        peer_commands["procrastinate"] = [str(peer_python), str(PEERS / "bench_procrastinate.py"),
                                          *(["-m", "100"] if args.smoke else [])]
    reps: list[dict[str, dict[str, Any]]] = []
    failures = 0
    try:
        meta = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "repetitions": reps_n,
                "machine": {
                    "cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "toren": version("toren"),
                    "psycopg": version("psycopg"), "postgres": source,
                    **server_facts(server_url)}}
        for rep in range(1, reps_n + 1):
            results: dict[str, dict[str, Any]] = {}
            for name, command in peer_commands.items():
                log(f"repetition {rep}/{reps_n}: {name}")
                results[name] = run_json(command, env, timeout=1800)
            for figure in only:
                log(f"repetition {rep}/{reps_n}: toren {figure}")
                command = [sys.executable, str(BENCH / "toren_bench.py"), figure,
                           "--server-url", server_url, *smoke]
                results[f"toren_{figure}"] = run_json(command, env, timeout=1800)
                if figure == "recovery":
                    results["toren_recovery_ttl2"] = run_json(
                        [*command, "--lease-ttl", "2"], env, timeout=1800)
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
        rows = figures(reps)
        Console(width=max(160, Console().width)).print(render(rows))
        for row in rows:
            print(json.dumps({"figure": row["figure"], "measure": row["name"],
                              "value": row["value"], "unit": row["unit"], "peer": row["peer"],
                              "peer_name": row["peer_name"], "ratio": row["ratio"],
                              "target": row["target"], "met": row["met"]}), flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(markdown(rows, meta, reps))
        log(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    finally:
        if server is not None:
            server.cleanup()
            shutil.rmtree(Path(server.pgdata).parent, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
