"""Evals as values: an eval's record, its case runs and their grades, the checks that need no
I/O (exact, contains, regex, JSON Schema, trajectory), and the report and comparison computed
from the grades (docs/guides/evals.md). The host runs cases and calls ``evals.py`` functions
and rubric models; everything here is pure."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from toren.core import events as ev
from toren.core.eval_cases import Case, Dataset, Grader
from toren.core.runs import RunRecord, RunTotals

#: An eval's statuses: cases still to run or grade, or every case graded.
EVAL_STATUSES = ("running", "finished")
#: Pass rates are compared to this many decimals (``--fail-under``).
RATE_DIGITS = 4


@dataclass(frozen=True)
class EvalRecord:
    """An eval: ``dataset`` (its cases, kept whole) run ``repeat`` times each against
    ``agent`` at ``version`` (the definition's hash; ``human_version`` from its agent.yaml),
    with ``model`` instead of the agent's when set, ``concurrency`` runs at a time; rubric
    graders without a model of their own use ``grader_model``."""

    id: str
    agent: str
    dataset: Dataset
    version: str
    human_version: str | None = None
    model: str | None = None
    repeat: int = 1
    concurrency: int = 4
    grader_model: str | None = None
    status: str = "running"
    created_at: datetime | None = None
    finished_at: datetime | None = None
    #: Where the agent's definition came from (``--dir`` or ``--version``), for people.
    source: str = ""
    #: The ``evals.py`` whose functions grade ``function:`` graders (its path on the machine
    #: that started the eval), if any.
    functions: str | None = None
    #: Replays by fork: each case made from a recorded run (``Case.from_run``) runs as a fork
    #: of that run at this step, on the eval's version (``None``: a fresh run of its input).
    fork_at: int | None = None
    #: Started over HTTP: any server serving the agent goes on with it after a restart,
    #: under a lease (``EvalStore.claim_eval_leases``); the CLI's are resumed by hand.
    auto_resume: bool = False

    def to_json(self, *, cases: bool = False) -> dict[str, Any]:
        """The eval's JSON (``GET /evals/{id}``'s ``eval``); ``cases``: with the dataset's
        cases, else only its name, hash and size."""
        dataset: dict[str, Any] = {"name": self.dataset.name, "hash": self.dataset.hash,
                                   "cases": len(self.dataset.cases)}
        if cases:
            dataset["items"] = [case.to_json() for case in self.dataset.cases]
        return {"id": self.id, "agent": self.agent, "dataset": dataset,
                "version": self.version, "human_version": self.human_version,
                "model": self.model, "repeat": self.repeat, "concurrency": self.concurrency,
                "grader_model": self.grader_model, "status": self.status,
                "source": self.source, "functions": self.functions, "fork_at": self.fork_at,
                "auto_resume": self.auto_resume,
                "created_at": _iso(self.created_at), "finished_at": _iso(self.finished_at)}


@dataclass(frozen=True)
class CaseRun:
    """One run of one case: repeat ``repeat`` (1-based) of case ``case_id`` in eval
    ``eval_id``, its durable run (``run_id``: ``None`` between the claim and the run's
    creation) and its ``grade`` once graded (``None`` before)."""

    eval_id: str
    case_id: str
    repeat: int
    run_id: str | None = None
    grade: dict[str, Any] | None = None
    created_at: datetime | None = None
    graded_at: datetime | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.case_id, self.repeat)

    def to_json(self) -> dict[str, Any]:
        return {"case_id": self.case_id, "repeat": self.repeat, "run_id": self.run_id,
                "grade": self.grade, "created_at": _iso(self.created_at),
                "graded_at": _iso(self.graded_at)}


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def idempotency_key(eval_id: str, case_id: str, repeat: int) -> str:
    """The run's idempotency key for repeat ``repeat`` of case ``case_id`` of an eval: the
    agent's runs table holds each key once, so a resumed eval finds the run instead of
    starting a second."""
    return f"eval:{eval_id}:{repeat}:{case_id}"


#: The namespace of the ids of forks an eval makes (``fork_run_id``).
_FORKS = uuid.UUID("5b7c1c1e-3f0e-4d6b-9a51-7f0f3e3d2a10")


def fork_run_id(eval_id: str, case_id: str, repeat: int) -> str:
    """The id of the fork that replays repeat ``repeat`` of case ``case_id`` (``fork_at``):
    decided before the fork is made, the same on every try, so a resumed eval finds the fork
    (a run id is made once) instead of making a second."""
    return str(uuid.uuid5(_FORKS, idempotency_key(eval_id, case_id, repeat)))


# -- what a run did ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trajectory:
    """What a case's run did, as the graders see it: how it ended, its output (and the text
    the checks read), the tools it called in order, its steps, model calls, cost and
    latency (seconds from creation to its end)."""

    status: str
    output: Any
    tools: tuple[str, ...] = ()
    steps: int = 0
    model_calls: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    error: str | None = None

    @property
    def text(self) -> str:
        """The output as text: as it is when it is text, else as JSON."""
        if isinstance(self.output, str):
            return self.output
        return "" if self.output is None else json.dumps(self.output, ensure_ascii=False)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "output": self.output, "tools": list(self.tools),
                "steps": self.steps, "model_calls": self.model_calls,
                "cost_usd": round(self.cost_usd, 10), "latency_s": round(self.latency_s, 3),
                "error": self.error}


def trajectory(record: RunRecord, events: Sequence[ev.Event], totals: RunTotals) -> Trajectory:
    """The ``Trajectory`` of a finished run from its row, its events and its totals."""
    tools = tuple(str(e.data.get("name")) for e in events if e.type == ev.TOOL_CALL_STARTED)
    latency = 0.0
    if record.created_at is not None and record.finished_at is not None:
        latency = max(0.0, (record.finished_at - record.created_at).total_seconds())
    error = None
    if record.error:
        error = str(record.error.get("message") or record.error.get("code") or record.error)
    return Trajectory(record.status, record.output, tools, totals.steps, totals.model_calls,
                      totals.cost_usd, latency, error)


# -- checks without I/O --------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One grader's verdict on a case run: ``passed``, why (``detail``) and, for graders that
    score, ``score`` (0..1)."""

    grader: str
    passed: bool
    detail: str = ""
    score: float | None = None
    #: What the grader itself cost (a rubric's model call), apart from the case's run.
    cost_usd: float = 0.0

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"grader": self.grader, "passed": self.passed,
                                 "detail": self.detail}
        if self.score is not None:
            found["score"] = self.score
        if self.cost_usd:
            found["cost_usd"] = round(self.cost_usd, 10)
        return found


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _first_difference(expected: str, got: str, context: int = 30) -> str:
    """Where two texts first differ, with a little of each around it."""
    at = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
              min(len(expected), len(got)))
    start = max(0, at - context)

    def around(text: str) -> str:
        piece = text[start:at + context]
        return ("…" if start else "") + piece + ("…" if at + context < len(text) else "")

    if at == 0:
        return f"expected {_short(expected)}, got {_short(got)}"
    return f"differs at character {at + 1}: expected {around(expected)!r}, got {around(got)!r}"


