"""The figures that must not regress (issue 41, goal 4), and the check ``run.py`` makes of them.

``run.py`` computes its rows (one per measure: ``value``, ``ratio`` against the peer of the
same repetition, ...) and hands them to :func:`check`; ``run.py --smoke`` (CI) exits non-zero
when any guard fails. A guard fails when its figure is past its bound by more than the noise
allowance: the allowance is what the smoke's tiny sizes on a loaded 2-core machine move the
figure by between runs of the same code (bench/README.md, "The smoke's guards", records the
runs the allowances come from). Counts (transactions per operation, Python calls per
operation) move little with the load and get tight allowances; ratios of timings, wide ones.

The functions here are pure (rows in, failures out): tests/unit/test_bench_guards.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Guard:
    """One guarded figure: the rows whose ``name`` contains ``measure`` (in figure
    ``figure``), its ``field`` (``"value"`` or ``"ratio"``), which must stay ``<=`` or ``>=``
    ``bound``, with ``allowance`` (a fraction of the bound) for the noise of a smoke run."""

    figure: str
    measure: str
    field: str
    op: str
    bound: float
    allowance: float
    what: str
    #: A ratio of timings: past its allowance on a machine busier than ``BUSY_LOAD_PER_CORE``
    #: it is reported, not failed (the time went to the other work; counts always fail).
    timing: bool = False

    @property
    def limit(self) -> float:
        """Where the guard fails: the bound moved by the allowance, away from the target."""
        if self.op == "<=":
            return self.bound * (1 + self.allowance)
        return self.bound * (1 - self.allowance)

    def passes(self, value: float) -> bool:
        return value <= self.limit if self.op == "<=" else value >= self.limit


#: Runnable tasks per core (the 1-minute load average over the CPU count, the larger of the
#: run's start and end) above which a timing guard past its allowance is excused: the smoke's
#: per operation p50 reached 6.3x a raw commit's at load 8.5 on 2 cores, with a 10,000-run
#: benchmark and crash tests beside it, and 0.75-2.3x at loads 7-10 without them.
BUSY_LOAD_PER_CORE = 3.0

#: The guards, one per figure the issue says must not regress. Bounds are the targets; each
#: allowance comes from the spread of smoke runs on a loaded machine (bench/README.md).
GUARDS: tuple[Guard, ...] = (
    # counts: tight (group commit makes transactions per operation move a little with timing)
    Guard("1 throughput", "Postgres transactions per operation", "value", "<=", 0.8, 0.4,
          "Postgres transactions per durable operation, run creation included (a count; "
          "0.88-0.92 in smoke runs, 0.79 in full ones)"),
    Guard("2 per-step overhead", "Python function calls per durable operation", "value", "<=",
          400.0, 0.05, "Python function calls per durable operation, a warm run (a count; "
          "884-921 in smoke runs of 20 steps at issue 41's start, 443 once its hot path "
          "was cut, 368 with the group commit keeping its connection)"),
    Guard("5 memory", "runs waiting in a model call", "value", "<=", 3.0, 1.5,
          "Postgres transactions/s while one worker's runs all wait in a model call (its "
          "heartbeat and guardian: O(workers), not O(runs); a statement per run every 10 s "
          "would be 10/s at the smoke's 100 runs)"),
    Guard("10 cost growth", "claim latency p50 with", "ratio", "<=", 2.0, 0.5,
          "claim latency p50 behind 100,000 ready messages, against an empty queue (a claim "
          "that read the backlog took 19x)"),
    # timings: wide (the smoke's sizes on a loaded 2-core machine)
    # against DBOS's step, not the raw commit: a commit costs 0.15 ms on one machine's disk and
    # 0.4 ms on another's, so the raw ratio measures the disk (4.1-5.6x on the fast one with
    # nothing changed); a DBOS step at concurrency 1 pays a commit too (bench/README.md)
    Guard("2 per-step overhead", "against a DBOS step, one at a time", "ratio", "<=", 0.5, 1.0,
          "per operation p50 at concurrency 1 against DBOS's ms per step, one workflow at a "
          "time (0.2-0.53 in full runs on two machines, 0.71 once at load 8)", timing=True),
    Guard("1 throughput", "durable operations/s (1 worker process", "ratio", ">=", 3.0, 0.9,
          "durable operations/s against DBOS's steps/s, same shape (0.44x-1.85x in smoke "
          "runs at load 7-10, 3.9x-5.4x in full runs)", timing=True),
    Guard("3 queue", "no-op jobs/s at concurrency 1 ", "ratio", ">=", 2.0, 0.8,
          "no-op jobs/s at concurrency 1 against procrastinate's (1.22x-1.77x in smoke runs "
          "at load 7-10, 2.2x-2.3x in full runs)", timing=True),
)


@dataclass(frozen=True)
class Failure:
    """A guard its figure failed: the row's figure, measure and value, and the guard."""

    guard: Guard
    name: str
    value: float
    row: Mapping[str, Any]
    #: The load per core the run saw, when it excuses this failure (a timing guard on a
    #: machine busier than ``BUSY_LOAD_PER_CORE``); ``None``: a failure.
    excused_at_load: float | None = None

    def message(self) -> str:
        row, guard = self.row, self.guard
        if guard.field == "ratio":
            shown = (f"ratio {self.value:g}x (Toren {row.get('value')} {row.get('unit', '')}"
                     f" against {row.get('peer')} {row.get('peer_name', '')})")
            unit = "x"
        else:
            unit = f" {row.get('unit', '')}".rstrip()
            shown = f"{self.value:g}{unit}"
        head = ("bench guard failed" if self.excused_at_load is None else
                f"bench guard excused (a timing, on a machine at load {self.excused_at_load:g} "
                f"per core, over {BUSY_LOAD_PER_CORE:g})")
        return (f"{head}: figure {guard.figure}, '{self.name}': {shown} is past its "
                f"bound {guard.op} {guard.bound:g}{unit} by more than the noise allowance "
                f"({guard.allowance:.0%} of the bound: fails "
                f"{'above' if guard.op == '<=' else 'below'} {guard.limit:g}{unit}); "
                f"{guard.what}")


def find(rows: Iterable[Mapping[str, Any]], guard: Guard) -> list[Mapping[str, Any]]:
    """The rows ``guard`` reads (every row of its figure whose measure contains the guard's
    and has the field; a figure that did not run has none)."""
    return [row for row in rows
            if row.get("figure") == guard.figure
            and guard.measure in str(row.get("name", ""))
            and row.get(guard.field) is not None]


def check(rows: Iterable[Mapping[str, Any]], guards: Iterable[Guard] = GUARDS, *,
          load_per_core: float | None = None) -> list[Failure]:
    """The guards ``rows`` fail (every row a guard reads is checked; none read: not run).
    With ``load_per_core`` over ``BUSY_LOAD_PER_CORE``, a timing guard's failure is returned
    excused (``excused_at_load``)."""
    rows = list(rows)
    busy = load_per_core is not None and load_per_core > BUSY_LOAD_PER_CORE
    failures = []
    for guard in guards:
        for row in find(rows, guard):
            value = float(row[guard.field])
            if not guard.passes(value):
                failures.append(Failure(guard, str(row["name"]), value, row,
                                        round(load_per_core, 2) if busy and guard.timing
                                        and load_per_core is not None else None))
    return failures


def unchecked(rows: Iterable[Mapping[str, Any]], guards: Iterable[Guard] = GUARDS
              ) -> list[Guard]:
    """The guards with no row to read (their figure was not run, or failed)."""
    rows = list(rows)
    return [guard for guard in guards if not find(rows, guard)]
