#!/usr/bin/env python3
"""Toren's side of the benchmarks: one figure per invocation, one JSON line on stdout.

    python bench/toren_bench.py FIGURE --server-url URL [--smoke]

FIGURE is one of: throughput, latency, queue, resume, memory, inflight, growth, scaleout,
recovery, fanout, delivery.
Each invocation creates a fresh database on the server at URL (the role needs CREATEDB) and
drops it afterwards. Logs go to stderr. ``bench/run.py`` runs every figure beside the peers.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import cProfile
import dataclasses
import datetime
import itertools
import json
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from toren.config import Settings
from toren.core import events as ev
from toren.core.catalog import decode, decode_events
from toren.core.decisions import next_task_action
from toren.core.events import NewEvent
from toren.core.fold import TaskState, apply_task_event, checkpoint_due, fold_task
from toren.host.runtime import Runtime
from toren.seams.shapes import OutgoingMessage
from toren.testing import write_agent_dir

try:  # bench/ab.py runs this script on older kernels too
    from toren.host import event_loop
except ImportError:  # before issue 41: asyncio's loop only
    event_loop = None  # type: ignore[assignment]

TOREN = Path(sys.executable).parent / "toren"
TERMINAL = ("completed", "stopped", "failed", "cancelled")


def log(message: str) -> None:
    print(f"[toren_bench] {message}", file=sys.stderr, flush=True)


# -- database and crew -----------------------------------------------------------------------


class BenchDatabase:
    """A fresh database on the benchmark server, dropped on close."""

    def __init__(self, server_url: str, figure: str) -> None:
        self.server_url = server_url
        self.name = f"torenbench_{figure}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        self.url = make_conninfo(server_url, dbname=self.name)

    def xact_commits(self) -> int:
        """Committed transactions so far (stats are flushed about once a second: settle)."""
        time.sleep(1.2)
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute("SELECT xact_commit FROM pg_stat_database "
                               "WHERE datname = current_database()").fetchone()
        return int(row[0])

    def scalar(self, query: str | sql.Composable, params: Any = None) -> Any:
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(query, params).fetchone()
        return row[0] if row else None

    def close(self) -> None:
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(self.name)))


def bench_crew(root: Path, steps: int, name: str = "bench") -> Path:
    """A crew whose offline model makes ``steps`` steps, each one model call + one tool call,
    then answers: ``2 * steps + 1`` durable operations per run."""
    tools = "\n".join(
        f'def noop_{i:04d}(text: str) -> str:\n    """Does nothing."""\n    return "ok"\n'
        for i in range(steps))
    return write_agent_dir(root, name, tools_py=tools, limits={"maxSteps": steps + 5})


def settings(url: str, **overrides: Any) -> Settings:
    """Defaults, plus any ``TOREN_*`` variable ``run.py --toren-env`` passed, plus overrides."""
    return dataclasses.replace(Settings.from_env(os.environ), database_url=url,
                               load_plugins=(), **overrides)


async def wait_terminal(db: BenchDatabase, count: int, timeout_s: float = 600) -> int:
    """Poll (4 times a second) until ``count`` runs are terminal; return the polls made."""
    polls = 0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        polls += 1
        done = await asyncio.to_thread(
            db.scalar, "SELECT count(*) FROM agent_bench.runs WHERE status = ANY(%s)",
            [list(TERMINAL)])
        if done >= count:
            return polls
        await asyncio.sleep(0.25)
    raise TimeoutError(f"runs did not finish within {timeout_s}s")


def window(db: BenchDatabase, since: Any = None, agent: str = "bench") -> dict[str, Any]:
    """From the first run's creation to the last RunFinished, by the database clock (the
    window includes creating the runs, as DBOS's includes starting its workflows); and
    event counts. ``since``: only runs and events from then on (a preloaded history is not
    counted)."""
    since = since or datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    runs, events = (sql.Identifier(f"agent_{agent}", table) for table in ("runs", "events"))
    with psycopg.connect(db.url) as conn:
        first, last, count, completed = conn.execute(sql.SQL(
            "SELECT (SELECT min(created_at) FROM {runs} WHERE created_at >= %(s)s), "
            "max(created_at) FILTER (WHERE type = 'RunFinished'), count(*), "
            "count(*) FILTER (WHERE type IN ('ModelCallCompleted', 'ToolCallCompleted')) "
            "FROM {events} WHERE created_at >= %(s)s").format(runs=runs, events=events),
            {"s": since}).fetchone()
        failed = conn.execute(sql.SQL("SELECT count(*) FROM {runs} "
                                      "WHERE status <> 'completed' AND created_at >= %s"
                                      ).format(runs=runs), [since]).fetchone()[0]
    return {"seconds": (last - first).total_seconds(), "events": count,
            "operations": completed, "not_completed": failed}


class ConnectionSampler:
    """Samples the database's connections every 20 ms in a thread: the most open at once and
    the most busy at once (running a statement or inside a transaction). Its own samples are
    transactions too: ``samples`` says how many to subtract.

    It also keeps each client backend's CPU time when first seen (``/proc/<pid>/schedstat``:
    nanoseconds on a CPU, however busy the machine), so ``backend_cpu_s()`` says what Postgres
    spent serving the database's clients since: a load-proof figure of the server's side,
    beside the worker's CPU. ``None`` when the server's processes cannot be read (a server on
    another machine). Its own backend is not counted, nor those in ``exclude``."""

    def __init__(self, db: BenchDatabase, exclude: frozenset[int] = frozenset()) -> None:
        self.db = db
        self.peak_open = self.peak_busy = self.samples = self.busy_total = 0
        self._exclude = exclude
        self._first_cpu: dict[int, int | None] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def backend_cpu_s(self) -> float | None:
        """CPU seconds the client backends seen so far spent since each was first seen. Call
        it before the worker closes its pool: a backend that has exited is not counted (the
        harness's own short connections, which each poll opens, are not wanted anyway)."""
        found = [(first, backend_cpu_ns(pid)) for pid, first in list(self._first_cpu.items())
                 if first is not None]
        alive = [now - first for first, now in found if now is not None]
        return sum(alive) / 1e9 if alive else None

    def _run(self) -> None:
        with psycopg.connect(self.db.url, autocommit=True) as conn:
            while not self._stop.is_set():
                opened, busy, pids = conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE state <> 'idle'), "
                    "coalesce(array_agg(pid), '{}') "
                    "FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                ).fetchone()
                self.samples += 1
                self.busy_total += busy
                self.peak_open, self.peak_busy = max(self.peak_open, opened), max(
                    self.peak_busy, busy)
                for pid in pids:
                    if pid not in self._first_cpu and pid not in self._exclude:
                        self._first_cpu[pid] = backend_cpu_ns(pid)
                self._stop.wait(0.02)


