"""Hard budgets through the real task loop, orchestrator and Postgres ledger: a run's budget
holds across twenty parallel tasks, a daily budget across runs, with a warning at 80%."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.durable import check_log
from toren.core.budgets import worst_case_cost, worst_case_input_tokens
from toren.core.pricing import Pricing
from toren.default_plugins.scripted import ScriptedModel
from toren.seams.model import Model, ModelRequest, ModelResponse, Usage
from toren.testing import write_agent_dir

PRICE = Pricing(input_per_mtok=1.0, output_per_mtok=10.0)
PRICING = {"test/costly": {"inputPerMTok": 1.0, "outputPerMTok": 10.0}}
MAX_TOKENS = ModelRequest(model="", system="", messages=()).max_tokens
ECHO = {"echo": "---\ndescription: Repeats its input.\ntools: []\n---\nRepeat the input.\n"}


def costly(delay: float = 0.0) -> ScriptedModel:
    """A model whose every call costs exactly its worst case: as many input tokens as the
    request has bytes and ``max_tokens`` of output (so the budget is spent as fast as it can
    be, and a reservation settles at what it reserved)."""

    def answer(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=f"done: {request.messages[-1].text}", usage=Usage(
            input_tokens=worst_case_input_tokens(request), output_tokens=request.max_tokens))

    return ScriptedModel("test/costly", script=answer, delay=delay)


class Unpriced(Model):
    """Reports a cost after each call but knows no price before one."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        return ModelResponse(text="hi", cost_usd=0.5)


def one_call_cost(prompt: str, user_text: str) -> float:
    from toren.seams.model import Message

    return worst_case_cost(ModelRequest(model="test/costly", system=prompt,
                                        messages=(Message("user", user_text),)), PRICE)


def costs(events: list[Any]) -> list[float]:
    return [e.data["cost_usd"] for e in events if e.type == "ModelCallCompleted"]


async def test_twenty_parallel_tasks_never_spend_more_than_the_run_budget(
        make_runtime, tmp_path: Path) -> None:
    call = one_call_cost("Repeat the input.\n", "10")  # the dearest input of the wave
    budget = round(call * 5.5, 6)  # room for five calls, not six
    directory = write_agent_dir(
        tmp_path, "fanout", model="test/costly", subagents=ECHO, pricing=PRICING,
        limits={"maxBudgetUsd": budget})
    (directory / "workflow.py").write_text('''
async def workflow(ctx):
    results = await ctx.wave([("echo", str(i % 10)) for i in range(20)])
    return ",".join(sorted(r.status for r in results))
''')
    runtime = await make_runtime(dirs=[directory], models={"costly": costly(delay=0.2)},
                                 concurrency=20)
    run_id = await runtime.start_run("fanout", "go")
    record = await runtime.wait_for_run(run_id, timeout_s=60)
    events = await runtime.events(run_id)
    check_log(events)
    assert record.status == "completed", record.error
    spent = costs(events)
    assert sum(spent) <= budget  # the hard guarantee
    assert len(spent) == 5  # and the budget was used: every call that fitted was made
    finished = [e.data for e in events if e.type == "TaskFinished"]
    stopped = [f for f in finished if f["stop_reason"] == "budget_exhausted"]
    assert len(stopped) == 15
    assert {f["error"]["code"] for f in stopped} == {"budget_exhausted"}
    assert {f["error"]["scope"] for f in stopped} == {"run"}
    assert "was not made" in stopped[0]["error"]["message"]
    # every reservation was settled at the recorded cost; nothing is left held
    settled = [e.data for e in events if e.type == "BudgetSettled"]
    assert sorted(s["settled_usd"] for s in settled) == sorted(spent)
    assert len([e for e in events if e.type == "BudgetWarning"]) == 1
    receipt = await runtime.receipt(run_id)
    assert receipt["budget"]["run"]["budget_usd"] == budget
    assert receipt["budget"]["run"]["spent_usd"] == pytest.approx(sum(spent))
    assert receipt["budget"]["held_usd"] == 0
    paid = [c for t in receipt["tasks"] for c in t["model_calls"]]
    assert all(c["settled_usd"] == c["cost_usd"] == c["reserved_usd"] for c in paid)
    assert sum(t["budget"]["reservations"] for t in receipt["tasks"]) == 5


