"""What a soak with kills must leave behind, checked from the event log and from two records kept
outside the database (the offline model's call log and the tools' effects file).

``check_soak`` reads everything once and returns the figures and the violations (human-readable
sentences naming the run, stream and events at fault); no violations means every invariant held.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from tests.chaos.effects import executions
from tests.durable import (
    check_catalog,
    duplicate_facts,
    model_call_violations,
    read_call_log,
    tool_execution_violations,
)
from toren.core.events import TERMINAL_STATUSES, Event


@dataclass
class Kill:
    """One SIGKILL: the worker, the moment (database clock) and the leases it held then."""

    worker_id: str | None
    pid: int
    #: ``clock_timestamp()`` read right before the worker was stopped, and right after it was
    #: killed and reaped (nothing it sent can start after that).
    before: datetime
    after: datetime
    #: ``(run_id, stream)`` of every live lease the stopped worker held.
    streams: list[tuple[str, str]]
    #: Queue messages ready and waiting for a worker at the kill: a killed worker's messages
    #: become ready again when their lease expires, behind these.
    backlog: int = 0
    #: Seconds from the kill to the first event appended on any of those streams (filled in by
    #: ``recovery_times``); ``None`` when it held nothing, or nothing followed.
    recovery_s: float | None = None


@dataclass
class Findings:
    """Figures and violations of one soak."""

    figures: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.violations.append(message)


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (``fraction`` in 0..1); ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def load_events(conn: psycopg.Connection[Any], schema: str) -> dict[str, list[Event]]:
    """Every event in the agent's schema, by run, in (stream, seq) order."""
    by_run: dict[str, list[Event]] = defaultdict(list)
    rows = conn.execute(f"SELECT run_id::text, stream, seq, type, data, created_at "
                        f"FROM {schema}.events ORDER BY run_id, stream, seq").fetchall()
    for run_id, stream, seq, kind, data, created_at in rows:
        by_run[run_id].append(Event(run_id, stream, seq, kind, data, created_at))
    return by_run


def recovery_times(conn: psycopg.Connection[Any], schema: str, kills: Iterable[Kill]) -> None:
    """Fill in ``Kill.recovery_s``: from the kill to the first event appended afterwards (by
    another process: the killed one was reaped before ``after``) on a stream it held."""
    for kill in kills:
        if not kill.streams:
            continue
        runs = [run_id for run_id, _ in kill.streams]
        streams = [stream for _, stream in kill.streams]
        row = conn.execute(
            f"SELECT min(e.created_at) FROM {schema}.events e "
            "JOIN unnest(%s::uuid[], %s::text[]) AS k(run_id, stream) "
            "ON e.run_id = k.run_id AND e.stream = k.stream WHERE e.created_at > %s",
            [runs, streams, kill.after]).fetchone()
        first = row[0] if row else None
        if first is not None:
            kill.recovery_s = (first - kill.before).total_seconds()


def check_model_calls(logs: Mapping[str, Sequence[Event]], calls: Sequence[Mapping[str, Any]],
                      kills: Sequence[Kill], concurrency: int, findings: Findings) -> None:
    """No completed model call paid twice beyond what the kills explain, and no call made that
    no attempt explains.

    ``calls`` is the call log (one line per call made, written as each call starts). Each
    attempt at a step is announced by a committed ``ModelCallStarted`` first, and a call may
    only start while its attempt is open: each call must match a distinct attempt of the same
    request size that was announced before it started and whose step had not been completed
    yet (``model_call_violations``; this needs every run the fleet served in ``logs``). A step
    attempted more than once must say so on its completion (``repeated: true``), which makes
    every repaid call visible in the receipt; and the calls repaid can only be the ones in
    flight at a kill: at most ``concurrency`` per kill.

    A repeated step on a stream that no killed worker held was taken over from a live worker
    (one that stalled past its lease): counted as ``repeats_without_kill``, not a violation.
    """
    paid = len(calls)
    held = {stream for kill in kills for stream in kill.streams}
    started = completed = repeated = unexplained = 0
    for run_id, events in logs.items():
        attempts: Counter[tuple[str, int]] = Counter()
        completions: dict[tuple[str, int], Event] = {}
        for event in events:
            if event.type == "ModelCallStarted" and event.data.get("purpose") != "compaction":
                attempts[(event.stream, event.data["step"])] += 1
            elif event.type == "ModelCallCompleted":
                completed += 1
                repeated += bool(event.data.get("repeated"))
                unexplained += (bool(event.data.get("repeated"))
                                and (run_id, event.stream) not in held)
                if event.data.get("purpose") != "compaction":
                    completions[(event.stream, event.data["step"])] = event
            if event.type == "ModelCallStarted":
                started += 1
        for (stream, step), count in attempts.items():
            done = completions.get((stream, step))
            if done is None:
                findings.fail(f"run {run_id} {stream}: model call step {step} started "
                              f"{count} times and never completed")
            elif (count > 1) != bool(done.data.get("repeated")):
                findings.fail(f"run {run_id} {stream}: model call step {step} was attempted "
                              f"{count} times but its completion (seq {done.seq}) says "
                              f"repeated={done.data.get('repeated')!r}")
    outside = model_call_violations([e for events in logs.values() for e in events], calls)
    findings.violations += outside
    repaid = paid - completed
    findings.figures |= {"model_calls": paid, "model_calls_completed": completed,
                         "calls_outside_attempts": len(outside),
                         "model_calls_started": started, "repaid_calls": repaid,
                         "repeated_marked": repeated, "repeats_without_kill": unexplained}
    if paid < completed:
        findings.fail(f"{completed} model calls completed in the log but only {paid} were "
                      "made: the call log lost lines")
    if paid > started:
        findings.fail(f"{paid} model calls were made but only {started} were announced by a "
                      "ModelCallStarted: a call was made without being recorded first")
    # a takeover from a stalled (live) worker repays its call too, and is marked: count it
    if repaid > len(kills) * concurrency + unexplained:
        findings.fail(f"{repaid} model calls were paid twice, more than {len(kills)} kills x "
                      f"concurrency {concurrency} (+ {unexplained} takeovers from stalled "
                      "workers) explain")