def backend_cpu_ns(pid: int) -> int | None:
    """Nanoseconds a process (a Postgres backend on this machine) has run on a CPU."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def backends_cpu_ns(db: BenchDatabase) -> dict[int, int]:
    """Each client backend of the database (but the one asking) and its CPU so far: two of
    these, before and after, give the backends' CPU between them without a sampling thread
    beside a timed figure (a backend that connected in between counts from its start)."""
    with psycopg.connect(db.url, autocommit=True) as conn:
        pids = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'").fetchall()
    found = {pid: backend_cpu_ns(pid) for (pid,) in pids}
    return {pid: ns for pid, ns in found.items() if ns is not None}


def backends_cpu_since(db: BenchDatabase, before: dict[int, int]) -> float | None:
    """Seconds of CPU the database's client backends alive now spent since ``before``
    (``backends_cpu_ns``); ``None`` when none could be read (a server on another machine)."""
    now = backends_cpu_ns(db)
    return sum(ns - before.get(pid, 0) for pid, ns in now.items()) / 1e9 if now else None


# -- 1. durable step throughput ------------------------------------------------------------


async def throughput(db: BenchDatabase, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """``runs`` runs of ``steps`` agent steps (2 * steps + 1 durable operations each), created
    inside the window by ``concurrency`` concurrent callers while one worker process with
    ``concurrency`` pollers works them: the shape of DBOS's concurrent phase."""
    n, k, w = (args.throughput_runs or args.runs, args.throughput_steps or args.steps,
               args.concurrency)
    crew = bench_crew(work, k)
    await create_runs(db.url, crew, 0)  # migrate, outside the window
    x0 = db.xact_commits()
    worker = Runtime([crew], settings=settings(db.url, concurrency=w))
    with ConnectionSampler(db) as sampler:
        cpu0 = time.process_time()
        await worker.start(workers=True)
        pending = iter(range(n))

        async def creator() -> None:
            for _ in pending:
                await worker.start_run("bench", "go")

        await asyncio.gather(*(creator() for _ in range(w)))
        polls = await wait_terminal(db, n)
        backend_cpu = sampler.backend_cpu_s()
        await worker.stop()
        cpu = time.process_time() - cpu0
    x1 = db.xact_commits()
    span = window(db)
    ops = span["operations"]
    xacts = x1 - x0 - polls - sampler.samples - 1  # minus our polls, samples, counter read
    return {
        "runs": n, "steps_per_run": k, "operations_per_run": ops / n if n else 0,
        "concurrency": w, "worker_processes": 1,
        "seconds": round(span["seconds"], 3),
        "operations_per_s": round(ops / span["seconds"], 1),
        "steps_per_s": round(n * k / span["seconds"], 1),
        "runs_per_s": round(n / span["seconds"], 1),
        "events_per_s": round(span["events"] / span["seconds"], 1),
        "pg_xacts_per_operation": round(xacts / ops, 3),
        "pg_xacts_per_step": round(xacts / (n * k), 3),
        "pg_xacts_per_run": round(xacts / n, 2),
        "connections_peak_open": sampler.peak_open,
        "connections_peak_busy": sampler.peak_busy,
        # the process's CPU (creating the runs and working them; the sampler thread's share
        # is small): what a durable operation costs the worker, however loaded the machine
        "cpu_ms_per_operation": round(1000 * cpu / ops, 3),
        # Postgres's side of the same work: its backends' CPU (None: not on this machine)
        "pg_backend_cpu_ms_per_operation": (None if backend_cpu is None
                                            else round(1000 * backend_cpu / ops, 3)),
        "group_commit": worker.settings.group_commit,
        "not_completed": span["not_completed"],
    }


# -- 2. per-step overhead ------------------------------------------------------------------


