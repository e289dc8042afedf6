"""Evals on real Postgres: case runs are ordinary durable runs of the agent pinned to the
eval's version, graded by every kind of grader (a rubric's model cost kept apart from the
case's), a second ``work`` changes nothing, and a model override is a version of its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toren.agents.candidates import with_model
from toren.core import events as ev
from toren.core.eval_cases import Case, Dataset, Grader
from toren.core.messages import ModelResponse
from toren.errors import ConfigError, EvalNotFound
from toren.host.services.evals import EvalsService
from toren.testing import ScriptedModel, write_agent_dir

TOOLS = '''
def word_count(text: str) -> int:
    """Count the words in a piece of text.

    Args:
        text: The text to count.
    """
    return len(text.split())
'''
EVALS_PY = '''
def mentions_count(output, expected):
    return (str(expected) in output, f"looked for {expected}")


def half(output):
    return 0.5


def explodes(output):
    raise RuntimeError("grader bug")
'''


def dataset() -> Dataset:
    return Dataset("smoke", (
        Case("counted", "one two three", expected=3,
             graders=(Grader("function", "mentions_count"), Grader("tools_called",
                                                                   ["word_count"]))),
        Case("rubric", "hello there", graders=(Grader("rubric", "Greets the user"),
                                               Grader("max_steps", 5))),
        Case("scored", "x", graders=(Grader("function", "half"),)),
        Case("buggy", "y", graders=(Grader("function", "explodes"),)),
        Case("too-many-steps", "z", graders=(Grader("max_steps", 1),), tags=("strict",)),
    ))


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    return write_agent_dir(tmp_path, "graded", tools_py=TOOLS, version="1.0")


async def test_an_eval_runs_every_case_as_a_pinned_run_and_grades_it(
        toren_runtime: Any, agent: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_SCRIPTED_COST_USD", "0.01")
    (tmp_path / "evals.py").write_text(EVALS_PY)
    runtime = await toren_runtime([agent])
    record = await runtime.evals.create(dataset(), "graded", repeat=2, concurrency=3,
                                        grader_model="toren/scripted",
                                        functions=str(tmp_path / "evals.py"))
    assert record.version == runtime.agents["graded"].version.hash
    seen: list[int] = []
    found = await runtime.evals.work(record.id, progress=lambda p: seen.append(p.graded))
    assert seen[0] == 0 and seen[-1] == 10 and sorted(seen) == seen

    cases = {c["case_id"]: c for c in found["cases"]}
    assert {case: (c["passed"], c["graded"]) for case, c in cases.items()} == {
        "counted": (2, 2), "rubric": (2, 2), "scored": (2, 2), "buggy": (0, 2),
        "too-many-steps": (0, 2)}
    assert cases["buggy"]["failures"] == [
        "function: explodes raised RuntimeError: grader bug"]
    assert cases["too-many-steps"]["failures"] == ["max_steps: 2 steps > 1"]
    assert found["totals"]["pass_rate"] == 0.6 and found["totals"]["complete"]
    assert found["tags"] == {"strict": {"passed": 0, "graded": 2, "pass_rate": 0.0}}
    # every case run: two model calls (the tool, then the answer) at $0.01; each rubric
    # grade one call of its own, counted apart
    assert found["cost_usd"]["total"] == pytest.approx(10 * 0.02)
    assert found["grader_cost_usd"] == pytest.approx(2 * 0.01)
    assert found["eval"]["status"] == "finished"

    # each case run is an ordinary run of the agent, on the eval's version
    run_ids = [rid for c in found["cases"] for rid in c["run_ids"]]
    assert len(set(run_ids)) == 10
    for run_id in run_ids:
        run = await runtime.get_run(run_id)
        assert (run.agent, run.agent_version) == ("graded", record.version)
        assert run.idempotency_key.startswith(f"eval:{record.id}:")
    graded = await runtime.store.case_runs(record.id)
    rubric = next(r.grade for r in graded if r.case_id == "rubric")
    assert rubric["checks"][0]["cost_usd"] == pytest.approx(0.01)
    assert rubric["cost_usd"] == pytest.approx(0.02)

    # working it again starts nothing and grades nothing again
    again = await runtime.evals.work(record.id)
    assert again["cases"] == found["cases"]
    assert len(await runtime.list_runs(agent="graded", limit=100)) == 10
    assert [r.graded_at for r in await runtime.store.case_runs(record.id)] == [
        r.graded_at for r in graded]
    listed = await runtime.evals.list(agent="graded")
    assert [e.id for e in listed] == [record.id]
    with pytest.raises(EvalNotFound):
        await runtime.evals.report("not-an-id")


async def test_a_model_override_is_a_version_of_its_own(toren_runtime: Any, agent: Path,
                                                         tmp_path: Path) -> None:
    original = await toren_runtime([agent])
    with pytest.raises(ConfigError, match=r"there is no evals\.py"):
        await original.evals.create(dataset(), "graded", grader_model="toren/scripted")
    (tmp_path / "evals.py").write_text(EVALS_PY)
    base = await original.evals.create(dataset(), "graded", grader_model="toren/scripted",
                                       functions=str(tmp_path / "evals.py"))
    (tmp_path / "evals.py").unlink()  # gone before the eval works: it fails before running
    copy = with_model(agent, "toren/scripted-other", tmp_path / "copies")
    other = await toren_runtime([copy])
    record = await other.evals.create(Dataset("one", dataset().cases[4:]), "graded",
                                      model="toren/scripted-other")
    assert record.version != base.version
    assert record.human_version == "1.0"
    with pytest.raises(ConfigError, match=r"there is no evals\.py"):  # its version, loaded
        await other.evals.work(base.id)
    with pytest.raises(ConfigError, match=r"there is no evals\.py"):  # before any case runs
        await original.evals.work(base.id)
    assert await original.list_runs(agent="graded") == []
    found = await other.evals.work(record.id)
    (run_id,) = found["cases"][0]["run_ids"]
    models = {e.data["model"] for e in await other.events(run_id)
              if e.type == ev.MODEL_CALL_COMPLETED}
    assert models == {"toren/scripted-other"}
    assert found["eval"]["model"] == "toren/scripted-other"


async def test_a_rubric_verdict_and_its_cost_come_from_the_grading_model(
        toren_runtime: Any, agent: Path) -> None:
    runtime = await toren_runtime([agent])
    verdict = json.dumps({"passed": False, "score": 0.2, "reason": "no greeting"})
    grader = ScriptedModel("toren/judge", script=[ModelResponse(text=verdict)], cost_usd=0.5)
    service = EvalsService(runtime.store, runtime.store, runtime.store,
                           runtime.agents, start_run=lambda a, i, k:
                           runtime.start_run(a, i, idempotency_key=k),
                           get_run=runtime.get_run, run_events=runtime.run_events,
                           totals=runtime.runs.totals, model=lambda _model: grader)
    record = await service.create(Dataset("r", (Case("g", "hi", graders=(
        Grader("rubric", "Greets", model="toren/judge"),)),)), "graded")
    found = await service.work(record.id)
    case = found["cases"][0]
    assert (case["passed"], case["failures"]) == (0, ["rubric: toren/judge: no greeting"])
    assert found["grader_cost_usd"] == 0.5 and found["cost_usd"]["total"] == 0.0
    with pytest.raises(ConfigError, match="--grader-model"):
        await runtime.evals.create(Dataset("r", (Case("g", "hi", graders=(
            Grader("rubric", "Greets"),)),)), "graded")
    with pytest.raises(ConfigError, match="--repeat must be 1 to 100"):
        await runtime.evals.create(dataset(), "graded", repeat=0)


async def test_the_research_crew_example_compares_two_versions(toren_runtime: Any) -> None:
    from toren.agents.datasets import load_dataset

    example = Path(__file__).parents[2] / "contrib" / "examples" / "research-crew"
    cases = load_dataset(example / "evals" / "cases.yaml")
    functions = str(example / "evals" / "evals.py")
    reports = []
    for directory in (example, example / "evals" / "candidate"):
        runtime = await toren_runtime([directory])
        record = await runtime.evals.create(cases, "research-crew", functions=functions)
        reports.append(await runtime.evals.work(record.id))
    current, candidate = reports
    assert candidate["eval"]["human_version"] == "2.0"
    assert current["totals"]["pass_rate"] == candidate["totals"]["pass_rate"] == 0.8571
    found = await runtime.evals.compare(current["eval"]["id"], candidate["eval"]["id"])
    assert {row["case_id"]: row["change"] for row in found["cases"]
            if row["change"] != "same"} == {"brief": "fixed", "counts-words": "broken"}


async def test_recorded_runs_replayed_fresh_and_by_fork_on_a_candidate(
        toren_runtime: Any, tmp_path: Path) -> None:
    from toren.core.evals import fork_run_id
    from toren.core.run_search import parse_run_search

    example = Path(__file__).parents[2] / "contrib" / "examples" / "research-crew"
    current = await toren_runtime([example])
    recorded = [await current.start_run("research-crew", topic)
                for topic in ("postgres", "event sourcing")]
    for run_id in recorded:
        assert (await current.wait_for_run(run_id, timeout_s=30)).status == "completed"
    candidate = await toren_runtime([example / "evals" / "candidate"])
    search = parse_run_search({}, agents=("research-crew",), status="completed", limit=10)
    cases = await candidate.evals.runs_dataset(search, name="recorded")
    assert sorted(c.from_run for c in cases.cases) == sorted(recorded)
    assert all(c.expected and c.graders[0].kind == "exact" for c in cases.cases)

    # fresh runs of the recorded inputs: the candidate answers without its word count
    fresh = await candidate.evals.create(cases, "research-crew")
    report = await candidate.evals.work(fresh.id)
    assert report["totals"]["passed"] == 0
    assert all(c["failures"][0].startswith("exact: differs at character")
               for c in report["cases"])
    # the eval's own runs are never taken for recorded ones
    again = await candidate.evals.runs_dataset(search, name="again")
    assert again.hash == cases.hash

    # forks at step 1 on the candidate; one made before a crash is found, not made again
    forks = await candidate.evals.create(cases, "research-crew", fork_at=1)
    first = cases.cases[0]
    premade = fork_run_id(forks.id, first.id, 1)
    await candidate.store.claim_case_run(forks.id, first.id, 1)
    await candidate.forks.fork(first.from_run, 1, fork_id=premade)  # the crash's leftover
    report = await candidate.evals.work(forks.id)
    runs = {c["case_id"]: c["run_ids"][0] for c in report["cases"]}
    assert runs[first.id] == premade
    candidate_version = candidate.agents["research-crew"].version.hash
    for case in cases.cases:
        fork = await candidate.get_run(runs[case.id])
        assert (await candidate.forks.fork_of(fork.id))["source_run_id"] == case.from_run
        if fork.id != premade:
            assert fork.agent_version == candidate_version
    assert len(await candidate.list_runs(agent="research-crew", limit=100)) == 2 + 2 + 2
    with pytest.raises(ConfigError, match="--fork-at replays recorded runs"):
        await candidate.evals.create(Dataset("x", (Case("c", "hi"),)), "research-crew",
                                     fork_at=1)
    too_far = await candidate.evals.create(cases, "research-crew", fork_at=99)
    failed = await candidate.evals.work(too_far.id)
    assert all(c["run_ids"] == [None] and c["failures"][0].startswith("run not_run")
               for c in failed["cases"])


async def test_structured_output_is_graded_by_its_schema(toren_runtime: Any,
                                                         tmp_path: Path) -> None:
    schema = {"type": "object", "additionalProperties": False, "required": ["topic", "facts"],
              "properties": {"topic": {"type": "string"},
                             "facts": {"type": "array", "items": {"type": "string"}}}}
    agent = write_agent_dir(tmp_path, "structured", output=schema)
    runtime = await toren_runtime([agent])
    stricter = {**schema, "properties": {**schema["properties"],
                                         "topic": {"enum": ["moon"]}}}
    cases = Dataset("structured", (
        Case("shape", "tides", graders=(Grader("schema", schema),)),
        Case("on-topic", "tides", graders=(Grader("schema", stricter),)),
        Case("topic", "moon", graders=(Grader("contains", ['"topic": "moon"']),))))
    record = await runtime.evals.create(cases, "structured")
    found = {c["case_id"]: c for c in (await runtime.evals.work(record.id))["cases"]}
    assert found["shape"]["passed"] == 1
    assert found["on-topic"]["failures"] == ["schema: topic: 'tides' is not one of ['moon']"]
    assert found["topic"]["passed"] == 1
    graded = {r.case_id: r.grade for r in await runtime.store.case_runs(record.id)}
    assert graded["shape"]["output"] == {"topic": "tides", "facts": ["tides"]}


async def test_a_run_made_just_before_a_crash_is_found_not_made_again(
        toren_runtime: Any, agent: Path) -> None:
    from toren.core.evals import idempotency_key

    runtime = await toren_runtime([agent])
    cases = Dataset("one", (Case("only", "hello", graders=(Grader("contains", ["hello"]),)),))
    record = await runtime.evals.create(cases, "graded", repeat=2)
    # the process died after creating repeat 1's run and before keeping its id
    await runtime.store.claim_case_run(record.id, "only", 1)
    orphan = await runtime.start_run("graded", "hello",
                                     idempotency_key=idempotency_key(record.id, "only", 1))
    found = await runtime.evals.work(record.id)
    run_ids = found["cases"][0]["run_ids"]
    assert run_ids[0] == orphan and len(set(run_ids)) == 2
    assert len(await runtime.list_runs(agent="graded", limit=10)) == 2
