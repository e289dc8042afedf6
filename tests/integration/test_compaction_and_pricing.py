"""Compaction of long contexts and cost accounting, through the real task loop and Postgres."""

from __future__ import annotations

from pathlib import Path

from tests.durable import check_log, types
from toren.core.compaction import SUMMARY_PREFIX, SUMMARY_SYSTEM, estimate_tokens
from toren.core.pricing import Pricing
from toren.errors import ContextWindowExceeded
from toren.seams.model import ModelRequest, ModelResponse, ToolCall, Usage
from toren.testing import ScriptedModel, write_agent_dir

TOOLS = "".join(
    f'def fetch_{i}(text: str) -> str:\n    """Fetch page {i}."""\n    return "{i}" * 3000\n\n'
    for i in range(6))


class Researcher(ScriptedModel):
    """Calls fetch_0..fetch_5 one per step, then answers; summarises when asked to."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(script=self.respond, **kwargs)  # type: ignore[arg-type]
        self.requests: list[ModelRequest] = []
        self.steps = 0

    def respond(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if request.system == SUMMARY_SYSTEM:
            return ModelResponse(text=f"fetched pages 0-{self.steps - 1}",
                                 usage=Usage(input_tokens=900, output_tokens=20))
        step = self.steps
        self.steps += 1
        if step < 6:
            return ModelResponse(text="", tool_calls=(ToolCall(f"c{step}", f"fetch_{step}",
                                                               {"text": "x"}),),
                                 stop_reason="tool_use", usage=Usage(100, 10))
        return ModelResponse(text="all six pages read", usage=Usage(100, 10))


async def run(runtime, agent: str = "reader"):
    run_id = await runtime.start_run(agent, "read everything")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    return record, await runtime.events(run_id)


async def test_a_large_context_is_compacted_once_and_the_summary_is_used(
        make_runtime, tmp_path: Path) -> None:
    model = Researcher()
    directory = write_agent_dir(tmp_path, "reader", tools_py=TOOLS, model="test/researcher",
                                compaction={"thresholdTokens": 2000, "keepRecentMessages": 2})
    runtime = await make_runtime(dirs=[directory], models={"researcher": model})
    record, events = await run(runtime)
    assert (record.status, record.output) == ("completed", "all six pages read")
    check_log(events)
    compactions = [e.data for e in events if e.type == "Compacted"]
    assert compactions and all(c["reason"] == "threshold" for c in compactions)
    assert all(c["tokens_after"] < c["tokens_before"] for c in compactions)
    summary_calls = [e.data for e in events
                     if e.type == "ModelCallCompleted" and e.data.get("purpose") == "compaction"]
    assert len(summary_calls) == len(compactions)
    # after compacting, the task's next request starts with the summary, not the old turns
    after = [r for r in model.requests if r.system != SUMMARY_SYSTEM
             and r.messages[0].text.startswith(SUMMARY_PREFIX)]
    assert after and all(estimate_tokens(r.system, r.messages) < 2000 + 3000 for r in after)
    receipt = await runtime.receipt(record.id)
    (task,) = receipt["tasks"]
    assert task["steps"] == 7 and task["compactions"] == len(compactions)
    assert [c["purpose"] for c in task["model_calls"]].count("compaction") == len(compactions)
    # the summary calls are costed like any call: their tokens are in the totals
    assert receipt["totals"]["input_tokens"] == 7 * 100 + 900 * len(compactions)


class Overflowing(Researcher):
    """Rejects any request estimated above ``limit`` tokens, as a provider would."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if estimate_tokens(request.system, request.messages) > self.limit:
            raise ContextWindowExceeded(f"prompt is too long: over {self.limit} tokens",
                                        status=400)
        return await super().complete(request)


async def test_a_context_length_error_compacts_and_retries_once(make_runtime,
                                                               tmp_path: Path) -> None:
    model = Overflowing(limit=3000)
    directory = write_agent_dir(tmp_path, "reader", tools_py=TOOLS, model="test/overflow",
                                compaction={"keepRecentMessages": 2})
    runtime = await make_runtime(dirs=[directory], models={"overflow": model})
    record, events = await run(runtime)
    assert record.status == "completed", record.error
    reasons = [e.data["reason"] for e in events if e.type == "Compacted"]
    assert reasons and set(reasons) == {"context_window_exceeded"}
    check_log(events)


async def test_an_overflow_right_after_compacting_fails_the_task(make_runtime,
                                                                 tmp_path: Path) -> None:
    model = Overflowing(limit=10)  # nothing fits, not even the compacted context
    directory = write_agent_dir(tmp_path, "reader", tools_py=TOOLS, model="test/tiny")
    runtime = await make_runtime(dirs=[directory], models={"tiny": model})
    record, _events = await run(runtime)
    assert (record.status, record.stop_reason) == ("failed", "error")
    assert record.error["code"] == "context_window_exceeded"


class Priced(ScriptedModel):
    pricing = Pricing(input_per_mtok=3.0, output_per_mtok=15.0, cache_read_per_mtok=0.3)

    def __init__(self) -> None:
        super().__init__(script=[ModelResponse(text="done", usage=Usage(
            input_tokens=1000, output_tokens=200, cache_read_tokens=5000))])


async def test_cost_comes_from_the_provider_table_or_the_agent_override(
        make_runtime, tmp_path: Path) -> None:
    table = write_agent_dir(tmp_path, "table", model="test/priced")
    override = write_agent_dir(tmp_path, "override", model="test/priced", pricing={
        "test/priced": {"inputPerMTok": 1.0, "outputPerMTok": 2.0}})
    runtime = await make_runtime(dirs=[table, override], models={"priced": Priced()})
    _record, events = await run(runtime, "table")
    (call,) = [e.data for e in events if e.type == "ModelCallCompleted"]
    assert call["cost_usd"] == round((1000 * 3 + 200 * 15 + 5000 * 0.3) / 1e6, 10)
    _record, events = await run(runtime, "override")
    (call,) = [e.data for e in events if e.type == "ModelCallCompleted"]
    # cache reads default to the input price of the override
    assert call["cost_usd"] == round((1000 * 1 + 200 * 2 + 5000 * 1) / 1e6, 10)


class Unpriced(ScriptedModel):
    def __init__(self) -> None:
        super().__init__(script=[ModelResponse(text="done", usage=Usage(10, 10),
                                               cost_usd=None)])

    async def complete(self, request: ModelRequest) -> ModelResponse:
        response = await super().complete(request)
        return ModelResponse(text=response.text, usage=response.usage, cost_usd=None)


async def test_an_unknown_price_is_recorded_as_unknown_never_guessed(
        make_runtime, tmp_path: Path, caplog) -> None:
    directory = write_agent_dir(tmp_path, "free", model="test/unpriced")
    runtime = await make_runtime(dirs=[directory], models={"unpriced": Unpriced()})
    record, events = await run(runtime, "free")
    (call,) = [e.data for e in events if e.type == "ModelCallCompleted"]
    assert call["cost_usd"] is None
    receipt = await runtime.receipt(record.id)
    assert receipt["totals"]["cost_unknown_calls"] == 1
    assert "no price is known for test/unpriced" in caplog.text
    assert types(events).count("ModelCallCompleted") == 1
