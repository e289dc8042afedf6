"""The soak with kills, CI-sized: two worker processes, at least ten SIGKILLs at random moments,
workflow runs started until the kills are done; then the log must show every run finished with
the output of an uninterrupted run, nothing recorded twice, and only the work in flight at each
kill done again. The long mode is ``python -m tests.chaos.soak`` (docs/guides/reliability.md).

``TOREN_SOAK_SEED`` replays a kill schedule (the seed is in the failure message).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.invariants import (
    Findings,
    Kill,
    check_model_calls,
    check_tools,
    duplicates_in_run,
)
from tests.chaos.soak import SoakConfig, run_soak, summary
from toren.core.events import Event


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_soak_with_kills_loses_nothing_and_repays_only_what_the_kills_explain(
        database_url: str, tmp_path: Path) -> None:
    seed = os.environ.get("TOREN_SOAK_SEED")
    config = SoakConfig(runs=20, workers=2, kills=10, mean_kill_interval=1.5, model_delay=0.1,
                        lease_ttl=1.0, concurrency=4, deadline=200,
                        seed=int(seed) if seed else None)
    result = run_soak(config, database_url, tmp_path)
    figures = result.figures
    print(summary(result))
    print(json.dumps(figures))
    assert result.violations == [], summary(result)
    assert figures["kills"] >= config.kills
    assert figures["runs"] >= config.runs
    assert figures["lost"] == 0
    assert figures["duplicated"] == 0
    bound = figures["kills"] * config.concurrency
    assert figures["model_calls_completed"] <= figures["model_calls"]
    # on a loaded machine a worker may stall past its 1 s lease and be taken over: that
    # repays its call as well (marked repeated, counted apart)
    assert figures["repaid_calls"] <= bound + figures["repeats_without_kill"]
    assert figures["tool_reexecutions"] <= bound
    # the kills hit work in progress, and that work was picked up again
    assert figures["busy_kills"] >= 1
    assert figures["recovered_kills"] >= 1 and figures["recovery_p99_s"] is not None


# -- the checks catch what they are meant to catch (no database needed) ----------------------

def task_events(*specs: tuple[str, dict[str, Any]], stream: str = "task:w1-0") -> list[Event]:
    return [Event("r1", stream, seq, kind, data) for seq, (kind, data) in enumerate(specs, 1)]


def a_kill(*streams: tuple[str, str]) -> Kill:
    now = datetime.now(UTC)
    return Kill("w", 1, now, now, list(streams))


def test_a_fact_recorded_twice_is_found() -> None:
    events = task_events(("TaskStarted", {}), ("ModelCallCompleted", {"step": 1}),
                         ("ModelCallCompleted", {"step": 1}), ("TaskFinished", {}),
                         ("TaskFinished", {}))
    assert duplicates_in_run(events) == [
        "task:w1-0: TaskFinished recorded more than once",
        "task:w1-0: model call step 1 completed 2 times"]
    run = [Event("r1", "run", 1, "WaveStarted", {"wave": 1}),
           Event("r1", "run", 2, "WaveStarted", {"wave": 1})]
    assert duplicates_in_run(run) == ["run stream: WaveStarted wave=1 recorded more than once"]


def test_a_repaid_call_must_be_announced_marked_and_explained_by_kills() -> None:
    repeated = task_events(("ModelCallStarted", {"step": 1}), ("ModelCallStarted", {"step": 1}),
                           ("ModelCallCompleted", {"step": 1, "repeated": True}))
    findings = Findings()
    check_model_calls({"r1": repeated}, 2, [a_kill(("r1", "task:w1-0"))], 4, findings)
    assert findings.violations == []
    assert findings.figures["repaid_calls"] == 1 and findings.figures["repeats_without_kill"] == 0

    unmarked = task_events(("ModelCallStarted", {"step": 1}), ("ModelCallStarted", {"step": 1}),
                           ("ModelCallCompleted", {"step": 1, "repeated": False}))
    findings = Findings()
    check_model_calls({"r1": unmarked}, 2, [a_kill()], 4, findings)
    assert len(findings.violations) == 1 and "repeated=False" in findings.violations[0]

    findings = Findings()  # a call made that no ModelCallStarted announced, and no kill at all
    check_model_calls({"r1": repeated}, 3, [], 4, findings)
    assert len(findings.violations) == 2
    assert "without being recorded first" in findings.violations[0]
    assert "more than 0 kills" in findings.violations[1]
    assert findings.figures["repeats_without_kill"] == 1


def test_a_tool_call_must_run_at_least_once_and_again_only_after_kills(tmp_path: Path) -> None:
    events = task_events(("ToolCallStarted", {"call_id": "c1", "idempotency_key": "k1"}),
                         ("ToolCallStarted", {"call_id": "c2", "idempotency_key": "k2"}))
    effects = tmp_path / "effects.log"
    effects.write_text("k1\nk1\nk3\n")
    findings = Findings()
    check_tools({"r1": events}, effects, [], 4, findings)
    assert findings.figures["tool_reexecutions"] == 1
    assert [v.split(":")[-1].strip() for v in findings.violations] == [
        "tool call k2 is in the log but never executed",
        "tool call k3 executed but no ToolCallStarted records it",
        "tools re-executed 1 times, more than 0 kills x concurrency 4 explain"]