def check_tools(logs: Mapping[str, Sequence[Event]], executed: Sequence[str],
                kills: Sequence[Kill], concurrency: int, findings: Findings) -> None:
    """Each tool call executed at least once and completed without error; executed again only
    where the log allows it (``tool_execution_violations``: a later lease holder re-ran an
    idempotent tool whose result its predecessor never recorded), and no more often in all
    than the kills explain; never without its ``ToolCallStarted`` in the log.

    ``executed``: the idempotency key of every execution, from the effects file."""
    counts = Counter(executed)
    keys: dict[str, str] = {}
    for run_id, events in logs.items():
        for event in events:
            if event.type == "ToolCallStarted":
                keys[event.data["idempotency_key"]] = run_id
            elif event.type == "ToolCallCompleted" and event.data.get("is_error"):
                findings.fail(f"run {run_id} {event.stream} seq {event.seq}: tool call "
                              f"{event.data['call_id']} ended in error "
                              f"({event.data.get('error_kind')}): {event.data['output']!r}")
    reexecutions = sum(count - 1 for count in counts.values())
    findings.figures |= {"tool_calls": len(keys), "tool_executions": len(executed),
                         "tool_reexecutions": reexecutions}
    for key, run_id in keys.items():
        if counts[key] == 0:
            findings.fail(f"run {run_id}: tool call {key} is in the log but never executed")
    findings.violations += tool_execution_violations(
        [e for events in logs.values() for e in events], executed)
    if reexecutions > len(kills) * concurrency:
        findings.fail(f"tools re-executed {reexecutions} times, more than {len(kills)} kills x "
                      f"concurrency {concurrency} explain")


def check_soak(url: str, schema: str, *, expected: Mapping[str, Any],
               runs: Mapping[str, str], calls_log: Path, effects: Path, kills: list[Kill],
               concurrency: int) -> Findings:
    """Check every invariant over ``runs`` (run id -> input; ``expected`` maps each input to
    the output a run with no kills produced) and measure recovery per kill."""
    findings = Findings()
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(f"SELECT id::text, status, output, error FROM {schema}.runs"
                            ).fetchall()
        logs = load_events(conn, schema)
        recovery_times(conn, schema, kills)
    state = {run_id: (status, output, error) for run_id, status, output, error in rows}

    lost = 0
    for run_id, text in runs.items():
        status, output, error = state.get(run_id, ("missing", None, None))
        if status != "completed" or output != expected.get(text):
            lost += 1
            why = ("completed with the wrong output" if status == "completed"
                   else f"is {status}" + ("" if status in TERMINAL_STATUSES else " (not done)"))
            findings.fail(f"run {run_id} ({text!r}) {why}: output {json.dumps(output)[:200]}, "
                          f"error {error}")
    duplicated = 0
    for run_id in runs:
        events = logs.get(run_id, [])
        try:
            check_catalog(events)  # the catalog, and each stream's seqs exactly 1..n
        except Exception as exc:
            findings.fail(f"run {run_id}: malformed log: {exc}")
        found = duplicate_facts(events)
        duplicated += len(found)
        findings.violations += found
    findings.figures |= {"lost": lost, "duplicated": duplicated}

    ours = {run_id: logs.get(run_id, []) for run_id in runs}
    check_model_calls(ours, read_call_log(calls_log), kills, concurrency, findings)
    check_tools(ours, [key for key, _pid in executions(effects)], kills, concurrency, findings)

    recoveries = [k.recovery_s for k in kills if k.recovery_s is not None]
    # recovery is the lease running out, a poll, and the killed worker's messages waiting
    # their turn behind the messages already ready (the queue serves the oldest ready first)
    slowest = max((k for k in kills if k.recovery_s is not None),
                  key=lambda k: k.recovery_s or 0.0, default=None)
    findings.figures |= {
        "busy_kills": sum(bool(k.streams) for k in kills),
        "recovered_kills": len(recoveries),
        "recovery_p50_s": _rounded(percentile(recoveries, 0.5)),
        "recovery_p99_s": _rounded(percentile(recoveries, 0.99)),
        "recovery_max_s": _rounded(max(recoveries, default=None)),
        "recovery_max_backlog": None if slowest is None else slowest.backlog,
    }
    return findings


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