def plain_check(grader: Grader, trajectory: Trajectory) -> Check:
    """The verdict of a grader that needs no I/O (every kind but ``function`` and
    ``rubric``) on a run's trajectory."""
    kind, value = grader.kind, grader.value
    text = trajectory.text
    if kind == "exact":
        if isinstance(value, str):
            passed = text.strip() == value.strip()
            detail = "" if passed else _first_difference(value.strip(), text.strip())
        else:
            passed = trajectory.output == value
            detail = "" if passed else (f"expected {_short(value)}, got "
                                        f"{_short(trajectory.output)}")
        return Check(kind, passed, detail)
    if kind == "contains":
        missing = [item for item in value if item not in text]
        return Check(kind, not missing,
                     f"missing {', '.join(repr(m) for m in missing)}" if missing else "")
    if kind == "regex":
        passed = re.search(value, text) is not None
        return Check(kind, passed, "" if passed else f"no match for /{value}/")
    if kind == "schema":
        return _schema_check(value, trajectory.output)
    if kind == "status":
        passed = trajectory.status == value
        return Check(kind, passed, "" if passed else f"ended {trajectory.status}, expected "
                     f"{value}")
    if kind == "tools_called":
        missing = [name for name in value if name not in trajectory.tools]
        return Check(kind, not missing, f"never called {', '.join(missing)}" if missing else "")
    if kind == "tools_not_called":
        called = [name for name in value if name in trajectory.tools]
        return Check(kind, not called, f"called {', '.join(called)}" if called else "")
    if kind == "max_steps":
        passed = trajectory.steps <= value
        return Check(kind, passed, "" if passed else f"{trajectory.steps} steps > {value}")
    if kind == "max_cost_usd":
        passed = trajectory.cost_usd <= value
        return Check(kind, passed, "" if passed else f"${trajectory.cost_usd:.6f} > ${value}")
    if kind == "max_latency_s":
        passed = trajectory.latency_s <= value
        return Check(kind, passed, "" if passed else f"{trajectory.latency_s:.2f}s > {value}s")
    raise ValueError(f"{kind} is graded by the host")


