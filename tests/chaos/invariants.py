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

from tests.durable import check_log
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
    rows = conn.execute(f"SELECT run_id::text, stream, seq, type, data FROM {schema}.events "
                        "ORDER BY run_id, stream, seq").fetchall()
    for run_id, stream, seq, kind, data in rows:
        by_run[run_id].append(Event(run_id, stream, seq, kind, data))
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


def _excess(counter: Counter[Any]) -> list[Any]:
    return [key for key, count in counter.items() if count > 1]


def duplicates_in_run(events: Sequence[Event]) -> list[str]:
    """Facts recorded more than once in one run's log (each a sentence)."""
    found: list[str] = []
    run = [e for e in events if e.stream == "run"]
    for kind, key in (("WaveStarted", "wave"), ("TaskScheduled", "task_id"),
                      ("TaskAbsorbed", "task_id"), ("TimerFired", "timer")):
        for value in _excess(Counter(e.data.get(key) for e in run if e.type == kind)):
            found.append(f"run stream: {kind} {key}={value!r} recorded more than once")
    if sum(e.type == "RunFinished" for e in run) > 1:
        found.append("run stream: RunFinished recorded more than once")
    tasks: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        if event.stream != "run":
            tasks[event.stream].append(event)
    for stream, items in sorted(tasks.items()):
        for kind in ("TaskStarted", "TaskFinished"):
            if sum(e.type == kind for e in items) > 1:
                found.append(f"{stream}: {kind} recorded more than once")
        steps = Counter(e.data["step"] for e in items if e.type == "ModelCallCompleted"
                        and e.data.get("purpose") != "compaction")
        for step in _excess(steps):
            found.append(f"{stream}: model call step {step} completed {steps[step]} times")
        for kind in ("ToolCallStarted", "ToolCallCompleted"):
            calls = Counter(e.data["call_id"] for e in items if e.type == kind)
            for call in _excess(calls):
                found.append(f"{stream}: {kind} of {call} recorded {calls[call]} times")
    return found


def check_model_calls(logs: Mapping[str, Sequence[Event]], paid: int, kills: Sequence[Kill],
                      concurrency: int, findings: Findings) -> None:
    """No completed model call paid twice beyond what the kills explain.

    ``paid`` calls were made (the call log, written as each call starts). Each attempt at a step
    is announced by a committed ``ModelCallStarted`` first, so ``paid <= started``; a step
    attempted more than once must say so on its completion (``repeated: true``), which makes
    every repaid call visible in the receipt; and the calls repaid can only be the ones in
    flight at a kill: at most ``concurrency`` per kill.

    A repeated step on a stream that no killed worker held was taken over from a live worker
    (one that stalled past its lease): counted as ``repeats_without_kill``, not a violation.
    """
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
    repaid = paid - completed
    findings.figures |= {"model_calls": paid, "model_calls_completed": completed,
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


def check_tools(logs: Mapping[str, Sequence[Event]], effects: Path, kills: Sequence[Kill],
                concurrency: int, findings: Findings) -> None:
    """Each tool call executed at least once, re-executed only by kills, never without its
    ``ToolCallStarted`` in the log, and completed without error."""
    executions = Counter(effects.read_text().splitlines() if effects.exists() else [])
    keys: dict[str, str] = {}
    for run_id, events in logs.items():
        for event in events:
            if event.type == "ToolCallStarted":
                keys[event.data["idempotency_key"]] = run_id
            elif event.type == "ToolCallCompleted" and event.data.get("is_error"):
                findings.fail(f"run {run_id} {event.stream} seq {event.seq}: tool call "
                              f"{event.data['call_id']} ended in error "
                              f"({event.data.get('error_kind')}): {event.data['output']!r}")
    reexecutions = sum(count - 1 for count in executions.values())
    findings.figures |= {"tool_calls": len(keys), "tool_executions": sum(executions.values()),
                         "tool_reexecutions": reexecutions}
    for key, run_id in keys.items():
        if executions[key] == 0:
            findings.fail(f"run {run_id}: tool call {key} is in the log but never executed")
    for key in executions.keys() - keys.keys():
        findings.fail(f"tool call {key} executed but no ToolCallStarted records it")
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
        twice = conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {schema}.events "
            "GROUP BY run_id, stream, seq HAVING count(*) > 1) AS d").fetchone()
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
    duplicated = twice[0] if twice else 0
    for run_id in runs:
        events = logs.get(run_id, [])
        try:
            check_log(events)  # the catalog, and each stream's seqs exactly 1..n
        except Exception as exc:
            findings.fail(f"run {run_id}: malformed log: {exc}")
        found = duplicates_in_run(events)
        duplicated += len(found)
        findings.violations += [f"run {run_id} {sentence}" for sentence in found]
    if twice and twice[0]:
        findings.fail(f"{twice[0]} (run, stream, seq) keys appear more than once")
    findings.figures |= {"lost": lost, "duplicated": duplicated}

    ours = {run_id: logs.get(run_id, []) for run_id in runs}
    paid = len(calls_log.read_text().splitlines()) if calls_log.exists() else 0
    check_model_calls(ours, paid, kills, concurrency, findings)
    check_tools(ours, effects, kills, concurrency, findings)

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
