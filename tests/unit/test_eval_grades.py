"""Grading without I/O: each plain check's verdict on a run's trajectory, the case verdict,
the report's pass rates, flaky cases and distributions, and the comparison of two reports."""

from __future__ import annotations

from typing import Any

import pytest

from toren.core.eval_cases import Case, Dataset, Grader
from toren.core.evals import CaseRun, EvalRecord, Trajectory, compare, plain_check, report, verdict

RUN = Trajectory("completed", "The capital is Paris.\nSource: atlas", tools=("search", "read"),
                 steps=3, model_calls=3, cost_usd=0.02, latency_s=4.5)


@pytest.mark.parametrize(("grader", "passed", "detail"), [
    (Grader("exact", "The capital is Paris.\nSource: atlas  "), True, ""),
    (Grader("exact", "Paris"), False, "expected Paris, got"),
    (Grader("contains", ["Paris", "atlas"]), True, ""),
    (Grader("contains", ["Paris", "Lyon"]), False, "missing 'Lyon'"),
    (Grader("regex", r"Source: \w+"), True, ""),
    (Grader("regex", r"^Paris"), False, "no match"),
    (Grader("tools_called", ["search"]), True, ""),
    (Grader("tools_called", ["search", "write"]), False, "never called write"),
    (Grader("tools_not_called", ["write"]), True, ""),
    (Grader("tools_not_called", ["read"]), False, "called read"),
    (Grader("max_steps", 3), True, ""),
    (Grader("max_steps", 2), False, "3 steps > 2"),
    (Grader("max_cost_usd", 0.01), False, "$0.020000 > $0.01"),
    (Grader("max_latency_s", 10), True, ""),
    (Grader("max_latency_s", 4), False, "4.50s > 4s"),
    (Grader("status", "failed"), False, "ended completed, expected failed"),
    (Grader("schema", {"type": "object"}), False, "the output is not JSON"),
])
def test_plain_checks(grader: Grader, passed: bool, detail: str) -> None:
    check = plain_check(grader, RUN)
    assert check.passed is passed
    assert detail in check.detail


def test_structured_output_is_checked_as_json() -> None:
    run = Trajectory("completed", {"city": "Paris", "population": "2M"})
    schema = {"type": "object", "required": ["city", "population"],
              "properties": {"population": {"type": "integer"}}}
    check = plain_check(Grader("schema", schema), run)
    assert (check.passed, check.detail) == (False, "population: '2M' is not of type 'integer'")
    assert plain_check(Grader("exact", {"city": "Paris", "population": "2M"}), run).passed
    assert plain_check(Grader("contains", ['"city": "Paris"']), run).passed


def test_a_run_that_did_not_complete_fails_unless_a_status_check_expects_it() -> None:
    case = Case("c", "hi", graders=(Grader("contains", ["x"]),))
    failed = Trajectory("failed", None, error="budget exceeded")
    assert verdict(case, failed, [plain_check(Grader("max_steps", 9), failed)])["passed"] is False
    expected = verdict(case, failed, [plain_check(Grader("status", "failed"), failed)])
    assert expected["passed"] is True and expected["status"] == "failed"


def grade(passed: bool, cost: float = 0.01, latency: float = 1.0,
          status: str = "completed") -> dict[str, Any]:
    checks = [{"grader": "contains", "passed": passed, "detail": "" if passed else "missing"}]
    return {"passed": passed, "checks": checks, "cost_usd": cost, "latency_s": latency,
            "grader_cost_usd": 0.001, "status": status, "error": None}


def record(repeat: int = 2) -> EvalRecord:
    cases = (Case("steady", "a", tags=("core",)), Case("flaky", "b", tags=("core",)),
             Case("broken", "c"), Case("pending", "d"))
    return EvalRecord("e1", "crew", Dataset("set", cases), "v" * 64, repeat=repeat)


def test_a_report_counts_pass_rates_flaky_cases_tags_and_distributions() -> None:
    runs = [CaseRun("e1", "steady", 1, "r1", grade(True, 0.01, 1.0)),
            CaseRun("e1", "steady", 2, "r2", grade(True, 0.03, 3.0)),
            CaseRun("e1", "flaky", 1, "r3", grade(True, 0.02, 2.0)),
            CaseRun("e1", "flaky", 2, "r4", grade(False, 0.02, 2.0)),
            CaseRun("e1", "broken", 1, "r5", grade(False, 0.0, 0.5, status="failed")),
            CaseRun("e1", "pending", 1, "r6", None)]
    found = report(record(), runs)
    assert found["totals"] == {"case_runs": 8, "started": 6, "graded": 5, "passed": 3,
                               "failed": 2, "pass_rate": 0.6, "flaky": 1, "complete": False}
    assert found["tags"] == {"core": {"passed": 3, "graded": 4, "pass_rate": 0.75}}
    assert found["cost_usd"]["total"] == pytest.approx(0.08)
    assert found["latency_s"]["max"] == 3.0 and found["latency_s"]["p50"] == 2.0
    assert found["grader_cost_usd"] == pytest.approx(0.005)
    cases = {c["case_id"]: c for c in found["cases"]}
    assert cases["flaky"]["flaky"] and not cases["steady"]["flaky"]
    assert cases["broken"]["failures"] == ["run failed", "contains: missing"]
    assert cases["pending"]["run_ids"] == ["r6"] and cases["pending"]["graded"] == 0


def test_compare_names_fixed_broken_and_flaky_cases() -> None:
    base = report(record(1), [CaseRun("e1", "steady", 1, "a", grade(True)),
                              CaseRun("e1", "flaky", 1, "b", grade(True)),
                              CaseRun("e1", "broken", 1, "c", grade(True)),
                              CaseRun("e1", "pending", 1, "d", grade(False))])
    other = EvalRecord("e2", "crew", Dataset("set", record().dataset.cases[:3]), "w" * 64,
                       repeat=2)
    candidate = report(other, [CaseRun("e2", "steady", 1, "e", grade(True, cost=0.02)),
                               CaseRun("e2", "steady", 2, "f", grade(True, cost=0.02)),
                               CaseRun("e2", "flaky", 1, "g", grade(True)),
                               CaseRun("e2", "flaky", 2, "h", grade(False)),
                               CaseRun("e2", "broken", 1, "i", grade(False)),
                               CaseRun("e2", "broken", 2, "j", grade(False))])
    found = compare(base, candidate)
    assert found["changes"] == {"fixed": 0, "broken": 1, "flaky": 1, "same": 1,
                                "not_graded": 0}
    assert {row["case_id"]: row["change"] for row in found["cases"]} == {
        "steady": "same", "flaky": "flaky", "broken": "broken"}
    assert found["only_in_a"] == ["pending"] and found["only_in_b"] == []
    assert found["same_dataset"] is False
    assert found["pass_rate"] == {"a": 0.75, "b": 0.5, "delta": -0.25}
    assert found["cost_usd"]["delta_total"] == pytest.approx(0.08 - 0.04)
    assert compare(candidate, base)["changes"]["broken"] == 0


def test_exact_says_where_two_texts_first_differ() -> None:
    run = Trajectory("completed", "Here is what I found:\n- lookup: tides\n- count: 3")
    check = plain_check(Grader("exact", "Here is what I found:\n- lookup: tides\n"), run)
    assert not check.passed
    assert check.detail == ("differs at character 38: expected '… what I found:\\n- lookup: "
                            "tides', got '… what I found:\\n- lookup: tides\\n- count: 3'")