def _schema_check(schema: dict[str, Any], output: Any) -> Check:
    import jsonschema  # ~0.15 s: only for evals that check a schema

    value = output
    if isinstance(output, str):
        try:
            value = json.loads(output)
        except ValueError:
            return Check("schema", False, "the output is not JSON")
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(value))
    if error is None:
        return Check("schema", True)
    where = "/".join(str(p) for p in error.absolute_path) or "the output"
    return Check("schema", False, f"{where}: {error.message}")


def verdict(case: Case, trajectory: Trajectory, checks: Sequence[Check]) -> dict[str, Any]:
    """A case run's grade: it passes when every check passes and the run completed (or ended
    as its ``status:`` check expects). With the trajectory and the graders' own cost."""
    ended_as_expected = (any(c.grader == "status" for c in checks)
                         or trajectory.status == "completed")
    passed = ended_as_expected and all(c.passed for c in checks)
    scores = [c.score for c in checks if c.score is not None]
    return {"passed": passed,
            "score": round(sum(scores) / len(scores), 4) if scores else (1.0 if passed else 0.0),
            "checks": [c.to_json() for c in checks],
            "grader_cost_usd": round(sum(c.cost_usd for c in checks), 10),
            "tags": list(case.tags), **trajectory.to_json()}


# -- reports -------------------------------------------------------------------------------------


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def distribution(values: Sequence[float]) -> dict[str, float]:
    """``min``, ``p50``, ``p90``, ``max``, ``mean`` and ``total`` of ``values`` (zeros when
    there are none)."""
    if not values:
        return {"min": 0.0, "p50": 0.0, "p90": 0.0, "max": 0.0, "mean": 0.0, "total": 0.0}
    return {"min": round(min(values), 6), "p50": round(_percentile(values, 0.5), 6),
            "p90": round(_percentile(values, 0.9), 6), "max": round(max(values), 6),
            "mean": round(sum(values) / len(values), 6), "total": round(sum(values), 6)}


@dataclass
class CaseSummary:
    """One case over its repeats: how many passed, whether it is flaky (some repeats passed
    and some failed), its runs and its latest failing checks."""

    case_id: str
    tags: tuple[str, ...]
    runs: int = 0
    graded: int = 0
    passed: int = 0
    run_ids: list[str | None] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    cost_usd: float = 0.0
    from_run: str | None = None

    @property
    def flaky(self) -> bool:
        return 0 < self.passed < self.graded

    @property
    def pass_rate(self) -> float:
        return round(self.passed / self.graded, RATE_DIGITS) if self.graded else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"case_id": self.case_id, "tags": list(self.tags), "runs": self.runs,
                "graded": self.graded, "passed": self.passed, "pass_rate": self.pass_rate,
                "flaky": self.flaky, "run_ids": self.run_ids, "failures": self.failures,
                "cost_usd": round(self.cost_usd, 10), "from_run": self.from_run}


