"""The soak with kills: many workflow runs on a fleet of ``toren worker`` processes, one of which
is SIGKILLed at random moments (and restarted) until every run is done; then the event log must
show that nothing was lost, nothing recorded twice, and that the kills cost no more than the
work in flight at each (see docs/guides/reliability.md).

    .venv/bin/python -m tests.chaos.soak                            # under a minute
    .venv/bin/python -m tests.chaos.soak --kills 100 --runs 200 --workers 3   # long mode

Without ``--database-url`` it creates a uniquely named database on ``--server-url`` and drops
it afterwards. It prints a summary, then one JSON line of figures; the exit status is 1 if any
invariant failed (the violations name the runs), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from toren_postgres.testing import create_database, drop_database

from tests.chaos.effects import recording_tools_source
from tests.chaos.helpers import TorenLauncher, start_worker
from tests.chaos.invariants import Kill, check_soak
from toren.agents import schema_name_for
from toren.config import Settings
from toren.core.events import TERMINAL_STATUSES
from toren.host.runtime import Runtime
from toren.testing import OutputProcess, write_agent_dir

DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
AGENT = "soak"
SCHEMA = schema_name_for(AGENT)
#: Runs cycle through these inputs; one reference run of each, with no kills, gives the output
#: every other run of that input must end with.
INPUTS = tuple(f"topic {k}" for k in range(4))
TERMINAL = tuple(sorted(TERMINAL_STATUSES))

#: Three waves and a durable timer; the second wave is planned from the first one's answers,
#: so a lost or altered answer changes the output. 7 tasks, 20 model calls, 13 tool calls.
WORKFLOW = '''
import hashlib


def digest(text):
    return hashlib.sha256((text or "").encode()).hexdigest()[:12]


async def workflow(ctx):
    first = await ctx.wave([("scout", f"{ctx.input} / part {i}") for i in range(3)])
    await ctx.sleep(0.2)
    second = await ctx.wave([("scout", f"{r.task_id} saw {digest(r.output)}") for r in first])
    final = await ctx.task("writer", " ".join(digest(r.output) for r in second))
    return {"input": ctx.input,
            "tasks": [[r.task_id, r.status, digest(r.output)] for r in [*first, *second, final]]}
'''
SUBAGENTS = {
    "scout": "---\ndescription: Scouts one part.\ntools: [survey, record]\n---\nScout.\n",
    "writer": "---\ndescription: Writes it up.\ntools: [record]\n---\nWrite.\n",
}
TASKS_PER_RUN = 7
#: Seconds between freezing a worker and reading what it holds (see ``Fleet.kill``).
SETTLE_S = 0.05


@dataclass(frozen=True)
class SoakConfig:
    """What to soak, and how hard (the command-line options, same names)."""

    runs: int = 20
    workers: int = 2
    kills: int = 10
    seed: int | None = None
    mean_kill_interval: float = 1.5
    model_delay: float = 0.1
    lease_ttl: float = 1.0
    concurrency: int = 4
    poll_interval: float = 0.2
    checkpoint_every: int = 5
    #: Seconds of chaos at most; then kills stop and the runs get ``drain`` seconds to finish.
    deadline: float = 900.0
    drain: float = 120.0


@dataclass
class SoakResult:
    """What a soak measured (``figures``: the JSON line) and found wrong (``violations``)."""

    config: SoakConfig
    seed: int
    figures: dict[str, Any]
    violations: list[str]
    kills: list[Kill] = field(default_factory=list)
    workdir: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.violations


def result_tasks(output: Any) -> list[list[str]]:
    """The ``[task_id, status, digest]`` rows of a soak run's output (a workflow's dict return
    value is stored as JSON text)."""
    try:
        value = json.loads(output) if isinstance(output, str) else output
        return list(value["tasks"])
    except (ValueError, TypeError, KeyError):
        return []


def write_crew(parent: Path, effects: Path) -> Path:
    """The soak's agent directory: workflow.py, a scout and a writer, two idempotent tools that
    append their idempotency key (and pid) to ``effects``."""
    directory = write_agent_dir(parent, AGENT, subagents=SUBAGENTS,
                                tools_py=recording_tools_source(["survey", "record"], effects))
    (directory / "workflow.py").write_text(WORKFLOW)
    return directory


class RunStarter:
    """Creates runs in this process through ``Runtime.start_run`` (no workers): what
    ``toren run --no-follow`` does, without a process start per run."""

    def __init__(self, url: str, directory: Path, home: Path) -> None:
        settings = Settings.from_env({"DATABASE_URL": url, "TOREN_HOME": str(home),
                                      "TOREN_LOAD_PLUGINS": ""})
        self.runtime = Runtime([directory], settings=settings)
        self.runner = asyncio.Runner()
        self.runner.run(self.runtime.start(workers=False))

    def start(self, inputs: Sequence[str]) -> list[str]:
        async def create() -> list[str]:
            return [await self.runtime.start_run(AGENT, text) for text in inputs]

        return self.runner.run(create())

    def close(self) -> None:
        try:
            self.runner.run(self.runtime.stop())
        finally:
            self.runner.close()


class Fleet:
    """``size`` worker processes in numbered slots; a killed one is restarted in its slot."""

    def __init__(self, launcher: TorenLauncher, directory: Path, env: dict[str, str],
                 conn: psycopg.Connection[Any], size: int) -> None:
        self.launcher = launcher
        self.directory = directory
        self.env = env
        self.conn = conn
        self.slots: list[OutputProcess | None] = [None] * size
        self.ids: list[str | None] = [None] * size
        #: Workers that exited without being killed: (pid, exit code, end of stderr).
        self.crashes: list[tuple[int, int | None, str]] = []

    def start(self, slot: int) -> None:
        worker = start_worker(self.launcher.start, self.directory, self.env)
        self.slots[slot] = worker
        row = self.conn.execute(
            "SELECT id FROM toren_control.workers WHERE pid = %s ORDER BY started_at DESC "
            "LIMIT 1", [worker.proc.pid]).fetchone()
        self.ids[slot] = row[0] if row else None

    def kill(self, slot: int) -> Kill:
        """SIGKILL the worker in ``slot``, noting the moment and the leases it held.

        The worker is frozen (SIGSTOP) at the moment of the kill, so that what is read next
        (its leases, the queue) is exactly what it left behind: a process that kept running
        while the leases were read could take or release one in between. Statements it had
        already sent get a moment to finish; then SIGKILL. To the database this is a SIGKILL
        at the moment of the SIGSTOP.
        """
        worker = self.slots[slot]
        assert worker is not None
        before = self._clock()
        worker.proc.send_signal(signal.SIGSTOP)
        time.sleep(SETTLE_S)
        streams = [] if self.ids[slot] is None else [
            (run_id, stream) for run_id, stream in self.conn.execute(
                "SELECT run_id::text, stream FROM toren_control.leases "
                "WHERE holder = %s AND expires_at > clock_timestamp()", [self.ids[slot]])]
        row = self.conn.execute("SELECT count(*) FROM toren_control.queue "
                                "WHERE available_at <= clock_timestamp()").fetchone()
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait(timeout=30)
        after = self._clock()
        worker.close()
        self.slots[slot] = None
        return Kill(self.ids[slot], worker.proc.pid, before, after, streams,
                    int(row[0]) if row else 0)

    def restart_crashed(self) -> None:
        for slot, worker in enumerate(self.slots):
            if worker is not None and worker.proc.poll() is not None:
                worker.close()
                self.crashes.append((worker.proc.pid, worker.proc.returncode,
                                     worker.stderr[-2000:]))
                self.start(slot)

    def _clock(self) -> Any:
        row = self.conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        return row[0]


def worker_env(url: str, config: SoakConfig, calls: Path) -> dict[str, str]:
    return {
        "DATABASE_URL": url,
        "TOREN_SCRIPTED_DELAY": str(config.model_delay),
        "TOREN_SCRIPTED_CALL_LOG": str(calls),
        "TOREN_LEASE_TTL": str(config.lease_ttl),
        "TOREN_POLL_INTERVAL": str(config.poll_interval),
        "TOREN_CHECKPOINT_EVERY": str(config.checkpoint_every),
        "TOREN_CONCURRENCY": str(config.concurrency),
        "TOREN_GUARDIAN_INTERVAL": "2",
        "TOREN_LOG_LEVEL": "INFO",
        # every kill counts as a failed delivery of the messages in hand: keep the poison
        # detector out of a test of crash recovery
        "TOREN_MAX_DELIVERIES": "1000",
    }


def active_runs(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(f"SELECT count(*) FROM {SCHEMA}.runs WHERE status <> ALL(%s)",
                       [list(TERMINAL)]).fetchone()
    return int(row[0]) if row else 0


def wait_for_runs(conn: psycopg.Connection[Any], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while active_runs(conn):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def reference_outputs(starter: RunStarter, conn: psycopg.Connection[Any],
                      violations: list[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """One run per input with nobody interrupting it: ``(run id -> input, input -> output)``."""
    references = dict(zip(starter.start(INPUTS), INPUTS, strict=True))
    if not wait_for_runs(conn, 120):
        violations.append("the reference runs (no kills) did not finish in 120 s")
    expected: dict[str, Any] = {}
    for run_id, text in references.items():
        row = conn.execute(f"SELECT status, output FROM {SCHEMA}.runs WHERE id = %s",
                           [run_id]).fetchone()
        if row is not None and row[0] == "completed":
            expected[text] = row[1]
        tasks = result_tasks(expected.get(text))
        if len(tasks) != TASKS_PER_RUN or any(status != "completed" for _, status, _ in tasks):
            violations.append(f"the reference run {run_id} of {text!r} did not complete all its "
                              f"tasks: {row!r}")
    return references, expected


class Chaos:
    """Starts the runs, then kills a random worker at random moments (restarting it) until
    every run is terminal and the kill target is met, or the deadline passes."""

    def __init__(self, config: SoakConfig, fleet: Fleet, starter: RunStarter,
                 conn: psycopg.Connection[Any], rng: random.Random,
                 say: Callable[[str], None]) -> None:
        self.config = config
        self.fleet = fleet
        self.starter = starter
        self.conn = conn
        self.rng = rng
        self.say = say
        self.runs: dict[str, str] = {}
        self.kills: list[Kill] = []

    def start_runs(self, count: int) -> None:
        made = len(self.runs)
        texts = [INPUTS[(made + i) % len(INPUTS)] for i in range(count)]
        self.runs.update(zip(self.starter.start(texts), texts, strict=True))

    def interval(self) -> float:
        return self.rng.uniform(0, 2 * self.config.mean_kill_interval)

    def run(self) -> bool:
        """``True`` if it ended before the deadline."""
        config = self.config
        deadline = time.monotonic() + config.deadline
        self.start_runs(config.runs)
        refill = config.workers * config.concurrency
        next_kill = time.monotonic() + self.interval()
        while True:
            active = active_runs(self.conn)
            if not active and len(self.kills) >= config.kills:
                return True
            if time.monotonic() > deadline:
                return False
            if len(self.kills) < config.kills and active < refill:
                self.start_runs(refill)  # keep the fleet busy until the kill target is met
            self.fleet.restart_crashed()
            if time.monotonic() >= next_kill:
                slot = self.rng.randrange(config.workers)
                kill = self.fleet.kill(slot)
                self.kills.append(kill)
                self.say(f"kill {len(self.kills)}: pid {kill.pid} held {len(kill.streams)} "
                         f"leases; {active} of {len(self.runs)} runs active, {kill.backlog} "
                         "messages waiting")
                self.fleet.start(slot)
                next_kill = time.monotonic() + self.interval()
            time.sleep(0.05)


def run_soak(config: SoakConfig, database_url: str, workdir: Path,
             say: Callable[[str], None] = lambda _: None,
             worker_extra_env: Mapping[str, str] | None = None) -> SoakResult:
    """The soak, on ``database_url`` (an empty or freshly migrated database), with its files
    (agent directory, call log, effects, worker stderr, kills.jsonl) under ``workdir``.
    ``worker_extra_env`` is added to the workers' environment (``TOREN_QUEUE=sqs`` and its
    settings: runs are created in the outbox either way, and the workers' relays send them).
    """
    seed = config.seed if config.seed is not None else random.randrange(1 << 30)
    started = time.monotonic()
    calls, effects = workdir / "model-calls.jsonl", workdir / "effects.log"
    directory = write_crew(workdir / "crews", effects)
    launcher = TorenLauncher(workdir)
    starter = RunStarter(database_url, directory, workdir / "toren-home")
    conn = psycopg.connect(database_url, autocommit=True)
    fleet = Fleet(launcher, directory,
                  worker_env(database_url, config, calls) | dict(worker_extra_env or {}), conn,
                  config.workers)
    chaos = Chaos(config, fleet, starter, conn, random.Random(seed), say)
    violations: list[str] = []
    try:
        for slot in range(config.workers):
            fleet.start(slot)
        references, expected = reference_outputs(starter, conn, violations)
        say(f"references done in {time.monotonic() - started:.1f}s; starting {config.runs} "
            f"runs on {config.workers} workers, killing one every ~{config.mean_kill_interval}s")
        chaos_start = time.monotonic()
        if not chaos.run():
            violations.append(f"the deadline ({config.deadline:.0f}s) passed with "
                              f"{len(chaos.kills)} kills and {active_runs(conn)} runs active")
            wait_for_runs(conn, config.drain)
        chaos_s = time.monotonic() - chaos_start
        if len(chaos.kills) < config.kills:
            violations.append(f"only {len(chaos.kills)} kills, fewer than the {config.kills} "
                              "asked")
        fleet.restart_crashed()
        for pid, code, stderr in fleet.crashes:
            violations.append(f"worker pid {pid} exited on its own with {code}: {stderr}")
    finally:
        conn.close()
        launcher.close()
        starter.close()

    say("checking the log")
    kills = chaos.kills
    findings = check_soak(database_url, SCHEMA, expected=expected,
                          runs=references | chaos.runs, calls_log=calls, effects=effects,
                          kills=kills, concurrency=config.concurrency)
    violations += findings.violations
    with (workdir / "kills.jsonl").open("w") as record:
        for kill in kills:
            record.write(json.dumps({"worker": kill.worker_id, "pid": kill.pid,
                                     "at": kill.before.isoformat(), "leases": kill.streams,
                                     "backlog": kill.backlog,
                                     "recovery_s": kill.recovery_s}) + "\n")
    figures = {"runs": len(chaos.runs), "reference_runs": len(references),
               "workers": config.workers, "concurrency": config.concurrency,
               "kills": len(kills)} | findings.figures | {
        "chaos_s": round(chaos_s, 1), "duration_s": round(time.monotonic() - started, 1),
        "seed": seed, "violations": len(violations), "ok": not violations}
    return SoakResult(config, seed, figures, violations, kills, workdir)


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def summary(result: SoakResult) -> str:
    """The figures for a human, and the violations if any."""
    f = result.figures
    lines = [
        f"soak: {f['runs']} runs (+{f['reference_runs']} references) on {f['workers']} workers "
        f"x concurrency {f['concurrency']}, {f['kills']} kills ({f['busy_kills']} while holding "
        f"leases), {f['duration_s']}s (chaos {f['chaos_s']}s), seed {f['seed']}",
        f"  runs lost or wrong:   {f['lost']}",
        f"  recorded twice:       {f['duplicated']}",
        f"  model calls:          {f['model_calls']} made, {f['model_calls_completed']} "
        f"completed, {f['repaid_calls']} repaid ({f['repeated_marked']} marked repeated), "
        f"{f['calls_outside_attempts']} made outside an announced attempt",
        f"  tool calls:           {f['tool_calls']}, {f['tool_reexecutions']} re-executions",
        f"  recovery after kill:  p50 {seconds(f['recovery_p50_s'])}, p99 "
        f"{seconds(f['recovery_p99_s'])}, max {seconds(f['recovery_max_s'])} "
        f"({f['recovered_kills']} kills measured; the slowest had "
        f"{f['recovery_max_backlog']} queue messages ready ahead of its work)",
    ]
    if result.violations:
        lines.append(f"FAILED: {len(result.violations)} violations")
        lines += [f"  - {v}" for v in result.violations[:50]]
    else:
        lines.append("ok: every invariant held")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    defaults = SoakConfig()
    parser = argparse.ArgumentParser(
        prog="python -m tests.chaos.soak", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add = parser.add_argument
    add("--runs", type=int, default=defaults.runs,
        help="runs started at once; while kills are short of --kills and fewer runs than "
             "workers x concurrency are active, that many more are started")
    add("--workers", type=int, default=defaults.workers, help="worker processes")
    add("--kills", type=int, default=defaults.kills,
        help="kill at least this many times (and until every run is done)")
    add("--seed", type=int, default=None,
        help="seed of the kill schedule (None: random, printed in the summary)")
    add("--mean-kill-interval", type=float, default=defaults.mean_kill_interval,
        help="seconds between kills, uniform in [0, 2 x this]")
    add("--model-delay", type=float, default=defaults.model_delay,
        help="seconds per model call (TOREN_SCRIPTED_DELAY)")
    add("--lease-ttl", type=float, default=defaults.lease_ttl, help="TOREN_LEASE_TTL")
    add("--concurrency", type=int, default=defaults.concurrency,
        help="TOREN_CONCURRENCY per worker")
    add("--checkpoint-every", type=int, default=defaults.checkpoint_every,
        help="TOREN_CHECKPOINT_EVERY")
    add("--deadline", type=float, default=defaults.deadline,
        help="seconds of chaos at most (then kills stop and runs get --drain seconds)")
    add("--drain", type=float, default=defaults.drain,
        help="seconds the runs get to finish, without kills, after the deadline")
    add("--database-url", default=None,
        help="use this (empty) database instead of creating one on --server-url")
    add("--server-url", default=DEFAULT_SERVER_URL,
        help="a Postgres server where this role may CREATE DATABASE")
    add("--keep", action="store_true",
        help="keep the database and the working directory (kept anyway on failure)")
    add("--json-only", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    if min(args.runs, args.workers, args.concurrency) < 1 or args.kills < 0:
        parser.error("--runs, --workers and --concurrency must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    config = SoakConfig(
        runs=args.runs, workers=args.workers, kills=args.kills, seed=args.seed,
        mean_kill_interval=args.mean_kill_interval, model_delay=args.model_delay,
        lease_ttl=args.lease_ttl, concurrency=args.concurrency,
        checkpoint_every=args.checkpoint_every, deadline=args.deadline, drain=args.drain)

    def say(message: str) -> None:
        if not args.json_only:
            print(message, file=sys.stderr, flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="toren-soak-"))
    name = None
    url = args.database_url
    if url is None:
        name = f"toren_soak_{uuid.uuid4().hex[:12]}"
        url = create_database(args.server_url, name)
        say(f"database {conninfo_to_dict(url).get('dbname')} on {args.server_url}")
    result = None
    try:
        result = run_soak(config, url, workdir, say)
    finally:
        keep = args.keep or result is None or not result.ok
        if name is not None and not keep:
            drop_database(args.server_url, name)
        if keep:
            say(f"kept: {workdir}" + (f" and database {name}" if name else ""))
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if not args.json_only:
        print(summary(result))
    print(json.dumps(result.figures))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
