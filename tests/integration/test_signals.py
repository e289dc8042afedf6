"""Signals to workflows through the real orchestrator and Postgres: waiting, taking each signal
once, timeouts recorded for replay, idempotent sending, refusals."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.durable import check_log, types
from tests.integration.test_workflows import crew
from toren.errors import ConfigError, RunFinishedError, RunNotFound, SignalTooLarge
from toren.execution.signals import MAX_SIGNAL_BYTES

WAITS_ONCE = '''
async def workflow(ctx):
    approved = await ctx.wait_for_signal("approve")
    return {"approved": approved}
'''


async def wait_for_event(runtime: Any, run_id: str, event_type: str, stream: str = "run",
                         timeout: float = 20) -> None:
    """Until the run's ``stream`` has an event of ``event_type`` (a condition, not a sleep)."""
    async with asyncio.timeout(timeout):
        while event_type not in types(await runtime.events(run_id), stream):
            await asyncio.sleep(0.05)


async def test_a_signal_sent_before_the_wait_is_not_lost(make_runtime, tmp_path: Path) -> None:
    directory = crew(tmp_path, WAITS_ONCE)
    sender = await make_runtime(dirs=[directory], workers=False)
    run_id = await sender.start_run("flow", "go")
    sent = await sender.send_signal(run_id, "approve", {"by": "ana"}, sent_by="test")
    assert (sent["number"], sent["created"]) == (1, True)
    worker = await make_runtime(dirs=[directory])
    record = await worker.wait_for_run(run_id, timeout_s=30)
    assert (record.status, record.output) == ("completed", {"approved": {"by": "ana"}})
    events = await worker.events(run_id)
    check_log(events)
    run = types(events, "run")
    assert "SignalWaitStarted" not in run
    assert run.count("SignalConsumed") == 1
    [received] = [e for e in events if e.stream == "signals"]
    assert (received.type, received.data["name"], received.data["sent_by"]) == (
        "SignalReceived", "approve", "test")


async def test_a_signal_wakes_a_waiting_workflow(make_runtime, tmp_path: Path) -> None:
    directory = crew(tmp_path, WAITS_ONCE)
    runtime = await make_runtime(dirs=[directory])
    run_id = await runtime.start_run("flow", "go")
    await wait_for_event(runtime, run_id, "SignalWaitStarted")
    assert (await runtime.get_run(run_id)).status not in ("completed", "failed")
    why = (await runtime.receipt(run_id))["why"]
    assert why == (f"the workflow is waiting for the signal 'approve' (send it: toren jobs "
                   f"signal {run_id} approve --data JSON)")
    await runtime.send_signal(run_id, "approve", "yes")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert (record.status, record.output) == ("completed", {"approved": "yes"})
    check_log(await runtime.events(run_id))


async def test_each_signal_is_taken_by_one_wait_and_signals_lists_them_all(
        make_runtime, tmp_path: Path) -> None:
    directory = crew(tmp_path, '''
async def workflow(ctx):
    first = await ctx.wait_for_signal("vote")
    second = await ctx.wait_for_signal("vote")
    other = await ctx.wait_for_signal("other")
    seen = [(s.number, s.payload) for s in ctx.signals("vote")]
    return {"first": first, "second": second, "other": other, "seen": seen}
''')
    runtime = await make_runtime(dirs=[directory])
    run_id = await runtime.start_run("flow", "go")
    await runtime.send_signal(run_id, "vote", 1)
    await runtime.send_signal(run_id, "other", "x")
    await wait_for_event(runtime, run_id, "SignalWaitStarted")
    await runtime.send_signal(run_id, "vote", 2)
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed", record.error
    assert record.output == {"first": 1, "second": 2, "other": "x",
                             "seen": [[1, 1], [3, 2]]}
    events = await runtime.events(run_id)
    check_log(events)
    consumed = [e.data["signal"] for e in events if e.type == "SignalConsumed"]
    assert sorted(consumed) == [1, 2, 3]


