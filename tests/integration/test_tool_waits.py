"""A tool that waits for a signal (``toren.wait_for_signal``), against real Postgres: the task
parks as ``waiting`` holding nothing; a signal sent after the wait began wakes it and is the
wait's result; one sent before is not taken; a timeout raises ``SignalTimeout`` in the tool;
sessions wait the same way."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.durable import check_log, types
from tests.integration.test_approvals import live_leases, queued_messages, wait_status
from toren.seams.model import ModelRequest, ModelResponse, ToolCall
from toren.testing import ScriptedModel, write_agent_dir

TOOLS = '''
import asyncio
import pathlib

import toren
from toren.errors import SignalTimeout

RUNS = pathlib.Path(__file__).parent / "runs"


async def await_payment(order: str, timeout: float | None = None, gate: bool = False) -> str:
    """Wait for the payment of an order (with ``gate``, not before the test says so: a file)."""
    with RUNS.open("a") as runs:  # the code before the wait runs again after it: counted
        runs.write(f"before {order}\\n")
    while gate and not (RUNS.parent / "signalled").exists():
        await asyncio.sleep(0.02)
    try:
        paid = await toren.wait_for_signal("paid", timeout=timeout)
    except SignalTimeout as exc:
        return f"{order}: no payment within {exc.timeout_s:g}s"
    with RUNS.open("a") as runs:
        runs.write(f"after {order}\\n")
    return f"{order}: paid {paid['amount']}"


async def pack(order: str) -> str:
    """Pack an order: until the test says so (a file), as another call of the step."""
    while not (RUNS.parent / "packed").exists():
        await asyncio.sleep(0.02)
    return f"{order} packed"
'''


def waiter(**arguments: object):
    """A script: call await_payment once, then say what it returned."""
    def script(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role == "tool":
            return ModelResponse(text="Result: " + last.text)
        return ModelResponse(text="", stop_reason="tool_use", tool_calls=(
            ToolCall(id="w1", name="await_payment", arguments={"order": "A-1"} | arguments),))
    return script


async def post_signal(runtime, run_id: str, name: str, payload: object) -> dict:
    """``POST /runs/{id}/signals/{name}`` to an in-process server of ``runtime``."""
    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer

    from toren.server.app import create_app

    async with TestServer(create_app(runtime, require_keys=False)) as server, \
            ClientSession() as http:
        url = str(server.make_url(f"/runs/{run_id}/signals/{name}"))
        async with http.post(url, json=payload) as response:
            assert response.status == 201, await response.text()
            return await response.json()


async def start(make_runtime, tmp_path: Path, **arguments: object):
    model = ScriptedModel(script=waiter(**arguments))
    directory = write_agent_dir(tmp_path, "shop", tools_py=TOOLS, model="test/shop")
    runtime = await make_runtime(dirs=[directory], models={"shop": model})
    return runtime, model, directory / "runs"


async def test_a_tool_parks_until_a_signal_and_gets_its_payload(make_runtime,
                                                                 tmp_path: Path) -> None:
    runtime, model, runs = await start(make_runtime, tmp_path, gate=True)
    run_id = await runtime.start_run("shop", "sell")
    await runtime.send_signal(run_id, "paid", {"amount": 1})  # before the wait: not taken
    (runs.parent / "signalled").touch()  # the tool begins its wait only now
    await wait_status(runtime, run_id, "waiting")
    events = await runtime.events(run_id)
    assert types(events, "task:main")[-2:] == ["ToolCallStarted", "ToolWaitStarted"]
    [started] = [e.data for e in events if e.type == "ToolWaitStarted"]
    assert (started["name"], started["wait"], started["call_id"]) == ("paid", 1, "w1")
    assert await queued_messages(runtime, run_id) == 0  # parked: nothing held while it waits
    assert await live_leases(runtime, run_id) == 0
    sent = await post_signal(runtime, run_id, "paid", {"amount": 42})  # over HTTP
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert (record.status, record.output) == ("completed", "Result: A-1: paid 42")
    assert model.calls == 2
    assert runs.read_text().splitlines() == ["before A-1", "before A-1", "after A-1"]
    events = await runtime.events(run_id)
    check_log(events)
    [ended] = [e.data for e in events if e.type == "ToolWaitEnded"]
    assert (ended["signal"], ended["payload"]) == (sent["number"], {"amount": 42})
    assert types(events, "task:main").count("ToolCallCompleted") == 1
    receipt = await runtime.receipt(run_id)
    [wait] = receipt["tasks"][0]["signal_waits"]
    assert (wait["outcome"], wait["signal"], wait["name"]) == ("signal", sent["number"], "paid")


async def test_a_wait_times_out_into_signal_timeout_in_the_tool(make_runtime,
                                                                 tmp_path: Path) -> None:
    runtime, model, runs = await start(make_runtime, tmp_path, timeout=0.3)
    run_id = await runtime.start_run("shop", "sell")
    await wait_status(runtime, run_id, "waiting")
    receipt = await runtime.receipt(run_id)
    assert receipt["why"].startswith(
        "a tool (call w1 of task main) is waiting for the signal 'paid' until ")
    assert receipt["why"].endswith(f"(send it: toren jobs signal {run_id} paid --data JSON)")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert (record.status, record.output) == ("completed",
                                              "Result: A-1: no payment within 0.3s")
    events = await runtime.events(run_id)
    check_log(events)
    [ended] = [e.data for e in events if e.type == "ToolWaitEnded"]
    assert ended["timed_out"] is True and "signal" not in ended
    # a signal after the timeout changes nothing: the run is over
    assert runs.read_text().splitlines() == ["before A-1", "before A-1"]
    assert model.calls == 2


async def test_a_session_tool_waits_and_a_signal_over_http_wakes_it(make_runtime,
                                                                     tmp_path: Path) -> None:
    from toren.errors import SessionBusy

    model = ScriptedModel(script=waiter(order="S-7"))
    directory = write_agent_dir(tmp_path, "shop", tools_py=TOOLS, model="test/shop")
    runtime = await make_runtime(dirs=[directory], models={"shop": model})
    session_id = await runtime.start_session("shop")
    await runtime.send_message(session_id, "sell")
    await wait_status(runtime, session_id, "waiting")
    with pytest.raises(SessionBusy, match="a signal one of its tools waits for"):
        await runtime.send_message(session_id, "hurry up")
    await post_signal(runtime, session_id, "paid", {"amount": 5})
    turn = await runtime.wait_for_turn(session_id, timeout_s=30)
    assert turn["status"] == "awaiting_input"
    assert turn["transcript"][-1]["text"] == "Result: S-7: paid 5"
    check_log(await runtime.events(session_id))


async def test_two_tasks_of_a_workflow_wait_for_the_same_signal(make_runtime,
                                                                tmp_path: Path) -> None:
    # signals are not consumed by tool waits: one signal wakes both waiting tools
    model = ScriptedModel(script=waiter())
    directory = write_agent_dir(tmp_path, "shop", tools_py=TOOLS, model="test/shop",
                                subagents={"seller": "---\ndescription: Sells.\ntools: "
                                           "[await_payment]\n---\nSell.\n"})
    (directory / "workflow.py").write_text(
        "async def workflow(ctx):\n"
        "    results = await ctx.wave([('seller', 'one'), ('seller', 'two')])\n"
        "    return [r.output for r in results]\n")
    runtime = await make_runtime(dirs=[directory], models={"shop": model})
    run_id = await runtime.start_run("shop", "sell")
    async with asyncio.timeout(30):
        while [e.type for e in await runtime.events(run_id)].count("ToolWaitStarted") < 2:
            await asyncio.sleep(0.05)
    await runtime.send_signal(run_id, "paid", {"amount": 3})
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed", record.error
    assert record.output == ["Result: A-1: paid 3"] * 2
    events = await runtime.events(run_id)
    check_log(events)
    assert [e.data["signal"] for e in events if e.type == "ToolWaitEnded"] == [1, 1]


async def test_a_signal_sent_while_the_step_still_runs_is_taken(make_runtime,
                                                                 tmp_path: Path) -> None:
    # the wait began when the tool asked, not when Toren recorded it after the step's other
    # calls: a signal sent in between is one it waits for
    def script(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "tool":
            return ModelResponse(text=" / ".join(m.text for m in request.messages
                                                 if m.role == "tool"))
        return ModelResponse(text="", stop_reason="tool_use", tool_calls=(
            ToolCall(id="w1", name="await_payment", arguments={"order": "B-2"}),
            ToolCall(id="p1", name="pack", arguments={"order": "B-2"})))

    directory = write_agent_dir(tmp_path, "shop", tools_py=TOOLS, model="test/shop")
    runtime = await make_runtime(dirs=[directory],
                                 models={"shop": ScriptedModel(script=script)})
    run_id = await runtime.start_run("shop", "sell")
    async with asyncio.timeout(30):
        while not (directory / "runs").exists():  # await_payment called wait_for_signal
            await asyncio.sleep(0.02)
    await runtime.send_signal(run_id, "paid", {"amount": 9})
    (directory / "packed").touch()
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    # pack's result is recorded with the wait, the paid one when the tool has run again
    assert (record.status, record.output) == ("completed", "B-2 packed / B-2: paid 9")
    check_log(await runtime.events(run_id))