async def test_a_workflow_whose_every_task_the_budget_stopped_ends_stopped_by_it(
        make_runtime, tmp_path: Path) -> None:
    budget = round(one_call_cost("Repeat the input.\n", "1") / 2, 6)  # room for no call
    directory = write_agent_dir(
        tmp_path, "thrifty", model="test/costly", subagents=ECHO, pricing=PRICING,
        limits={"maxBudgetUsd": budget})
    (directory / "workflow.py").write_text('''
async def workflow(ctx):
    results = await ctx.wave([("echo", "1"), ("echo", "2")])
    return ",".join(r.stop_reason for r in results)
''')
    runtime = await make_runtime(dirs=[directory], models={"costly": costly()})
    run_id = await runtime.start_run("thrifty", "go")
    record = await runtime.wait_for_run(run_id, timeout_s=60)
    check_log(await runtime.events(run_id))

    assert (record.status, record.stop_reason) == ("stopped", "budget_exhausted")
    assert record.output == "budget_exhausted,budget_exhausted"  # what the workflow returned
    assert record.error["code"] == "budget_exhausted"
    receipt = await runtime.receipt(run_id)
    assert receipt["why"].startswith("the budget (limits.maxBudgetUsd or "
                                     "limits.dailyBudgetUsd) had no room")
    assert ("the budget (limits.maxBudgetUsd) stopped all 2 of its tasks ($0.0000 spent)"
            in receipt["why"])


async def test_a_daily_budget_holds_across_runs_and_warns_at_80_percent(
        make_runtime, tmp_path: Path) -> None:
    call = one_call_cost("You are a test agent.\n", "hello")
    daily = round(call * 3.2, 6)  # three calls fit; the third crosses 80%
    directory = write_agent_dir(tmp_path, "daily", model="test/costly", pricing=PRICING,
                                limits={"dailyBudgetUsd": daily})
    runtime = await make_runtime(dirs=[directory], models={"costly": costly()})
    outcomes = []
    for _ in range(4):
        run_id = await runtime.start_run("daily", "hello")
        record = await runtime.wait_for_run(run_id, timeout_s=30)
        events = await runtime.events(run_id)
        check_log(events)
        outcomes.append((record, events))
    assert [r.status for r, _ in outcomes] == ["completed"] * 3 + ["stopped"]
    last, last_events = outcomes[3]
    assert last.stop_reason == "budget_exhausted"
    assert last.error is not None and last.error["scope"] == "daily"
    assert not costs(last_events)  # the call was not made
    warned = [[e.data for e in events if e.type == "BudgetWarning"] for _, events in outcomes]
    assert [len(w) for w in warned] == [0, 0, 1, 0]
    assert warned[2][0]["scope"] == "daily" and warned[2][0]["budget_usd"] == daily
    receipt = await runtime.receipt(last.id)
    assert receipt["budget"]["daily"]["spent_usd"] == pytest.approx(3 * call)
    assert receipt["budget"]["run"]["budget_usd"] is None
    assert "no room" in receipt["why"]


async def test_a_budget_without_a_known_price_stops_before_calling(make_runtime,
                                                                    tmp_path: Path) -> None:
    model = Unpriced()
    directory = write_agent_dir(tmp_path, "unpriced", model="test/unpriced",
                                limits={"maxBudgetUsd": 10})
    runtime = await make_runtime(dirs=[directory], models={"unpriced": model})
    run_id = await runtime.start_run("unpriced", "hi")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert (record.status, record.stop_reason) == ("stopped", "budget_exhausted")
    assert record.error is not None and record.error["code"] == "unknown_cost"
    assert "pricing:" in record.error["message"]
    assert model.calls == 0