async def test_a_timeout_is_recorded_and_replayed_the_same(make_runtime,
                                                            tmp_path: Path) -> None:
    # the second wait makes the workflow re-execute after the timeout with a "go" signal
    # there to take: the replay must still see the recorded timeout, not take it
    directory = crew(tmp_path, '''
from toren.errors import SignalTimeout

async def workflow(ctx):
    try:
        first = await ctx.wait_for_signal("go", timeout=0.3)
    except SignalTimeout as exc:
        first = f"timed out after {exc.timeout_s}s"
    second = await ctx.wait_for_signal("next")
    late = [s.payload for s in ctx.signals("go")]
    return {"first": first, "second": second, "late": late}
''')
    runtime = await make_runtime(dirs=[directory])
    run_id = await runtime.start_run("flow", "go")
    await wait_for_event(runtime, run_id, "SignalWaitTimedOut")
    await runtime.send_signal(run_id, "go", "too late")
    await wait_for_event(runtime, run_id, "SignalWaitStarted")
    await runtime.send_signal(run_id, "next", "on time")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed", record.error
    assert record.output == {"first": "timed out after 0.3s", "second": "on time",
                             "late": ["too late"]}
    run = types(await runtime.events(run_id), "run")
    assert run.count("SignalWaitTimedOut") == 1
    assert run.count("SignalConsumed") == 1


async def test_sending_is_idempotent_and_refused_once_the_run_finished(
        make_runtime, tmp_path: Path) -> None:
    directory = crew(tmp_path, WAITS_ONCE)
    runtime = await make_runtime(dirs=[directory])
    run_id = await runtime.start_run("flow", "go")
    sent = await asyncio.gather(*(runtime.send_signal(run_id, "approve", n,
                                                      idempotency_key="once")
                                  for n in range(4)))
    assert {s["number"] for s in sent} == {1}
    assert sorted(s["created"] for s in sent) == [False, False, False, True]
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed"
    signals = [e for e in await runtime.events(run_id) if e.stream == "signals"]
    assert len(signals) == 1
    again = await runtime.send_signal(run_id, "approve", 9, idempotency_key="once")
    assert (again["number"], again["created"]) == (1, False)
    with pytest.raises(RunFinishedError, match="has finished"):
        await runtime.send_signal(run_id, "approve", 9)
    with pytest.raises(RunNotFound):
        await runtime.send_signal("00000000-0000-0000-0000-000000000000", "approve")
    with pytest.raises(ConfigError, match="invalid signal name"):
        await runtime.send_signal(run_id, "no spaces", 1)
    with pytest.raises(SignalTooLarge, match=str(MAX_SIGNAL_BYTES)):
        await runtime.send_signal(run_id, "approve", "x" * MAX_SIGNAL_BYTES)


