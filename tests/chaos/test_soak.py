"""The soak with kills, CI-sized: two worker processes, at least ten SIGKILLs at random moments,
workflow runs started until the kills are done; then the log must show every run finished with
the output of an uninterrupted run, nothing recorded twice, and only the work in flight at each
kill done again. The long mode is ``python -m tests.chaos.soak`` (docs/guides/reliability.md).

``TOREN_SOAK_SEED`` replays a kill schedule (the seed is in the failure message).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.invariants import Findings, Kill, check_model_calls, check_tools
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


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_soak_with_kills_holds_on_sqs(database_url: str, tmp_path: Path,
                                          sqs_env: dict[str, str]) -> None:
    # the same soak with TOREN_QUEUE=sqs (moto server): messages leave through each worker's
    # outbox relay, a killed worker's received messages come back after their visibility
    # timeout, and a kill between commit and send leaves the send to another relay
    seed = os.environ.get("TOREN_SOAK_SEED")
    config = SoakConfig(runs=12, workers=2, kills=8, mean_kill_interval=1.5, model_delay=0.1,
                        lease_ttl=1.0, concurrency=4, deadline=200,
                        seed=int(seed) if seed else None)
    result = run_soak(config, database_url, tmp_path,
                      worker_extra_env={"TOREN_QUEUE": "sqs"} | sqs_env)
    figures = result.figures
    print(summary(result))
    print(json.dumps({"queue": "sqs"} | figures))
    assert result.violations == [], summary(result)
    assert figures["kills"] >= config.kills
    assert figures["lost"] == 0
    assert figures["duplicated"] == 0
    bound = figures["kills"] * config.concurrency
    assert figures["repaid_calls"] <= bound + figures["repeats_without_kill"]
    assert figures["tool_reexecutions"] <= bound
    assert figures["busy_kills"] >= 1


# -- the soak's checks catch what they are meant to catch (no database needed; the log checks
# they build on are tested in tests/unit/test_log_invariants.py) ----------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def task_events(*specs: tuple[str, dict[str, Any]], stream: str = "task:w1-0") -> list[Event]:
    """A task's events, one a second from ``T0``; the first is its ``TaskStarted``."""
    specs = (("TaskStarted", {"model": "toren/scripted", "input": "x"}), *specs)
    return [Event("r1", stream, seq, kind, data, T0 + timedelta(seconds=seq))
            for seq, (kind, data) in enumerate(specs, 1)]


def calls_at(*seconds: float) -> list[dict[str, Any]]:
    """Call-log lines of calls of the first step (one message), ``seconds`` after ``T0``."""
    return [{"pid": 1, "model": "toren/scripted", "call": i, "messages": 1,
             "at": (T0 + timedelta(seconds=second)).timestamp()}
            for i, second in enumerate(seconds)]


def a_kill(*streams: tuple[str, str]) -> Kill:
    now = datetime.now(UTC)
    return Kill("w", 1, now, now, list(streams))


def test_a_repaid_call_must_be_announced_marked_and_explained_by_kills() -> None:
    repeated = task_events(("ModelCallStarted", {"step": 1}), ("ModelCallStarted", {"step": 1}),
                           ("ModelCallCompleted", {"step": 1, "repeated": True}))
    findings = Findings()
    check_model_calls({"r1": repeated}, calls_at(2.5, 3.5), [a_kill(("r1", "task:w1-0"))], 4,
                      findings)
    assert findings.violations == []
    assert findings.figures["repaid_calls"] == 1 and findings.figures["repeats_without_kill"] == 0

    unmarked = task_events(("ModelCallStarted", {"step": 1}), ("ModelCallStarted", {"step": 1}),
                           ("ModelCallCompleted", {"step": 1, "repeated": False}))
    findings = Findings()
    check_model_calls({"r1": unmarked}, calls_at(2.5, 3.5), [a_kill()], 4, findings)
    assert len(findings.violations) == 1 and "repeated=False" in findings.violations[0]

    findings = Findings()  # a call made after its step completed, and no kill at all
    check_model_calls({"r1": repeated}, calls_at(2.5, 3.5, 4.5), [], 4, findings)
    assert len(findings.violations) == 3
    assert "call-log line 3" in findings.violations[0]
    assert "outside every announced attempt" in findings.violations[0]
    assert "without being recorded first" in findings.violations[1]
    assert "more than 0 kills" in findings.violations[2]
    assert findings.figures["repeats_without_kill"] == 1
    assert findings.figures["calls_outside_attempts"] == 1


def test_a_tool_call_must_run_at_least_once_and_again_only_after_kills() -> None:
    def started(call: str, key: str) -> tuple[str, dict[str, Any]]:
        return "ToolCallStarted", {"step": 1, "call_id": call, "idempotency_key": key,
                                   "epoch": 1}

    events = task_events(started("c1", "k1"), started("c2", "k2"),
                         ("ToolCallCompleted", {"step": 1, "call_id": "c1", "epoch": 2,
                                                "error_kind": None}))
    findings = Findings()
    check_tools({"r1": events}, ["k1", "k1", "k3"], [], 4, findings)
    assert findings.figures["tool_reexecutions"] == 1
    # k1 ran again under epoch 2, which the log allows; but no kill explains it
    assert [v.split(":")[-1].strip() for v in findings.violations] == [
        "tool call k2 is in the log but never executed",
        "tool call k3 executed 1 times but no ToolCallStarted records it",
        "tools re-executed 1 times, more than 0 kills x concurrency 4 explain"]
    findings = Findings()
    check_tools({"r1": events}, ["k1", "k1", "k1", "k2"], [a_kill(), a_kill()], 4, findings)
    assert len(findings.violations) == 1 and "the log allows 2" in findings.violations[0]