def report(record: EvalRecord, case_runs: Sequence[CaseRun]) -> dict[str, Any]:
    """What ``toren eval report`` shows: the pass rate over every graded case run, by tag,
    each case over its repeats (flaky ones marked), the runs' cost and latency
    distributions and the graders' own cost."""
    by_case: dict[str, CaseSummary] = {
        case.id: CaseSummary(case.id, case.tags, from_run=case.from_run)
        for case in record.dataset.cases}
    costs: list[float] = []
    latencies: list[float] = []
    grader_cost = 0.0
    graded = passed = 0
    tags: dict[str, list[int]] = {}
    for run in sorted(case_runs, key=lambda r: (r.case_id, r.repeat)):
        summary = by_case.get(run.case_id)
        if summary is None:
            continue
        summary.runs += 1
        summary.run_ids.append(run.run_id)
        if run.grade is None:
            continue
        grade = run.grade
        summary.graded += 1
        graded += 1
        costs.append(float(grade.get("cost_usd", 0.0)))
        latencies.append(float(grade.get("latency_s", 0.0)))
        grader_cost += float(grade.get("grader_cost_usd", 0.0))
        summary.cost_usd += float(grade.get("cost_usd", 0.0))
        for tag in summary.tags:
            tags.setdefault(tag, [0, 0])[1] += 1
        if grade.get("passed"):
            summary.passed += 1
            passed += 1
            for tag in summary.tags:
                tags[tag][0] += 1
        else:
            reasons = [f"{c['grader']}: {c['detail']}" if c.get("detail") else c["grader"]
                       for c in grade.get("checks", []) if not c.get("passed")]
            if grade.get("status") != "completed" and not any(
                    c["grader"] == "status" for c in grade.get("checks", [])):
                reasons.insert(0, f"run {grade.get('status')}"
                               + (f": {grade['error']}" if grade.get("error") else ""))
            summary.failures = reasons
    expected = len(record.dataset.cases) * record.repeat
    return {
        "eval": record.to_json(),
        "totals": {"case_runs": expected, "started": len(case_runs), "graded": graded,
                   "passed": passed, "failed": graded - passed,
                   "pass_rate": round(passed / graded, RATE_DIGITS) if graded else 0.0,
                   "flaky": sum(1 for s in by_case.values() if s.flaky),
                   "complete": graded == expected},
        "cost_usd": distribution(costs),
        "latency_s": distribution(latencies),
        "grader_cost_usd": round(grader_cost, 10),
        "tags": {tag: {"passed": p, "graded": g,
                       "pass_rate": round(p / g, RATE_DIGITS) if g else 0.0}
                 for tag, (p, g) in sorted(tags.items())},
        "cases": [s.to_json() for s in by_case.values()],
    }


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """What changed from eval report ``a`` (the baseline) to report ``b`` (the candidate):
    pass rates, cost and latency side by side, and each case both share as ``fixed``
    (failed in ``a``, passes in ``b``), ``broken`` (the reverse), ``flaky`` (in either) or
    unchanged; cases only one has are listed apart. Cases compare by id, repeats by their
    pass rate."""
    cases_a = {c["case_id"]: c for c in a["cases"]}
    cases_b = {c["case_id"]: c for c in b["cases"]}
    rows = []
    counts = {"fixed": 0, "broken": 0, "flaky": 0, "same": 0, "not_graded": 0}
    for case_id in [c for c in cases_a if c in cases_b]:
        left, right = cases_a[case_id], cases_b[case_id]
        if not left["graded"] or not right["graded"]:
            change = "not_graded"
        elif left["flaky"] or right["flaky"]:
            change = "flaky"
        elif left["passed"] == 0 and right["passed"] == right["graded"]:
            change = "fixed"
        elif left["passed"] == left["graded"] and right["passed"] == 0:
            change = "broken"
        else:
            change = "same"
        counts[change] += 1
        rows.append({"case_id": case_id, "change": change,
                     "a": {k: left[k] for k in ("pass_rate", "passed", "graded", "run_ids",
                                                "failures", "cost_usd")},
                     "b": {k: right[k] for k in ("pass_rate", "passed", "graded", "run_ids",
                                                 "failures", "cost_usd")}})
    ta, tb = a["totals"], b["totals"]
    return {
        "a": a["eval"], "b": b["eval"],
        "same_dataset": a["eval"]["dataset"]["hash"] == b["eval"]["dataset"]["hash"],
        "pass_rate": {"a": ta["pass_rate"], "b": tb["pass_rate"],
                      "delta": round(tb["pass_rate"] - ta["pass_rate"], RATE_DIGITS)},
        "cost_usd": {"a": a["cost_usd"], "b": b["cost_usd"],
                     "delta_total": round(b["cost_usd"]["total"] - a["cost_usd"]["total"], 10)},
        "latency_s": {"a": a["latency_s"], "b": b["latency_s"],
                      "delta_p50": round(b["latency_s"]["p50"] - a["latency_s"]["p50"], 6)},
        "grader_cost_usd": {"a": a["grader_cost_usd"], "b": b["grader_cost_usd"]},
        "changes": counts,
        "cases": rows,
        "only_in_a": [c for c in cases_a if c not in cases_b],
        "only_in_b": [c for c in cases_b if c not in cases_a],
    }
