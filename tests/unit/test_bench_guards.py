"""bench/guards.py: the figures CI's bench smoke must not let regress (issue 41, goal 4).

The guards are pure functions of ``run.py``'s rows, so they are tested on rows shaped as
``run.py`` makes them; ``run.py --smoke`` itself runs in CI (``.ci/run``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # run.py imports guards as its neighbour
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


guards = load("guards")


def row(figure: str, name: str, value: float | None, *, ratio: float | None = None,
        peer: float | None = None, unit: str = "", peer_name: str = "") -> dict[str, Any]:
    return {"figure": figure, "name": name, "value": value, "unit": unit, "peer": peer,
            "peer_name": peer_name, "ratio": ratio, "ratio_spread": "", "pairs": 1,
            "target": "", "met": None}


def healthy() -> list[dict[str, Any]]:
    """Rows as a smoke run on a quiet machine makes them: every guard passes."""
    return [
        row("1 throughput", "durable operations/s (1 worker process, 11 per run, run creation "
            "in the window)", 1500, ratio=3.6, peer=416, unit="ops/s"),
        row("1 throughput", "Postgres transactions per operation, run creation included",
            0.79, ratio=0.4, peer=1.98, unit="xacts"),
        row("2 per-step overhead", "ms per durable operation (p50) against a DBOS step, one "
            "at a time", 0.7, ratio=0.25, peer=2.8, unit="ms",
            peer_name="DBOS ms per step, sequential"),
        row("2 per-step overhead", "Python function calls per durable operation, a warm run",
            368, unit="calls"),
        row("3 queue", "no-op jobs/s at concurrency 1 (worker started and stopped in the "
            "window)", 1200, ratio=2.2, peer=545, unit="jobs/s"),
        row("3 queue", "no-op jobs/s at concurrency 10 (worker started and stopped in the "
            "window)", 1300, ratio=0.5, peer=2600, unit="jobs/s"),
        row("5 memory", "200 runs waiting in a model call on one worker: Postgres "
            "transactions/s", 1.2, unit="xacts/s"),
        row("10 cost growth", "claim latency p50 with 100,000 ready messages waiting", 0.8,
            ratio=1.2, peer=0.66, unit="ms"),
        row("10 cost growth", "claim latency p50 with 100,000 ready messages of another agent "
            "waiting", 0.8, ratio=1.2, peer=0.66, unit="ms"),
    ]


def test_every_guard_reads_a_row_and_a_healthy_run_passes() -> None:
    rows = healthy()
    assert guards.check(rows) == []
    assert guards.unchecked(rows) == []


def test_a_ratio_past_its_bound_within_the_allowance_passes() -> None:
    rows = healthy()
    rows[2]["ratio"] = 0.9  # over 0.5x DBOS, within the noise a loaded smoke shows
    assert guards.check(rows) == []


@pytest.mark.parametrize(("index", "field", "bad", "figure"), [
    (2, "ratio", 1.5, "2 per-step overhead"),
    (1, "value", 1.4, "1 throughput"),
    (3, "value", 1200, "2 per-step overhead"),
    (6, "value", 40.0, "5 memory"),       # transactions growing with the runs waiting
    (7, "ratio", 19.0, "10 cost growth"),  # a claim that reads the backlog
    (8, "ratio", 19.0, "10 cost growth"),
    (0, "ratio", 0.2, "1 throughput"),
    (4, "ratio", 0.3, "3 queue"),
])
def test_a_figure_past_its_bound_by_more_than_the_noise_fails_naming_it(
        index: int, field: str, bad: float, figure: str) -> None:
    rows = healthy()
    rows[index][field] = bad
    failures = guards.check(rows)
    assert len(failures) == 1
    message = failures[0].message()
    guard = failures[0].guard
    assert figure in message and rows[index]["name"] in message
    assert f"{bad:g}" in message  # the figure's ratio or value
    assert f"{guard.op} {guard.bound:g}" in message  # its bound
    assert f"{guard.allowance:.0%}" in message and f"{guard.limit:g}" in message  # the noise


def test_a_timing_past_its_allowance_on_a_busy_machine_is_excused_a_count_is_not() -> None:
    rows = healthy()
    rows[2]["ratio"] = 1.8  # per operation p50 against a DBOS step: a timing
    rows[1]["value"] = 1.4  # transactions per operation: a count
    busy = guards.BUSY_LOAD_PER_CORE + 1
    found = guards.check(rows, load_per_core=busy)
    assert [(f.guard.figure, f.excused_at_load) for f in found] == [
        ("1 throughput", None), ("2 per-step overhead", busy)]
    assert found[1].message().startswith("bench guard excused")
    quiet = guards.check(rows, load_per_core=guards.BUSY_LOAD_PER_CORE / 2)
    assert [f.excused_at_load for f in quiet] == [None, None]


def test_concurrency_10_is_not_the_guarded_queue_level() -> None:
    rows = healthy()
    rows[5]["ratio"] = 0.1
    assert guards.check(rows) == []


def test_a_figure_that_did_not_run_is_unchecked_not_failed() -> None:
    rows = [r for r in healthy() if r["figure"] != "10 cost growth"]
    rows[0]["ratio"] = None  # no DBOS in this run (--no-peers)
    assert guards.check(rows) == []
    missing = guards.unchecked(rows)
    assert {g.figure for g in missing} == {"10 cost growth", "1 throughput"}
    assert all(g.field == "ratio" for g in missing)


def test_limits_move_away_from_the_target() -> None:
    at_most = guards.Guard("f", "m", "value", "<=", 2.0, 0.5, "")
    at_least = guards.Guard("f", "m", "ratio", ">=", 3.0, 0.5, "")
    assert at_most.limit == 3.0 and at_most.passes(3.0) and not at_most.passes(3.01)
    assert at_least.limit == 1.5 and at_least.passes(1.5) and not at_least.passes(1.49)


def test_run_py_reads_the_same_rows_the_guards_name() -> None:
    """The guards' prefixes match the rows run.py makes from a smoke run's raw results."""
    run = load("run")
    rep = {
        "toren_throughput": {"operations_per_s": 1500, "operations_per_run": 11,
                             "pg_xacts_per_operation": 0.79, "connections_peak_busy": 4},
        "dbos": {"steps_per_s": 416, "sequential": {"pg_xacts_per_step_approx": 1.98,
                                                    "ms_per_step": 2.8}},
        "pg_raw": {"modes": [{"connections": 1, "synchronous_commit": "on",
                              "latency_ms_p50": 0.39, "commits_per_s": 2500}]},
        "toren_latency": {"ms_per_operation_p50": 0.7, "python_calls_per_operation": 368},
        "toren_queue": {"runs": [{"concurrency": 1, "jobs_per_s": 1200}]},
        "procrastinate": {"runs": [{"worker_concurrency": 1, "jobs_per_s": 545}]},
        "toren_memory": {"inflight_runs": 200, "waiting_xacts_per_s": 1.2},
        "toren_growth": {"backlog": 100000, "empty": {"claim_ms_p50": 0.66},
                         "backlog_claim": {"claim_ms_p50": 0.8},
                         "foreign_backlog_claim": {"claim_ms_p50": 0.8}},
    }
    rows = run.figures([rep])
    assert guards.unchecked(rows) == []
    assert guards.check(rows) == []
    rep["toren_memory"]["waiting_xacts_per_s"] = 200 * 0.2  # a lease renewal per run
    failures = guards.check(run.figures([rep]))
    assert [f.guard.figure for f in failures] == ["5 memory"]