async def latency(db: BenchDatabase, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    k = args.latency_steps
    crew = bench_crew(work, k)
    runtime = Runtime([crew], settings=settings(db.url, concurrency=1))
    await runtime.start(workers=True)
    stamps: list[float] = []
    worker = runtime.workers.worker  # type: ignore[union-attr]
    worker.observers.append(lambda *_: stamps.append(time.perf_counter()))
    backends0 = await asyncio.to_thread(backends_cpu_ns, db)
    cpu0 = time.process_time()
    run_id = await runtime.start_run("bench", "go")
    await runtime.wait_for_run(run_id, poll_s=0.25)
    cpu = time.process_time() - cpu0
    backend_cpu = await asyncio.to_thread(backends_cpu_since, db, backends0)
    measured = len(stamps)
    # A count, not a time: the Python function calls (and C functions called from Python) of
    # one more run, profiled once the worker is warm. On a shared machine the CPU a change
    # saves can be smaller than the noise between two runs; this count does not move with
    # the machine's load (within 1.5% between runs of the same code): compare it across
    # commits.
    profile = cProfile.Profile()
    profile.enable()
    try:
        counted = await runtime.start_run("bench", "go")
        await runtime.wait_for_run(counted, poll_s=0.25)
    finally:
        profile.disable()
    await runtime.stop()
    calls = pstats.Stats(profile).total_calls
    if args.profile_out:  # for pstats: where the calls go (sort by ncalls or tottime)
        profile.dump_stats(args.profile_out)
    stamps = stamps[:measured]
    # appends: start, then one per operation (2 per step), then finish and the run tick;
    # the gaps between consecutive operation appends are the per-operation cost
    gaps = [1000 * (b - a) for a, b in itertools.pairwise(stamps[1:-1])]
    steps = [gaps[i] + gaps[i + 1] for i in range(0, len(gaps) - 1, 2)]
    return {
        "steps": k,
        "ms_per_operation_p50": round(statistics.median(gaps), 3),
        "ms_per_operation_p99": round(percentile(gaps, 0.99), 3),
        "ms_per_step_p50": round(statistics.median(steps), 3),
        "ms_per_step_p99": round(percentile(steps, 0.99), 3),
        # client CPU per operation (the worker's own share of the gap, whatever the load)
        "cpu_ms_per_operation": round(1000 * cpu / max(1, len(stamps) - 2), 3),
        "pg_backend_cpu_ms_per_operation": (None if backend_cpu is None else round(
            1000 * backend_cpu / max(1, len(stamps) - 2), 3)),
        "python_calls_per_operation": round(calls / max(1, measured), 1),
    }


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


# -- 3. queue: throughput and wake-up latency ------------------------------------------------


async def queue(db: BenchDatabase, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """No-op messages through the real worker path, as procrastinate's worker takes them:
    ``jobs`` messages enqueued one by one, then a worker started, left to claim (up to
    TOREN_CONCURRENCY messages per claim statement), dispatch each to its handler and
    acknowledge it, and stopped once the queue is empty; the window runs from the start to
    the stop. The handler is the worker's own for a message kind it does not run (it
    acknowledges it): the no-op job."""
    import logging

    logging.getLogger("toren.host.worker").setLevel(logging.CRITICAL)  # one line per no-op
    crew = bench_crew(work, 1)
    enqueuer = Runtime([crew], settings=settings(db.url, pool_size=12))
    await enqueuer.start(workers=False)
    q = enqueuer.queue
    assert q is not None
    results: dict[str, Any] = {"jobs": args.jobs, "runs": [], "path": "worker"}
    for level in (1, 10):
        started = time.perf_counter()
        for i in range(args.jobs):
            await q.enqueue("bench", None, OutgoingMessage("noop", {"i": i}))
        defer_s = time.perf_counter() - started
        x0 = await asyncio.to_thread(db.xact_commits)
        started = time.perf_counter()
        polls = 0
        async with await psycopg.AsyncConnection.connect(db.url, autocommit=True) as watch:
            with ConnectionSampler(db, exclude=frozenset([watch.info.backend_pid])) as sampler:
                worker = Runtime([crew], settings=settings(db.url, concurrency=level))
                await worker.start(workers=True)
                while True:  # as procrastinate's wait=False worker: stop once it is drained
                    polls += 1
                    cursor = await watch.execute("SELECT EXISTS (SELECT 1 FROM "
                                                 "toren_control.queue WHERE kind = 'noop')")
                    if not (await cursor.fetchone() or (False,))[0]:
                        break
                    await asyncio.sleep(0.005)
                backend_cpu = sampler.backend_cpu_s()
                await worker.stop()
        drain_s = time.perf_counter() - started
        polls += sampler.samples
        x1 = await asyncio.to_thread(db.xact_commits) - polls - 1
        results["runs"].append({"concurrency": level, "defer_per_s": round(args.jobs / defer_s, 1),
                                "jobs_per_s": round(args.jobs / drain_s, 1),
                                "completed": args.jobs,
                                "pg_xacts_per_job_approx": round((x1 - x0) / args.jobs, 2),
                                # the server's side: its backends' CPU (None: not local)
                                "pg_backend_cpu_ms_per_job": (
                                    None if backend_cpu is None
                                    else round(1000 * backend_cpu / args.jobs, 3))})
    results["wakeup"] = await wakeup_latency(db, enqueuer, args.wakeups)
    await enqueuer.stop()
    best = max(results["runs"], key=lambda r: r["jobs_per_s"])
    results["jobs_per_s"] = best["jobs_per_s"]
    return results


async def wakeup_latency(db: BenchDatabase, runtime: Runtime, samples: int) -> dict[str, Any]:
    """An idle consumer (LISTEN) and a producer thread: enqueue-commit to claim, in ms."""
    q = runtime.queue
    assert q is not None
    sent: dict[int, float] = {}
    latencies: list[float] = []

    def produce() -> None:
        with psycopg.connect(db.url, autocommit=True) as conn:
            for i in range(samples):
                time.sleep(0.02)
                conn.execute("INSERT INTO toren_control.queue (agent, kind, payload) "
                             "VALUES ('bench', 'noop', %s)", [Jsonb({"i": i})])
                sent[i] = time.perf_counter()

    thread = threading.Thread(target=produce)
    thread.start()
    while len(latencies) < samples:
        claimed, _ = await q.claim(["bench"], "bench-idle", 10, 30, 100)
        now = time.perf_counter()
        for message in claimed:
            latencies.append(1000 * (now - sent.get(message.payload["i"], now)))
            await q.ack(message, "bench-idle")
        if not claimed:
            await q.wait(1.0)
    thread.join()
    return {"samples": samples, "p50_ms": round(statistics.median(latencies), 3),
            "p99_ms": round(percentile(latencies, 0.99), 3)}


# -- 4. resume cost vs log length ------------------------------------------------------------


def step_events(step: int, epoch: int) -> list[NewEvent]:
    call = {"id": f"c{step}", "name": "noop_0000", "arguments": {"text": "go"}}
    usage = {"input_tokens": 100, "output_tokens": 10, "cache_read_tokens": 0,
             "cache_write_tokens": 0}
    return [
        NewEvent(ev.MODEL_CALL_STARTED, {"step": step, "epoch": epoch}),
        NewEvent(ev.MODEL_CALL_COMPLETED, {
            "step": step, "epoch": epoch, "model": "toren/scripted", "text": "Calling noop.",
            "tool_calls": [call], "stop_reason": "tool_use", "usage": usage, "cost_usd": 0.0,
            "latency_ms": 0.1, "repeated": False}),
        NewEvent(ev.TOOL_CALL_STARTED, {
            "step": step, "call_id": call["id"], "name": call["name"],
            "arguments": call["arguments"], "idempotency_key": f"k{step}", "epoch": epoch}),
        NewEvent(ev.TOOL_CALL_COMPLETED, {
            "step": step, "call_id": call["id"], "name": call["name"], "output": "ok",
            "is_error": False, "error_kind": None, "truncated": False, "original_bytes": 2,
            "duration_ms": 0.1, "epoch": epoch}),
    ]


async def resume(db: BenchDatabase, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """With checkpoints (how Toren writes logs) and without (a full replay), for comparison."""
    with_checkpoints = await resume_curve(db, work, args.lengths, checkpoints=True)
    full_replay = await resume_curve(db, work, args.lengths, checkpoints=False)
    return with_checkpoints | {"full_replay": full_replay}


async def resume_curve(db: BenchDatabase, work: Path, lengths: list[int], *,
                       checkpoints: bool) -> dict[str, Any]:
    crew = bench_crew(work, 1)
    runtime = Runtime([crew], settings=settings(db.url))
    await runtime.start(workers=False)
    store = runtime.store
    agent = runtime.agents["bench"]
    model = runtime.model("toren/scripted")
    from toren.seams.model import ModelRequest

    out: dict[str, Any] = {"lengths": {}}
    for length in lengths:
        run_id = await runtime.start_run("bench", "go")
        lease = await store.acquire_lease(run_id, "task:main", "builder", 60)
        assert lease is not None
        started = NewEvent.of(ev.TaskStarted(
            task_id="main", subagent=None, model="toren/scripted", input="go", limits={},
            tools=("noop_0000",), prompt_sha256="0", epoch=lease.epoch))
        # written as a worker writes it: batches of events, a checkpoint whenever one is due
        built = TaskState()
        batch: list[NewEvent] = []

        def record(event: NewEvent, batch: list[NewEvent] = batch,
                   built: TaskState = built) -> None:
            batch.append(event)
            apply_task_event(built, decode(event.type, event.data))

        record(started)
        step = 0
        while built.next_seq <= length:
            step += 1
            for event in step_events(step, lease.epoch):
                record(event)
            if len(batch) >= 400 or built.next_seq > length:
                if checkpoints and checkpoint_due(built, Settings().checkpoint_every):
                    record(NewEvent.of(built.snapshot()))
                await store.append("bench", lease, built.next_seq - len(batch), batch, ttl_s=60)
                batch.clear()
        await store.release_lease(lease)
        timings: list[dict[str, float]] = []
        for attempt in range(5):
            t0 = time.perf_counter()
            found = await store.acquire_and_load("bench", run_id, "task:main",
                                                 f"resumer-{attempt}", 60)
            assert isinstance(found, tuple)
            lease, events = found
            t1 = time.perf_counter()
            state = fold_task(decode_events(events))
            action = next_task_action(state, agent.limits.__class__(max_steps=10**9), lease.epoch)
            t2 = time.perf_counter()
            request = ModelRequest(model="toren/scripted", system=agent.prompt,
                                   messages=tuple(state.messages),
                                   tools=tuple(t.spec for t in agent.tools.values()))
            response = await model.complete(request)
            await store.append("bench", lease, state.next_seq, [
                NewEvent(ev.MODEL_CALL_STARTED, {"step": action.step, "epoch": lease.epoch})],
                ttl_s=60)
            t3 = time.perf_counter()
            timings.append({"total": 1000 * (t3 - t0), "load": 1000 * (t1 - t0),
                            "fold": 1000 * (t2 - t1), "continue": 1000 * (t3 - t2)})
            await store.release_lease(lease)
            assert response.text is not None
        out.setdefault("breakdown_ms", {})[str(built.next_seq - 1)] = {
            part: round(statistics.median(t[part] for t in timings), 2)
            for part in ("load", "fold", "continue")}
        timings_total = [t["total"] for t in timings]
        out["lengths"][str(built.next_seq - 1)] = round(statistics.median(timings_total), 2)
    await runtime.stop()
    lengths = sorted(out["lengths"], key=int)
    out["ms_at_longest"] = out["lengths"][lengths[-1]]
    out["longest"] = int(lengths[-1])
    return out


# -- worker processes (memory, scale-out, recovery) -------------------------------------------


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main_thread_sched_s(pid: int) -> tuple[float, float]:
    """``(ran, waited)``: seconds the main thread (the event loop) of process ``pid`` ran on a
    CPU and waited for one while runnable (Linux schedstat; a loaded machine shows in
    ``waited``)."""
    ran, waited = Path(f"/proc/{pid}/schedstat").read_text().split()[:2]
    return int(ran) / 1e9, int(waited) / 1e9


class WorkerProcess:
    """``toren worker --json`` in a subprocess."""

    def __init__(self, crew: Path, url: str, **env: str) -> None:
        environment = {k: v for k, v in os.environ.items()
                       if not k.startswith("TOREN_") and k != "DATABASE_URL"}
        environment |= {"DATABASE_URL": url, "TOREN_LOAD_PLUGINS": "", **env}
        self.proc = subprocess.Popen([str(TOREN), "worker", "--dir", str(crew), "--json"],
                                     env=environment, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the worker exited before it was ready")
        self.ready_at = time.perf_counter()

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the worker process has used so far."""
        return process_cpu_s(self.proc.pid)

    def main_thread_sched_s(self) -> tuple[float, float]:
        return main_thread_sched_s(self.proc.pid)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(timeout=60)


async def create_runs(url: str, crew: Path, n: int, callers: int = 1) -> list[str]:
    creator = Runtime([crew], settings=settings(url))
    await creator.start(workers=False)
    ids: list[str] = []
    todo = iter(range(n))

    async def create() -> None:
        for _ in todo:
            ids.append(await creator.start_run("bench", "go"))

    await asyncio.gather(*(create() for _ in range(callers)))
    await creator.stop()
    return ids


async def memory(db: BenchDatabase, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    crew = bench_crew(work, 2)
    await create_runs(db.url, crew, 0)  # migrate
    idle = WorkerProcess(crew, db.url)
    await asyncio.sleep(3)
    idle_mb = idle.rss_mb()
    idle.stop()
    n = args.inflight
    busy = WorkerProcess(crew, db.url, TOREN_CONCURRENCY=str(n), TOREN_SCRIPTED_DELAY="600")
    before = busy.rss_mb()
    await create_runs(db.url, crew, n)
    await wait_started(db, n, timeout_s=300)
    await asyncio.sleep(2)
    during = busy.rss_mb()
    # what n waiting runs cost Postgres: transactions/s while every run waits in its model
    # call (the worker's heartbeat and guardian: O(workers), not O(runs)); after the stats
    # of the start have settled, over --idle-seconds
    await asyncio.sleep(STATS_SETTLE_S)
    x0 = await asyncio.to_thread(db.xact_commits)
    await asyncio.sleep(args.idle_seconds)
    x1 = await asyncio.to_thread(db.xact_commits)
    busy.stop(signal.SIGKILL)
    waiting_xacts_per_s = (x1 - x0 - 1) / (args.idle_seconds + 1.2)
    return {"idle_rss_mb": round(idle_mb, 1), "inflight_runs": n,
            "rss_before_mb": round(before, 1), "rss_inflight_mb": round(during, 1),
            "added_mb_per_1000_runs": round((during - before) * 1000 / n, 1),
            "waiting_xacts_per_s": round(waiting_xacts_per_s, 2),
            "waiting_xacts_per_s_per_run": round(waiting_xacts_per_s / n, 5)}


async def inflight(db: BenchDatabase, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Agent scale: N runs in flight on one ``toren worker`` process (TOREN_CONCURRENCY=N),
    each of ``3`` agent steps whose model call takes ``--model-latency`` seconds (the offline
    model with TOREN_SCRIPTED_DELAY). Two phases per N:

    - waiting: every run inside a model call that does not return (TOREN_SCRIPTED_DELAY=600):
      Postgres transactions per second per in-flight run over ``--idle-seconds``,
      connections open and busy (target: none busy), the worker's RSS;
    - working: the same N runs with the model latency: model calls completed per second from
      the first ``ModelCallStarted`` to the last ``ModelCallCompleted``, against the ideal
      N / latency (Little's law), as an efficiency; the same in the steady state, while all
      N runs were in flight (after the last run's first model call, before the first run
      finished: Little's law holds there, the ramp-up and the tail are left out); and,
      load-proof, the worker's CPU per model call and how much of the time its event loop
      ran or waited for a CPU."""
    crew = bench_crew(work, 3)
    await create_runs(db.url, crew, 0)  # migrate
    out: dict[str, Any] = {"model_latency_s": args.model_latency, "steps_per_run": 3,
                           "levels": {}}
    for n in args.inflight_levels:
        try:
            out["levels"][str(n)] = await inflight_level(db, args, crew, n)
        except Exception as exc:  # a level that failed does not lose the others
            log(f"inflight {n} failed: {exc!r}")
            out["levels"][str(n)] = {"error": repr(exc)[:300]}
    return out


def reset_tables(db: BenchDatabase) -> None:
    """Empty the agent's tables; first end any backend a killed worker left behind (it may
    still hold locks the TRUNCATE waits for)."""
    with psycopg.connect(db.url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        # CASCADE: the tables that refer to runs (tool manifests, archived runs) go too
        conn.execute("TRUNCATE agent_bench.runs, agent_bench.events, toren_control.queue, "
                     "toren_control.leases, toren_control.workers CASCADE")


async def inflight_level(db: BenchDatabase, args: argparse.Namespace, crew: Path,
                         n: int) -> dict[str, Any]:
    level: dict[str, Any] = {}
    reset_tables(db)
    # waiting
    busy = WorkerProcess(crew, db.url, TOREN_CONCURRENCY=str(n), TOREN_SCRIPTED_DELAY="600",
                         TOREN_POOL_SIZE="10")
    rss_idle = busy.rss_mb()
    await create_runs(db.url, crew, n, callers=8)
    await wait_started(db, n, timeout_s=1200)
    await asyncio.sleep(STATS_SETTLE_S)
    x0 = db.xact_commits()
    await asyncio.sleep(args.idle_seconds)
    x1 = db.xact_commits()
    # then the connections, apart (the sampler's own statements are transactions too)
    with ConnectionSampler(db) as sampler:
        await asyncio.sleep(args.idle_seconds / 2)
    level["waiting"] = {
        "xacts_per_s": round((x1 - x0 - 1) / (args.idle_seconds + 1.2), 2),
        "connections_peak_open": sampler.peak_open,
        "connections_peak_busy": sampler.peak_busy,
        "connections_busy_mean": round(sampler.busy_total / max(1, sampler.samples), 3),
        "rss_idle_mb": round(rss_idle, 1), "rss_mb": round(busy.rss_mb(), 1)}
    level["waiting"]["xacts_per_s_per_run"] = round(level["waiting"]["xacts_per_s"] / n, 5)
    busy.stop(signal.SIGKILL)
    reset_tables(db)
    # working
    await create_runs(db.url, crew, n, callers=8)
    worker = WorkerProcess(crew, db.url, TOREN_CONCURRENCY=str(n),
                           TOREN_SCRIPTED_DELAY=str(args.model_latency))
    rss_peak = 0.0
    cpu0, (ran0, waited0), started = worker.cpu_s(), worker.main_thread_sched_s(), time.monotonic()
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        rss_peak = max(rss_peak, worker.rss_mb())
        done = db.scalar("SELECT count(*) FROM agent_bench.runs WHERE status = ANY(%s)",
                         [list(TERMINAL)])
        if done >= n:
            break
        await asyncio.sleep(0.5)
    cpu, (ran, waited) = worker.cpu_s() - cpu0, worker.main_thread_sched_s()
    elapsed = time.monotonic() - started
    worker.stop()
    with psycopg.connect(db.url) as conn:
        first, last, calls = conn.execute(
            "SELECT min(created_at) FILTER (WHERE type = 'ModelCallStarted'), "
            "max(created_at) FILTER (WHERE type = 'ModelCallCompleted'), "
            "count(*) FILTER (WHERE type = 'ModelCallCompleted') "
            "FROM agent_bench.events").fetchone()
        steady = steady_state(conn)
        start_spread = started_within(conn)
    seconds = (last - first).total_seconds()
    ideal = n / args.model_latency
    level["working"] = {
        "model_calls": calls, "seconds": round(seconds, 2),
        "model_calls_per_s": round(calls / seconds, 1), "ideal_per_s": round(ideal, 1),
        "efficiency": round(calls / seconds / ideal, 3), "rss_peak_mb": round(rss_peak, 1),
        # load-proof: the worker's CPU per model call (each with its appends, reads and
        # publishes), and the share of the time its event loop ran or waited for a CPU
        "cpu_ms_per_model_call": round(cpu * 1000 / max(1, calls), 3),
        "loop_running_share": round((ran - ran0) / elapsed, 3),
        "loop_waiting_for_cpu_share": round((waited - waited0) / elapsed, 3),
        "load_average": round(os.getloadavg()[0], 2),
        # how long starting them all took: from the first run's first model call to the last
        # run's first (the runs were created before the worker started)
        "started_within_s": None if start_spread is None else round(start_spread, 2)}
    if steady is not None:
        level["working"] |= {
            "steady_seconds": round(steady["steady_seconds"], 2),
            "steady_model_calls": steady["steady_model_calls"],
            # the window's count, as figure 9 gave it before issue 41 (rounds: see steady_state)
            "steady_window_efficiency": round(
                steady["steady_model_calls"] / steady["steady_seconds"] / ideal, 3)}
        cycle = steady["steady_cycle_s"]
        if cycle:
            level["working"] |= {
                "steady_cycle_s": round(cycle, 3), "steady_cycles": steady["steady_cycles"],
                "steady_model_calls_per_s": round(n / cycle, 1),
                "steady_efficiency": round(args.model_latency / cycle, 3)}
    log(f"inflight {n}: {level}")
    return level


def steady_state(conn: psycopg.Connection[Any]) -> dict[str, float] | None:
    """The steady state, while every run was in flight (after the last run made its first
    model call, before the first run finished): ``None`` if there was no such moment.

    - ``steady_cycle_s``: the mean time from one of a run's model calls starting to its next
      (the model latency, the tool step and the appends between), over the pairs of calls
      wholly in that window. With N runs each in a loop of model calls, model calls/s is N /
      that (Little's law, per run), and the efficiency the latency / that.
    - ``steady_seconds`` and ``steady_model_calls``: the window and the model calls completed
      in it. Counted in a window, the calls of runs started together end in rounds, one cycle
      apart, so the count depends on where the window cuts the rounds: at 1,000 runs with 20 s
      calls (4 per run) and the starts spread over 5.9 s, the window held 3 rounds in 74 s
      (81% of the ideal) from a worker whose calls took 20.3 s to come round. The cycle has
      no edge."""
    all_in, first_done = conn.execute(
        "SELECT (SELECT max(started) FROM (SELECT min(created_at) AS started "
        "FROM agent_bench.events WHERE type = 'ModelCallStarted' GROUP BY run_id) AS firsts), "
        "(SELECT min(created_at) FROM agent_bench.events WHERE type = 'RunFinished')"
    ).fetchone()
    if all_in is None or first_done is None or first_done <= all_in:
        return None
    (calls,) = conn.execute(
        "SELECT count(*) FROM agent_bench.events WHERE type = 'ModelCallCompleted' "
        "AND created_at > %s AND created_at <= %s", [all_in, first_done]).fetchone()
    cycle, cycles = conn.execute(
        "SELECT avg(extract(epoch FROM created_at - previous)), count(*) FROM ("
        "SELECT created_at, lag(created_at) OVER (PARTITION BY run_id ORDER BY created_at) "
        "AS previous FROM agent_bench.events WHERE type = 'ModelCallStarted') AS calls "
        "WHERE previous >= %s AND created_at <= %s", [all_in, first_done]).fetchone()
    return {"steady_seconds": (first_done - all_in).total_seconds(),
            "steady_model_calls": int(calls),
            "steady_cycle_s": None if cycle is None else float(cycle),
            "steady_cycles": int(cycles)}


def started_within(conn: psycopg.Connection[Any]) -> float | None:
    """Seconds from the first run's first ``ModelCallStarted`` to the last run's first: the
    runs were all created (queued) before the worker started, so this is how long the worker
    took to start them all (claim, lease, first appends, into the model call)."""
    (spread,) = conn.execute(
        "SELECT extract(epoch FROM max(started) - min(started)) FROM (SELECT min(created_at) "
        "AS started FROM agent_bench.events WHERE type = 'ModelCallStarted' GROUP BY run_id) "
        "AS firsts").fetchone()
    return None if spread is None else float(spread)


async def wait_started(db: BenchDatabase, n: int, timeout_s: float) -> None:
    """Until ``n`` runs are inside their first model call."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        started = db.scalar("SELECT count(*) FROM agent_bench.events "
                            "WHERE type = 'ModelCallStarted'")
        if started >= n:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"{n} runs were not all in a model call within {timeout_s}s")


async def growth(db: BenchDatabase, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Cost growth: durable operations/s (``runs`` runs, as figure 1) and the latency of a
    one-message claim, with ``--size`` synthetic events in ``--size / 10`` finished runs
    already in an agent's tables (loaded server-side with generate_series), against a second
    agent of the same database whose tables are empty; and claim latency with ``--backlog``
    ready messages waiting in the queue, against an empty queue: the claiming agent's own
    messages, then another agent's (the claim must not read them).

    After the load, ``VACUUM (ANALYZE)`` and a ``CHECKPOINT``: tables that grew to this size
    over months have been vacuumed, and autovacuum working through 10,000,000 rows inserted a
    second ago is the load's cost, not the size's (the first sample after the load, before
    them, is reported as ``loaded_at_once``). Then ``--growth-pairs`` pairs of samples, empty
    and loaded, the order alternating; the ratio is the median of the pairs' ratios. One
    discarded warm-up sample first: the first in a process pays imports and cold caches."""
    agents = {"empty": "bench_empty", "loaded": "bench"}
    crews = {side: bench_crew(work, args.steps, agent) for side, agent in agents.items()}
    for crew in crews.values():
        await create_runs(db.url, crew, 0)  # migrate
    out: dict[str, Any] = {"size_events": args.size, "size_runs": args.size // 10,
                           "backlog": args.backlog}
    out["warm_up"] = await growth_sample(db, crews["empty"], args, agents["empty"])
    started = time.perf_counter()
    with psycopg.connect(db.url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO agent_bench.runs (id, status, input, output, stop_reason, created_at, "
            "updated_at, finished_at) SELECT gen_random_uuid(), 'completed', '\"go\"', "
            "'\"done\"', 'end_turn', t, t, t FROM generate_series(1, %s) AS g, "
            "LATERAL (SELECT now() - interval '30 days' + g * interval '1 ms' AS t) AS at",
            [args.size // 10])
        conn.execute(
            "INSERT INTO agent_bench.events (run_id, stream, seq, type, data, created_at) "
            "SELECT r.id, CASE WHEN s <= 2 THEN 'run' ELSE 'task:main' END, s, "
            "'ModelCallStarted', '{\"step\": 1, \"epoch\": 1}', r.created_at "
            "FROM agent_bench.runs r, generate_series(1, 10) AS s WHERE r.status = 'completed' "
            "AND r.created_at < now() - interval '1 day'")
        out["loaded_events"] = conn.execute(
            "SELECT count(*) FROM agent_bench.events").fetchone()[0]
    out["load_s"] = round(time.perf_counter() - started, 1)
    out["loaded_at_once"] = await growth_sample(db, crews["loaded"], args, agents["loaded"])
    with psycopg.connect(db.url, autocommit=True) as conn:
        settle = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) agent_bench.runs, agent_bench.events")
        conn.execute("CHECKPOINT")
        out["settle_s"] = round(time.perf_counter() - settle, 1)
    pairs: list[dict[str, Any]] = []
    for pair in range(args.growth_pairs):
        sides = ["empty", "loaded"] if pair % 2 == 0 else ["loaded", "empty"]
        pairs.append({side: await growth_sample(db, crews[side], args, agents[side])
                      for side in sides})
    out["pairs"] = pairs
    for side in ("empty", "loaded"):
        out[side] = {key: statistics.median(p[side][key] for p in pairs)
                     for key in ("operations_per_s", "claim_ms_p50", "claim_ms_p99")}
        out[side]["not_completed"] = sum(p[side]["not_completed"] for p in pairs)
    for name, key in (("ops", "operations_per_s"), ("claim", "claim_ms_p50")):
        ratios = [p["loaded"][key] / p["empty"][key] for p in pairs]
        out[f"{name}_ratio_loaded_to_empty"] = round(statistics.median(ratios), 3)
        out[f"{name}_ratio_spread"] = [round(min(ratios), 3), round(max(ratios), 3)]
    with psycopg.connect(db.url, autocommit=True) as conn:
        conn.execute("INSERT INTO toren_control.queue (agent, kind, payload) "
                     "SELECT 'bench', 'noop', '{}' FROM generate_series(1, %s)", [args.backlog])
        conn.execute("ANALYZE toren_control.queue")
    out["backlog_claim"] = await claim_latency(db, crews["loaded"], args.claims, enqueue=False)
    out["claim_ratio_backlog_to_empty"] = round(
        out["backlog_claim"]["claim_ms_p50"] / out["empty"]["claim_ms_p50"], 3)
    # the same backlog, as another agent's: a worker of bench_empty claims from a queue of its
    # own (--claims messages, younger than the backlog) while bench's wait (another fleet's
    # backlog, or an agent no worker serves any more)
    with psycopg.connect(db.url, autocommit=True) as conn:
        conn.execute("INSERT INTO toren_control.queue (agent, kind, payload) "
                     "SELECT %s, 'noop', '{}' FROM generate_series(1, %s)",
                     [agents["empty"], args.claims])
        conn.execute("ANALYZE toren_control.queue")
    out["foreign_backlog_claim"] = await claim_latency(db, crews["empty"], args.claims,
                                                       enqueue=False, agent=agents["empty"])
    out["claim_ratio_foreign_backlog_to_empty"] = round(
        out["foreign_backlog_claim"]["claim_ms_p50"] / out["empty"]["claim_ms_p50"], 3)
    return out


async def growth_sample(db: BenchDatabase, crew: Path, args: argparse.Namespace, agent: str
                        ) -> dict[str, Any]:
    since = db.scalar("SELECT now()")
    worker = Runtime([crew], settings=settings(db.url, concurrency=args.concurrency))
    await worker.start(workers=True)
    pending = iter(range(args.runs))

    async def creator() -> None:
        for _ in pending:
            await worker.start_run(agent, "go")

    await asyncio.gather(*(creator() for _ in range(args.concurrency)))
    deadline = time.monotonic() + 600
    finished = sql.SQL("SELECT count(*) FROM {} WHERE created_at >= %s AND status = ANY(%s)"
                       ).format(sql.Identifier(f"agent_{agent}", "runs"))
    while time.monotonic() < deadline:
        done = await asyncio.to_thread(db.scalar, finished, [since, list(TERMINAL)])
        if done >= args.runs:
            break
        await asyncio.sleep(0.25)
    await worker.stop()
    span = window(db, since, agent)
    return {"operations_per_s": round(span["operations"] / span["seconds"], 1),
            "not_completed": span["not_completed"]} | await claim_latency(
        db, crew, args.claims, enqueue=True, agent=agent)


async def claim_latency(db: BenchDatabase, crew: Path, samples: int, *, enqueue: bool,
                        agent: str = "bench") -> dict[str, Any]:
    """The worker's claim statement for one message, ``samples`` times (each acknowledged)."""
    runtime = Runtime([crew], settings=settings(db.url))
    await runtime.start(workers=False)
    q = runtime.queue
    assert q is not None
    timings = []
    for i in range(samples):
        if enqueue:
            await q.enqueue(agent, None, OutgoingMessage("noop", {"i": i}))
        t0 = time.perf_counter()
        claimed, _ = await q.claim([agent], "bench-claimer", 1, 30, 100)
        timings.append(1000 * (time.perf_counter() - t0))
        for message in claimed:
            await q.ack(message, "bench-claimer")
    await runtime.stop()
    return {"claim_ms_p50": round(statistics.median(timings), 3),
            "claim_ms_p99": round(percentile(timings, 0.99), 3)}


async def scaleout(db: BenchDatabase, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    crew = bench_crew(work, args.steps)
    out: dict[str, Any] = {"runs": args.runs, "steps_per_run": args.steps, "processes": {}}
    await create_runs(db.url, crew, 0)  # migrate
    for processes in (1, 2, 4):
        with psycopg.connect(db.url, autocommit=True) as conn:
            conn.execute("TRUNCATE agent_bench.runs, agent_bench.events, toren_control.queue, "
                         "toren_control.leases CASCADE")
        await create_runs(db.url, crew, args.runs)
        x0 = db.xact_commits()
        workers = [WorkerProcess(crew, db.url, TOREN_CONCURRENCY=str(args.concurrency))
                   for _ in range(processes)]
        polls = await wait_terminal(db, args.runs)
        for worker in workers:
            worker.stop()
        x1 = db.xact_commits()
        span = window(db)
        out["processes"][str(processes)] = {
            "operations_per_s": round(span["operations"] / span["seconds"], 1),
            "pg_xacts_per_operation": round((x1 - x0 - polls - 2) / span["operations"], 3),
            "not_completed": span["not_completed"],
        }
    return out


async def recovery(db: BenchDatabase, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    crew = bench_crew(work, 40)
    await create_runs(db.url, crew, 0)
    samples = []
    extra = {} if args.lease_ttl is None else {"TOREN_LEASE_TTL": str(args.lease_ttl)}
    for _ in range(args.recoveries):
        first = WorkerProcess(crew, db.url, TOREN_SCRIPTED_DELAY="0.1", **extra)
        (run_id,) = await create_runs(db.url, crew, 1)

        def calls(run: str = run_id) -> int:
            return db.scalar("SELECT count(*) FROM agent_bench.events WHERE run_id = %s "
                             "AND type = 'ModelCallCompleted'", [run])

        while calls() < 3:
            await asyncio.sleep(0.05)
        first.proc.kill()
        killed_at = db.scalar("SELECT clock_timestamp()")
        first.proc.wait()
        second = WorkerProcess(crew, db.url, TOREN_SCRIPTED_DELAY="0.1", **extra)
        resumed = None
        while resumed is None:
            resumed = db.scalar(
                "SELECT min(created_at) FROM agent_bench.events WHERE run_id = %s "
                "AND stream = 'task:main' AND (data->>'epoch')::int > 1", [run_id])
            await asyncio.sleep(0.05)
        samples.append((resumed - killed_at).total_seconds())
        second.stop(signal.SIGKILL)
    return {"lease_ttl_s": args.lease_ttl or Settings().lease_ttl_s,
            "samples_s": [round(s, 3) for s in samples],
            "recovery_s_median": round(statistics.median(samples), 3),
            "recovery_s_max": round(max(samples), 3)}


# -- 8. event-stream fan-out ---------------------------------------------------------------


#: Seconds for statistics of finished work to reach pg_stat_database (idle backends flush
#: theirs within 10 s).
STATS_SETTLE_S = 11.0


class ServeProcess:
    """``toren serve --json`` (the API only, no workers, no keys on loopback) in a subprocess."""

    def __init__(self, crew: Path, url: str, **env: str) -> None:
        environment = {k: v for k, v in os.environ.items()
                       if not k.startswith("TOREN_") and k != "DATABASE_URL"}
        environment |= {"DATABASE_URL": url, "TOREN_LOAD_PLUGINS": "",
                        "TOREN_ALLOW_NO_KEYS": "1", **env}
        self.proc = subprocess.Popen([str(TOREN), "serve", "--dir", str(crew), "--port", "0",
                                      "--json"], env=environment, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("toren serve exited before it was ready")
        self.url = json.loads(line)["url"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


async def fanout(db: BenchDatabase, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """N idle SSE viewers, one per open session, on one API process: database transactions
    per second while nothing happens (beside the same process with no viewer), and how soon
    a viewer sees an event appended by another process."""
    import aiohttp

    crew = bench_crew(work, 1)
    n, seconds = args.streams, args.idle_seconds
    server = ServeProcess(crew, db.url, TOREN_MAX_STREAMS_PER_KEY=str(n + 10))
    try:
        async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30)) as http:
            sessions = []
            for _ in range(n):
                async with http.post(f"{server.url}/sessions", json={"agent": "bench"}) as r:
                    sessions.append((await r.json())["id"])
            # a backend gone idle may hold its statistics up to 10 s (Postgres 15+): let the
            # burst of creating the sessions land before the window starts
            await asyncio.sleep(STATS_SETTLE_S)
            x0 = await asyncio.to_thread(db.xact_commits)
            await asyncio.sleep(seconds)
            x1 = await asyncio.to_thread(db.xact_commits)
            # the harness's own read of the counter is one transaction
            baseline = (x1 - x0 - 1) / (seconds + 1.2)

            arrivals: dict[str, asyncio.Queue[tuple[str, float]]] = {
                sid: asyncio.Queue() for sid in sessions}

            async def view(session_id: str) -> None:
                async with http.get(f"{server.url}/runs/{session_id}/events",
                                    headers={"Accept": "text/event-stream"}) as response:
                    response.raise_for_status()
                    async for raw in response.content:
                        line = raw.decode()
                        if line.startswith("event: "):
                            arrivals[session_id].put_nowait(
                                (line[7:].strip(), time.perf_counter()))

            viewers = [asyncio.create_task(view(sid)) for sid in sessions]
            for sid in sessions:  # attached: each has seen its session's first event
                await asyncio.wait_for(arrivals[sid].get(), 120)
            await asyncio.sleep(STATS_SETTLE_S)  # and the viewers' first reads
            x2 = await asyncio.to_thread(db.xact_commits)
            await asyncio.sleep(seconds)
            x3 = await asyncio.to_thread(db.xact_commits)
            idle = (x3 - x2 - 1) / (seconds + 1.2)

            # wake-up: from sending a message over the API to the viewer receiving it
            latencies = []
            for sid in sessions[:args.wakeups]:
                while not arrivals[sid].empty():  # the session's other first events
                    arrivals[sid].get_nowait()
                started = time.perf_counter()
                # no worker serves it: the session just stays running, its stream open
                async with http.post(f"{server.url}/sessions/{sid}/messages",
                                     json={"text": "hello"}) as r:
                    if r.status != 202:
                        raise RuntimeError(f"sending a message answered {r.status}")
                kind, at = await asyncio.wait_for(arrivals[sid].get(), 60)
                if kind != "UserMessage":
                    raise RuntimeError(f"the viewer saw {kind}, not the message")
                latencies.append((at - started) * 1000)
            for viewer in viewers:
                viewer.cancel()
            await asyncio.gather(*viewers, return_exceptions=True)
    finally:
        server.stop()
    per_stream = (idle - baseline) / n
    return {"streams": n, "idle_window_s": seconds,
            "xacts_per_s_no_viewers": round(baseline, 1),
            "xacts_per_s_idle_viewers": round(idle, 1),
            "xacts_per_s_per_idle_viewer": round(per_stream, 3),
            "xacts_per_s_projected_1000_viewers": round(per_stream * 1000, 1),
            "wakeup_ms_p50": round(percentile(latencies, 0.5), 1) if latencies else None,
            "wakeup_ms_max": round(max(latencies), 1) if latencies else None}


class RawSubscriber(asyncio.Protocol):
    """One SSE subscriber as a bare asyncio protocol: it sends the request and keeps each
    piece of the response with the time it arrived, nothing else, so that 1,000 of them in
    this process cost the 2 cores little beside the server they measure (an aiohttp client
    per stream costs a task wake-up per chunk, about what the server spends writing it).
    Parsed after the run (``arrivals``)."""

    def __init__(self, request: bytes, attached: asyncio.Semaphore) -> None:
        self.request = request
        self.attached = attached
        self.pieces: list[tuple[float, bytes]] = []
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self._headers = False
        self._tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio's TCP transport, or uvloop's (not a subclass of asyncio.Transport: the
        # harness runs on uvloop where toren's event_loop picks it)
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.pieces.append((time.time(), data))
        seen = self._tail + data
        if not self._headers and b"\r\n\r\n" in b"".join(p for _, p in self.pieces):
            self._headers = True
            self.attached.release()
        if b"\nevent: end\n" in seen:
            assert self.transport is not None
            self.transport.close()
        self._tail = seen[-32:]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ended.done():
            self.ended.set_result(None)

    def arrivals(self) -> list[tuple[str, int, float, float]]:
        """``(stream, seq, created_at, arrived)`` per event, in the order received,
        ``arrived`` the time the piece that completed its frame arrived (``text_delta`` and
        ``end`` frames skipped)."""
        raw = b"".join(piece for _, piece in self.pieces)
        ends = list(itertools.accumulate(len(piece) for _, piece in self.pieces))
        head, _, _ = raw.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"the event stream answered {head[:40]!r}")
        # the body is chunked: one HTTP chunk per write of the server
        body, done_at, position = bytearray(), [], len(head) + 4
        while True:
            line_end = raw.find(b"\r\n", position)
            if line_end < 0:
                break
            size = int(raw[position:line_end].split(b";")[0], 16)
            start = line_end + 2
            if size == 0 or start + size > len(raw):
                break
            body += raw[start:start + size]
            done_at.append((len(body), start + size - 1))
            position = start + size + 2
        events, offset, body_ends = [], 0, [body_end for body_end, _ in done_at]
        for frame in bytes(body).split(b"\n\n")[:-1]:
            offset += len(frame) + 2
            # the raw byte that completed the frame, and the piece it came in
            body_end, raw_at = done_at[bisect.bisect_left(body_ends, offset)]
            last = raw_at - (body_end - offset)
            arrived = self.pieces[bisect.bisect_left(ends, last + 1)][0]
            fields = dict(line.split(": ", 1) for line in frame.decode().split("\n")
                          if ": " in line and not line.startswith(":"))
            if "data" not in fields or fields.get("event") in ("text_delta", "end"):
                continue
            event = json.loads(fields["data"])
            created = datetime.datetime.fromisoformat(event["created_at"]).timestamp()
            events.append((event["stream"], event["seq"], created, arrived))
        return events

    def count(self, needle: bytes) -> int:
        return b"".join(piece for _, piece in self.pieces).count(needle)


async def delivery(db: BenchDatabase, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Live fan-out: ``--subscribers`` SSE subscribers on one API process, spread over
    ``--watched-runs`` runs that one ``toren worker`` process works while they watch (each
    run ``--steps`` agent steps, the model taking ``--model-latency`` seconds). For every
    event a subscriber receives: the time from its append (the event's ``created_at``, the
    database clock of the same machine) to its arrival; then every subscriber's events are
    checked against the log (none missing, none twice, in order). The API process's RSS is
    sampled while it serves."""
    runs, n = max(1, min(args.watched_runs, args.subscribers)), args.subscribers
    crew = bench_crew(work, args.steps)
    await create_runs(db.url, crew, 0)  # migrate
    server = ServeProcess(crew, db.url, TOREN_MAX_STREAMS_PER_KEY=str(n + 10))
    worker = None
    try:
        ids = await create_runs(db.url, crew, runs)
        attached = asyncio.Semaphore(0)

        host, port = server.url.removeprefix("http://").rsplit(":", 1)

        async def subscribe(index: int) -> RawSubscriber:
            # each piece is kept with the time it arrived and parsed after every stream
            # ended: parsing 1,000 streams as they arrive, on the same 2 cores, made this
            # process's parsing part of the figure (half of its p50 at 1,000 subscribers)
            request = (f"GET /runs/{ids[index % runs]}/events HTTP/1.1\r\nHost: {host}\r\n"
                       "Accept: text/event-stream\r\n\r\n").encode()
            loop = asyncio.get_running_loop()
            _, subscriber = await loop.create_connection(
                lambda: RawSubscriber(request, attached), host, int(port))
            await subscriber.ended
            return subscriber

        rss: list[float] = []
        # the same notices the API process listens to, heard by a thread of this process on
        # its own connection: they split each delivery into append to notice (the commit
        # and Postgres) and notice to delivery (the API process and this one's reading)
        heard: dict[str, list[float]] = {}
        listening = threading.Event()
        stop_listening = threading.Event()

        def listen() -> None:
            with psycopg.connect(db.url, autocommit=True) as conn:
                conn.execute("LISTEN toren_appends")
                listening.set()
                while not stop_listening.is_set():
                    for notice in conn.notifies(timeout=0.2):
                        heard.setdefault(notice.payload, []).append(time.time())

        listener = threading.Thread(target=listen, name="bench-notices", daemon=True)
        listener.start()
        listening.wait(30)

        status = Path(f"/proc/{server.proc.pid}/status")

        async def sample_rss() -> None:
            while True:
                text = await asyncio.to_thread(status.read_text)
                rss.extend(int(line.split()[1]) / 1024 for line in text.splitlines()
                           if line.startswith("VmRSS:"))
                await asyncio.sleep(0.5)

        sampler = asyncio.create_task(sample_rss())
        await asyncio.sleep(0.6)
        rss_before = rss[-1]
        viewers = [asyncio.create_task(subscribe(i)) for i in range(n)]
        for _ in range(n):
            await asyncio.wait_for(attached.acquire(), 300)
        started, live_from = time.perf_counter(), time.time()
        cpu_from, (ran_from, waited_from) = (process_cpu_s(server.proc.pid),
                                             main_thread_sched_s(server.proc.pid))
        worker = WorkerProcess(crew, db.url, TOREN_CONCURRENCY=str(runs),
                               TOREN_SCRIPTED_DELAY=str(args.model_latency))
        subscribers = await asyncio.wait_for(asyncio.gather(*viewers), 900)
        elapsed = time.perf_counter() - started
        server_cpu_s = process_cpu_s(server.proc.pid) - cpu_from
        ran, waited = main_thread_sched_s(server.proc.pid)
        sampler.cancel()
        stop_listening.set()
        listener.join(5)
        received = [subscriber.arrivals() for subscriber in subscribers]
        with psycopg.connect(db.url) as conn:
            logged: dict[str, dict[str, list[int]]] = {}
            for run_id, stream, seq in conn.execute(
                    "SELECT run_id::text, stream, seq FROM agent_bench.events "
                    "ORDER BY run_id, stream, seq"):
                logged.setdefault(run_id, {}).setdefault(stream, []).append(seq)
    finally:
        if worker is not None:
            worker.stop()
        server.stop()
    # the runs' first events were read as history when the subscribers attached: not counted
    latencies = [(arrived - created) * 1000 for got in received
                 for _, _, created, arrived in got if created >= live_from]
    to_notice, notice_to_delivery = [], []
    for index, got in enumerate(received):
        times = heard.get(ids[index % runs], [])
        for _, _, created, arrived in got:
            # the first notice of the run after the append began announced it
            at = bisect.bisect_left(times, created)
            if created >= live_from and at < len(times):
                to_notice.append((times[at] - created) * 1000)
                notice_to_delivery.append((arrived - times[at]) * 1000)

    def by_stream(got: list[tuple[str, int, float, float]]) -> dict[str, list[int]]:
        streams: dict[str, list[int]] = {}
        for stream, seq, _, _ in got:  # in the order received: each stream's must be its log's
            streams.setdefault(stream, []).append(seq)
        return streams

    frames = len(latencies) + sum(subscriber.count(b"event: text_delta\n")
                                  for subscriber in subscribers)
    incomplete = sum(1 for index, got in enumerate(received)
                     if by_stream(got) != logged[ids[index % runs]])
    return {"subscribers": n, "runs": runs, "steps_per_run": args.steps,
            "model_latency_s": args.model_latency, "seconds": round(elapsed, 1),
            "deliveries": len(latencies),
            "append_to_delivery_ms_p50": round(percentile(latencies, 0.5), 1),
            "append_to_delivery_ms_p99": round(percentile(latencies, 0.99), 1),
            "append_to_delivery_ms_max": round(max(latencies), 1),
            "append_to_notice_ms_p50": round(percentile(to_notice, 0.5), 1),
            "append_to_notice_ms_p99": round(percentile(to_notice, 0.99), 1),
            "notice_to_delivery_ms_p50": round(percentile(notice_to_delivery, 0.5), 1),
            "notice_to_delivery_ms_p99": round(percentile(notice_to_delivery, 0.99), 1),
            "subscribers_missing_or_misordered": incomplete,
            # the API process while the runs ran: its CPU per frame written to a subscriber
            # (events and pieces of text; load-proof, unlike the latencies), and how much of
            # the time its event loop ran, and waited for a CPU while it had work
            "server_cpu_s": round(server_cpu_s, 2),
            "server_cpu_us_per_frame": round(1e6 * server_cpu_s / max(1, frames), 1),
            "server_loop_running_share": round((ran - ran_from) / elapsed, 3),
            "server_loop_waiting_for_cpu_share": round((waited - waited_from) / elapsed, 3),
            "text_frames_per_subscriber": round(statistics.mean(
                subscriber.count(b"event: text_delta\n") for subscriber in subscribers), 1),
            "reads_per_subscriber": round(statistics.mean(
                len(subscriber.pieces) for subscriber in subscribers), 1),
            "server_rss_mb_before": round(rss_before or 0, 1),
            "server_rss_mb_peak": round(max(rss), 1)}


FIGURES: dict[str, Callable[..., Any]] = {
    "throughput": throughput, "latency": latency, "queue": queue, "resume": resume,
    "memory": memory, "inflight": inflight, "growth": growth, "scaleout": scaleout,
    "recovery": recovery,
    "fanout": fanout, "delivery": delivery,
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("figure", choices=sorted(FIGURES))
    parser.add_argument("--server-url", required=True)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks it runs")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=5,
                        help="agent steps per run (2 * steps + 1 durable operations)")
    parser.add_argument("--throughput-runs", type=int, default=None,
                        help="throughput: runs (default --runs)")
    parser.add_argument("--throughput-steps", type=int, default=None,
                        help="throughput: agent steps per run (default --steps)")
    parser.add_argument("--latency-steps", type=int, default=100)
    parser.add_argument("--profile-out", default=None,
                        help="latency: write the counted run's cProfile stats to this file")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--wakeups", type=int, default=200)
    parser.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")],
                        default=[100, 1000, 10000])
    parser.add_argument("--inflight", type=int, default=1000)
    parser.add_argument("--recoveries", type=int, default=3)
    parser.add_argument("--inflight-levels", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1000, 10000])
    parser.add_argument("--model-latency", type=float, default=2.0)
    parser.add_argument("--size", type=int, default=10_000_000,
                        help="growth: synthetic events preloaded (in size / 10 finished runs)")
    parser.add_argument("--growth-pairs", type=int, default=5,
                        help="growth: pairs of samples (empty, loaded), the order alternating")
    parser.add_argument("--backlog", type=int, default=100_000,
                        help="growth: ready messages waiting in the queue")
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--lease-ttl", type=float, default=None)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--subscribers", type=int, default=1000,
                        help="delivery: SSE subscribers, spread over --watched-runs runs")
    parser.add_argument("--watched-runs", type=int, default=50)
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.steps, args.jobs, args.wakeups = 10, 3, 300, 10
        # figure 1 at the full run's shape (11 durable operations per run), enough runs for
        # its ratio to DBOS and its transactions per operation to mean something (the
        # smoke's guards, bench/guards.py, read them)
        args.throughput_runs, args.throughput_steps = 60, 5
        args.latency_steps = 20
        args.lengths, args.inflight, args.recoveries = [100, 500], 100, 1
        args.streams, args.idle_seconds = 20, 3.0
        args.subscribers, args.watched_runs = 10, 2
        args.inflight_levels, args.model_latency = [20], 0.5
        # the guard's own backlog (100,000 ready messages: generate_series, about a second)
        args.size, args.backlog, args.claims, args.growth_pairs = 10_000, 100_000, 100, 3
    return args


def main() -> int:
    args = parse_args()
    db = BenchDatabase(args.server_url, args.figure)
    result: dict[str, Any] = {"bench": f"toren_{args.figure}", "figure": args.figure,
                              "smoke": args.smoke}
    try:
        with tempfile.TemporaryDirectory(prefix="toren-bench-") as work:
            # the loop `toren worker` runs on (TOREN_EVENT_LOOP, run.py --toren-env)
            main = FIGURES[args.figure](db, args, Path(work))
            result |= asyncio.run(main) if event_loop is None else event_loop.run(main)
            result["event_loop"] = ("asyncio" if event_loop is None
                                    else event_loop.chosen_event_loop())
        result["ok"] = True
    except Exception as exc:
        log(f"{args.figure} failed: {exc!r}")
        result |= {"ok": False, "error": repr(exc)[:500]}
    finally:
        db.close()
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