async def test_signals_over_http_and_the_client_with_hostile_inputs(make_runtime,
                                                                     tmp_path: Path) -> None:
    from aiohttp import ClientSession
    from aiohttp.test_utils import TestServer

    from tests.e2e.test_http_api import conforms
    from toren.client import TorenAPIError, TorenClient
    from toren.server.app import create_app

    directory = crew(tmp_path, WAITS_ONCE)
    api = await make_runtime(dirs=[directory], workers=False)
    run_id = await api.start_run("flow", "go")
    async with TestServer(create_app(api, require_keys=False)) as server, \
            ClientSession() as http, TorenClient(str(server.make_url("")).rstrip("/")) as client:
        base = str(server.make_url("")).rstrip("/")
        signals = f"{base}/runs/{run_id}/signals"

        async def post(path: str, body: bytes | None = None, headers: dict[str, str] | None = None
                       ) -> tuple[int, Any]:
            async with http.post(path, data=body, headers={
                    "Content-Type": "application/json", **(headers or {})}) as response:
                return response.status, await response.json(content_type=None)

        status, sent = await post(f"{signals}/approve", b'{"by": "http"}',
                                  {"Idempotency-Key": "k1"})
        assert (status, sent["number"], sent["created"]) == (201, 1, True)
        conforms("SignalSent", sent)
        status, again = await post(f"{signals}/approve", b'{"by": "other"}',
                                   {"Idempotency-Key": "k1"})
        assert (status, again["number"], again["created"]) == (200, 1, False)
        status, empty = await post(f"{signals}/ping")  # no body: a null payload
        assert (status, empty["number"]) == (201, 2)
        via_client = await client.signal(run_id, "ping", [1, 2], idempotency_key="k2")
        assert via_client["number"] == 3

        hostile: list[tuple[str, bytes | None, dict[str, str], int, str]] = [
            (f"{signals}/Bad%20Name", b"1", {}, 400, "invalid_signal_name"),
            (f"{signals}/{'x' * 65}", b"1", {}, 400, "invalid_signal_name"),
            (f"{signals}/a%00b", b"1", {}, 400, "invalid_signal_name"),
            (f"{signals}/ok", b"{not json", {}, 400, "invalid_json"),
            (f"{signals}/ok", b"NaN", {}, 400, "invalid_json"),
            (f"{signals}/ok", b'"\\u0000"', {}, 400, "unstorable_value"),
            (f"{signals}/ok", b"[" * 5000 + b"]" * 5000, {}, 400, "invalid_json"),
            (f"{signals}/ok", b"1", {"Content-Type": "text/plain"}, 415,
             "unsupported_media_type"),
            (f"{signals}/ok", b'"' + b"x" * (MAX_SIGNAL_BYTES + 10) + b'"', {}, 413,
             "signal_too_large"),
            (f"{signals}/ok", b"1", {"Idempotency-Key": "k" * 300}, 400,
             "invalid_idempotency_key"),
            (f"{base}/runs/not-a-uuid/signals/ok", b"1", {}, 404, "run_not_found"),
            (f"{base}/runs/00000000-0000-0000-0000-000000000000/signals/ok", b"1", {}, 404,
             "run_not_found"),
        ]
        for url, body, headers, expected, code in hostile:
            status, answer = await post(url, body, headers)
            assert (status, answer["error"]["code"]) == (expected, code), (url[-60:], answer)
        assert "65536" in (await post(f"{signals}/ok", b"1" * (MAX_SIGNAL_BYTES + 1)))[1][
            "error"]["message"]

        await api.cancel_run(run_id, "done")
        status, finished = await post(f"{signals}/approve", b"1")
        assert (status, finished["error"]["code"]) == (409, "run_finished")
        with pytest.raises(TorenAPIError) as refused:
            await client.signal(run_id, "approve", 1)
        assert (refused.value.status, refused.value.code) == (409, "run_finished")
    # every accepted signal is in the log once, each hostile one nowhere
    stored = [e.data for e in await api.events(run_id) if e.stream == "signals"]
    assert [(s["name"], s["payload"]) for s in stored] == [
        ("approve", {"by": "http"}), ("ping", None), ("ping", [1, 2])]


async def test_the_purchase_approval_example_waits_for_its_approval(make_runtime,
                                                                     tmp_path: Path) -> None:
    import shutil

    from tests.integration.test_workflows import EXAMPLES

    shutil.copytree(EXAMPLES / "purchase-approval", tmp_path / "purchase-approval")
    runtime = await make_runtime(dirs=[tmp_path / "purchase-approval"])
    approved = await runtime.start_run("purchase-approval", "laptop")
    rejected = await runtime.start_run("purchase-approval", "chair")
    # one decision before the workflow waits, one after: both are taken
    await runtime.signals.send(rejected, "approval", {"approved": False, "reason": "budget"})
    await wait_for_event(runtime, approved, "SignalWaitStarted")
    await runtime.signals.send(approved, "approval", {"approved": True, "by": "ana"})
    record = await runtime.wait_for_run(approved, timeout_s=30)
    assert record.status == "completed", record.error
    assert (record.output["status"], record.output["approved_by"]) == ("ordered", "ana")
    assert "placed for laptop" in record.output["order"]
    other = await runtime.wait_for_run(rejected, timeout_s=30)
    assert (other.output["status"], other.output["reason"]) == ("rejected", "budget")
    assert "purchaser" not in {e.data.get("subagent") for e in await runtime.events(rejected)
                               if e.type == "TaskScheduled"}


