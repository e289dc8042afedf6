"""The agentic task loop against real Postgres: steps, tools, caps, errors, receipts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.durable import check_log, types
from toren.errors import ProviderError
from toren.host.worker import CLAIM_AHEAD
from toren.seams.model import Model, ModelRequest, ModelResponse, ToolCall
from toren.testing import ScriptedModel, write_agent_dir

TOOLS = '''
from toren import tool

CALLS = []

def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: first
        b: second
    """
    CALLS.append((a, b))
    return a + b

def shout(text: str) -> str:
    """Upper-case text."""
    return text.upper()

def big(text: str) -> str:
    """Return a very large output."""
    return "x" * 100_000

def boom(text: str) -> str:
    """Always fails."""
    raise ValueError("the tool broke")
'''


def agent_dir(tmp_path: Path, name: str = "calc", **fields: object) -> Path:
    return write_agent_dir(tmp_path, name, tools_py=TOOLS, **fields)


async def run_to_end(runtime, agent: str, text: str, timeout: float = 30):
    run_id = await runtime.start_run(agent, text)
    record = await runtime.wait_for_run(run_id, timeout_s=timeout)
    return record, await runtime.events(run_id)


async def test_offline_model_calls_each_tool_then_answers(make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[agent_dir(tmp_path, model="toren/scripted")])
    record, events = await run_to_end(runtime, "calc", "hello")
    assert record.status == "completed" and record.stop_reason == "end_turn"
    streams = check_log(events)
    assert types(events, "run") == ["RunCreated", "TaskScheduled", "AgentVersionPinned",
                                    "TaskAbsorbed", "RunFinished"]
    task = types(events)
    assert task[0] == "TaskStarted" and task[-1] == "TaskFinished"
    assert task.count("ModelCallCompleted") == 5  # four tools, then the answer
    completed = [e.data for e in streams["task:main"] if e.type == "ToolCallCompleted"]
    assert [c["name"] for c in completed] == ["add", "shout", "big", "boom"]
    assert completed[0]["output"] == "2" and not completed[0]["is_error"]
    assert completed[1]["output"] == "HELLO"
    assert completed[3]["is_error"] and "ValueError: the tool broke" in completed[3]["output"]
    assert completed[3]["error_kind"] == "exception"
    assert "add: 2" in record.output and "shout: HELLO" in record.output
    started = [e.data for e in streams["task:main"] if e.type == "ToolCallStarted"]
    assert started[0]["idempotency_key"] == f"toren:{record.id}:main:1:0"


async def test_huge_tool_output_is_truncated_with_a_marker(make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[agent_dir(tmp_path, limits={"maxToolOutputBytes": 1024})])
    _record, events = await run_to_end(runtime, "calc", "hi")
    big = next(e.data for e in events if e.type == "ToolCallCompleted" and e.data["name"] == "big")
    assert big["truncated"] is True
    assert big["original_bytes"] == 100_000
    assert len(big["output"].encode()) <= 1024
    assert "[truncated by Toren:" in big["output"] and "of 100000 bytes omitted" in big["output"]


async def test_step_cap_stops_with_max_steps(make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[agent_dir(tmp_path, limits={"maxSteps": 2})])
    record, events = await run_to_end(runtime, "calc", "hi")
    assert (record.status, record.stop_reason) == ("stopped", "max_steps")
    assert types(events).count("ModelCallCompleted") == 2
    check_log(events)


async def test_budget_cap_starts_no_call_once_spent(make_runtime, tmp_path: Path) -> None:
    model = ScriptedModel(cost_usd=0.01)
    runtime = await make_runtime(
        dirs=[agent_dir(tmp_path, model="test/priced", limits={"maxBudgetUsd": 0.025})],
        models={"priced": model})
    record, events = await run_to_end(runtime, "calc", "hi")
    assert (record.status, record.stop_reason) == ("stopped", "budget_exhausted")
    # a hard cap: each call reserves its worst case (0.01, the flat price) first; the third
    # would take spend to 0.03 > 0.025, so it is not made
    assert model.calls == 2
    assert types(events).count("ModelCallStarted") == 2
    receipt = await runtime.receipt(record.id)
    assert receipt["totals"]["cost_usd"] == 0.02
    assert record.error is not None and record.error["code"] == "budget_exhausted"


def script(*responses: ModelResponse) -> ScriptedModel:
    return ScriptedModel(script=list(responses))


def call(name: str, **arguments: object) -> ModelResponse:
    return ModelResponse(text="", tool_calls=(ToolCall(f"c-{name}", name, arguments),),
                         stop_reason="tool_use")


async def test_unknown_tool_and_invalid_arguments_go_back_to_the_model(
        make_runtime, tmp_path: Path) -> None:
    model = script(call("nope"), call("add", a="one", b=2), call("add", a=1, b=2),
                   ModelResponse(text="three"))
    runtime = await make_runtime(dirs=[agent_dir(tmp_path, model="test/m")], models={"m": model})
    record, events = await run_to_end(runtime, "calc", "hi")
    assert (record.status, record.output) == ("completed", "three")
    results = [e.data for e in events if e.type == "ToolCallCompleted"]
    assert [r["error_kind"] for r in results] == ["unknown_tool", "invalid_arguments", None]
    assert "no tool named 'nope'" in results[0]["output"] and "add" in results[0]["output"]
    assert "a: 'one' is not of type 'integer'" in results[1]["output"]
    # invalid calls never start: only the valid one has a ToolCallStarted
    assert [e.data["name"] for e in events if e.type == "ToolCallStarted"] == ["add"]
    check_log(events)


async def test_a_worker_builds_its_tools_validators_as_it_starts(
        make_runtime, tmp_path: Path) -> None:
    """The first call of a tool neither imports jsonschema (~0.15 s on the event loop, every
    run stalled) nor builds the tool's validator: a starting worker has built them."""
    helper = "---\ndescription: Helps.\ntools: [shout]\n---\nHelp.\n"
    directory = agent_dir(tmp_path, model="toren/scripted", subagents={"helper": helper})
    idle = await make_runtime(dirs=[directory], workers=False)
    assert not any("validator" in vars(t) for t in idle.agents["calc"].tools.values())
    runtime = await make_runtime(dirs=[directory])
    agent = runtime.agents["calc"]
    tools = [*agent.tools.values(), *agent.subagents["helper"].tools.values()]
    assert len(tools) == 5 and all("validator" in vars(t) for t in tools)


async def test_a_confused_model_is_stopped_after_repeated_invalid_calls(
        make_runtime, tmp_path: Path) -> None:
    model = script(call("nope"))  # repeats forever
    runtime = await make_runtime(dirs=[agent_dir(tmp_path, model="test/m")], models={"m": model})
    record, _events = await run_to_end(runtime, "calc", "hi")
    assert (record.status, record.stop_reason) == ("failed", "error")
    assert record.error["code"] == "invalid_tool_calls"
    assert model.calls == 3


class Flaky(Model):
    """Fails with a retryable error ``failures`` times, then answers."""

    def __init__(self, failures: int, *, retryable: bool = True) -> None:
        self.failures = failures
        self.retryable = retryable
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls <= self.failures:
            raise ProviderError(f"upstream said 503 (call {self.calls})",
                                retryable=self.retryable)
        return ModelResponse(text="recovered")


async def test_retryable_errors_back_off_visibly_then_clear(make_runtime, tmp_path: Path) -> None:
    model = Flaky(2)
    runtime = await make_runtime(dirs=[agent_dir(tmp_path, model="test/flaky")],
                                 models={"flaky": model})
    record, events = await run_to_end(runtime, "calc", "hi")
    assert (record.status, record.output) == ("completed", "recovered")
    retries = [e.data for e in events if e.type == "RetryScheduled"]
    assert [r["attempt"] for r in retries] == [1, 2]
    assert "503" in retries[0]["error"]["message"]
    assert record.error is None  # cleared on recovery
    receipt = await runtime.receipt(record.id)
    assert receipt["totals"]["retries"] == 2
    check_log(events)


async def test_latest_error_is_shown_while_retrying(make_runtime, tmp_path: Path) -> None:
    model = Flaky(10_000)
    runtime = await make_runtime(dirs=[agent_dir(tmp_path, model="test/flaky")],
                                 models={"flaky": model}, retry_base_s=0.2,
                                 retry_max_delay_s=0.5)
    run_id = await runtime.start_run("calc", "hi")
    for _ in range(100):
        record = await runtime.get_run(run_id)
        if record.error:
            break
        await asyncio.sleep(0.05)
    assert record.status == "running"
    assert "503" in record.error["message"] and record.error["next_attempt_at"]
    assert record.error["attempt"] >= 1


async def test_permanent_errors_end_the_task_with_the_message(make_runtime, tmp_path: Path) -> None:
    model = Flaky(1, retryable=False)
    runtime = await make_runtime(dirs=[agent_dir(tmp_path, model="test/flaky")],
                                 models={"flaky": model})
    record, events = await run_to_end(runtime, "calc", "hi")
    assert (record.status, record.stop_reason) == ("failed", "error")
    assert "503 (call 1)" in record.error["message"]
    assert "RetryScheduled" not in types(events)


async def test_retries_give_up_after_the_configured_attempts(make_runtime, tmp_path: Path) -> None:
    model = Flaky(10_000)
    runtime = await make_runtime(dirs=[agent_dir(tmp_path, model="test/flaky")],
                                 models={"flaky": model}, retry_max_attempts=2)
    record, _events = await run_to_end(runtime, "calc", "hi")
    assert record.status == "failed"
    assert record.error["message"].startswith("gave up after 2 retries")
    assert model.calls == 3


async def test_cancel_during_backoff_makes_queued_retries_no_ops(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    model = Flaky(10_000)
    # "echo" (the offline model) shows when the worker has worked the queue since
    runtime = await make_runtime(dirs=[agent_dir(tmp_path, model="test/flaky"),
                                       write_agent_dir(tmp_path, "echo")],
                                 models={"flaky": model}, retry_base_s=0.4,
                                 retry_max_delay_s=0.4)
    run_id = await runtime.start_run("calc", "hi")
    while not [e for e in await runtime.events(run_id) if e.type == "RetryScheduled"]:
        await asyncio.sleep(0.02)
    record = await runtime.cancel_run(run_id, "testing cancel")
    assert (record.status, record.stop_reason) == ("cancelled", "cancelled")
    calls_at_cancel = model.calls
    task_at_cancel = types(await runtime.events(run_id))
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cursor = await conn.execute("SELECT count(*) FROM toren_control.queue WHERE run_id = %s",
                                    [run_id])
        assert (await cursor.fetchone())[0] == 0
        # wait until the latest retry was due (database clock, the one the queue uses) ...
        due = max(e.data["next_attempt_at"] for e in await runtime.events(run_id)
                  if e.type == "RetryScheduled")
        for _ in range(200):
            cursor = await conn.execute("SELECT now() > %s::timestamptz", [due])
            if (await cursor.fetchone())[0]:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"the database clock never passed {due}")
    # ... then until the worker has worked a run queued after that: the queue serves the
    # oldest message first, so a retry still queued would have been delivered before it
    echo = await runtime.start_run("echo", "after the retry was due")
    assert (await runtime.wait_for_run(echo, timeout_s=30)).status == "completed"
    assert model.calls == calls_at_cancel
    assert types(await runtime.events(run_id)) == task_at_cancel
    assert "RunCancelled" in types(await runtime.events(run_id), "run")
    assert (await runtime.get_run(run_id)).status == "cancelled"
    again = await runtime.cancel_run(run_id)
    assert again.status == "cancelled"


async def test_idempotency_key_returns_the_same_run(make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[agent_dir(tmp_path)], workers=False)
    first = await runtime.start_run("calc", "hi", idempotency_key="order-42")
    second = await runtime.start_run("calc", "hi", idempotency_key="order-42")
    third = await runtime.start_run("calc", "hi", idempotency_key="order-43")
    assert first == second != third
    assert len(await runtime.list_runs(agent="calc")) == 2


async def test_receipt_lists_every_call_and_the_stop_reason(make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[agent_dir(tmp_path)])
    record, _ = await run_to_end(runtime, "calc", "hi")
    receipt = await runtime.receipt(record.id)
    (task,) = receipt["tasks"]
    assert receipt["why"] == "the model gave its final answer"
    assert [c["step"] for c in task["model_calls"]] == [1, 2, 3, 4, 5]
    assert all(not c["replayed"] and not c["repeated"] for c in task["model_calls"])
    assert [t["name"] for t in task["tool_calls"]] == ["add", "shout", "big", "boom"]
    assert task["tool_calls"][0]["idempotency_key"].endswith(":main:1:0")
    assert receipt["totals"]["model_calls"] == 5 and receipt["totals"]["input_tokens"] > 0


class BrokenKey(ScriptedModel):
    async def preflight(self) -> None:
        raise ProviderError("401 invalid x-api-key")


async def test_a_broken_key_refuses_to_start_workers(make_runtime, tmp_path: Path) -> None:
    directory = agent_dir(tmp_path, model="test/locked")
    try:
        await make_runtime(dirs=[directory], models={"locked": BrokenKey()})
    except ProviderError as exc:
        assert "preflight of test/locked (used by calc) failed: 401 invalid x-api-key" in str(exc)
        assert "TOREN_SKIP_PREFLIGHT=1" in str(exc)
    else:
        raise AssertionError("the runtime started with a broken key")
    runtime = await make_runtime(dirs=[directory], models={"locked": BrokenKey()},
                                 skip_preflight=True)
    assert runtime.workers is not None


async def test_checkpoints_let_a_resume_read_only_the_tail_of_the_log(
        make_runtime, tmp_path: Path) -> None:
    from toren.core.catalog import decode_events
    from toren.core.fold import fold_task

    tools = "".join(f'def t{i:02d}(text: str) -> str:\n    """Tool {i}."""\n    return "r{i}"\n\n'
                    for i in range(12))
    directory = write_agent_dir(tmp_path, "long", tools_py=tools)
    plain = await make_runtime(dirs=[directory])
    reference, _ = await run_to_end(plain, "long", "go")
    await plain.stop()
    runtime = await make_runtime(dirs=[directory], checkpoint_every=7)
    record, events = await run_to_end(runtime, "long", "go")
    assert record.output == reference.output
    streams = check_log(events)
    task = sorted(streams["task:main"], key=lambda e: e.seq)
    checkpoints = [e.seq for e in task if e.type == "TaskCheckpoint"]
    assert len(checkpoints) >= 5
    assert all(b - a <= 9 for a, b in zip([0, *checkpoints], checkpoints, strict=False))
    full = fold_task(decode_events(task))
    for seq in checkpoints:  # folding from any checkpoint on gives the state of the whole log
        tail = fold_task(decode_events(e for e in task if e.seq >= seq))
        assert tail == full
    # and the store hands a resuming worker only the tail
    found = await runtime.store.acquire_and_load("long", record.id, "task:main", "reader", 1)
    assert isinstance(found, tuple)
    _lease, loaded = found
    assert loaded[0].type == "TaskCheckpoint" and loaded[0].seq == checkpoints[-1]
    assert len(loaded) == len(task) - checkpoints[-1] + 1


@pytest.mark.slow
async def test_many_claimed_runs_start_a_few_at_a_time_and_none_fails(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    """A worker with far more slots than pool connections (TOREN_CONCURRENCY 60, pool 2):
    claimed handlers take their streams at most pool_size / 2 at a time, rather than all
    queueing for the pool at once (those that waited past the pool timeout used to fail),
    while the claim keeps a few more in hand (CLAIM_AHEAD); every run reaches its model
    call, where waiting holds no connection."""
    model = ScriptedModel(delay=30)
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a", model="test/m")],
                                 models={"m": model}, concurrency=60, pool_size=2,
                                 pool_timeout_s=1.0)
    worker = runtime.workers.worker
    most = most_taking = taking = 0
    take = worker.run_log.acquire_and_load

    async def counted_take(*args: Any, **kwargs: Any) -> Any:  # the real take, counted
        nonlocal taking, most_taking
        taking += 1
        most_taking = max(most_taking, taking)
        try:
            return await take(*args, **kwargs)
        finally:
            taking -= 1

    worker.run_log.acquire_and_load = counted_take  # type: ignore[method-assign]

    def watch() -> None:
        nonlocal most
        most = max(most, len(worker._starting))

    creator = await make_runtime(dirs=[write_agent_dir(tmp_path, "a", model="test/m")],
                                 models={"m": model}, workers=False)
    run_ids = [await creator.start_run("a", f"run {i}") for i in range(40)]

    async def in_model_calls() -> bool:
        watch()
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            cursor = await conn.execute("SELECT count(*) FROM agent_a.events "
                                        "WHERE type = 'ModelCallStarted'")
            row = await cursor.fetchone()
        return row is not None and row[0] >= len(run_ids)

    for _ in range(2400):
        if await in_model_calls():
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("40 runs were not all in a model call within 2 minutes")
    assert most_taking == 1  # pool_size // 2
    assert most <= CLAIM_AHEAD
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cursor = await conn.execute("SELECT count(*) FROM agent_a.runs WHERE status = 'failed'")
        row = await cursor.fetchone()
    assert row == (0,)