async def test_a_fork_replays_the_signals_its_copied_waves_read(make_runtime,
                                                                tmp_path: Path) -> None:
    directory = crew(tmp_path, '''
async def workflow(ctx):
    first = await ctx.wait_for_signal("item")
    one = await ctx.task("echo", first)
    seen = [s.payload for s in ctx.signals("item")]
    two = await ctx.task("echo", " ".join(seen))
    return {"first": first, "seen": seen, "ok": one.ok and two.ok}
''')
    runtime = await make_runtime(dirs=[directory])
    run_id = await runtime.start_run("flow", "go")
    for item in ("a", "b", "c"):
        await runtime.signals.send(run_id, "item", item)
    source = await runtime.wait_for_run(run_id, timeout_s=30)
    assert source.output == {"first": "a", "seen": ["a", "b", "c"], "ok": True}
    fork = await runtime.forks.fork(run_id, 1)
    # a signal to the fork after it was made is not one the source's copied read saw
    await runtime.signals.send(fork.id, "item", "late")
    record = await runtime.wait_for_run(fork.id, timeout_s=30)
    assert record.status == "completed", record.error
    assert record.output == source.output
    events = await runtime.events(fork.id)
    check_log(events)
    assert [e.data["payload"] for e in events if e.stream == "signals"] == [
        "a", "b", "c", "late"]


TIMES_OUT = '''
from toren.errors import SignalTimeout

async def workflow(ctx):
    try:
        return await ctx.wait_for_signal("go", timeout=3)
    except SignalTimeout:
        return "timed out"
'''


async def test_a_lost_or_early_timeout_tick_times_out_once_at_its_deadline(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    import json
    from datetime import datetime

    import psycopg

    directory = crew(tmp_path, TIMES_OUT)
    first = await make_runtime(dirs=[directory])
    lost, early = await first.start_run("flow", "lost"), await first.start_run("flow", "early")
    for run_id in (lost, early):
        await wait_for_event(first, run_id, "SignalWaitStarted")
    await first.stop()
    tick = json.dumps({"reason": "signal wait 1", "signal_wait": 1, "key": "signal_wait:1"})
    with psycopg.connect(database_url, autocommit=True) as conn:
        # one run's delayed timeout tick is lost (the guardian must find the run); the other's
        # arrives now, long before its deadline (it must wait for it)
        conn.execute("DELETE FROM toren_control.queue WHERE run_id = ANY(%s)",
                     [[lost, early]])
        conn.execute("INSERT INTO toren_control.queue (agent, run_id, kind, payload) "
                     "VALUES ('flow', %s, 'run', %s)", [early, tick])
    worker = await make_runtime(dirs=[directory], guardian_interval_s=0.2)
    for run_id in (lost, early):
        record = await worker.wait_for_run(run_id, timeout_s=20)
        assert (record.status, record.output) == ("completed", "timed out")
        events = await worker.events(run_id)
        check_log(events)
        [started] = [e.data for e in events if e.type == "SignalWaitStarted"]
        [timed_out] = [e for e in events if e.type == "SignalWaitTimedOut"]
        assert timed_out.created_at is not None
        # a second of slack: the queue's delays go by the database's clock
        assert (datetime.fromisoformat(started["fire_at"]) - timed_out.created_at
                ).total_seconds() <= 1.0
