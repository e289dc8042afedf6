"""Concurrency limits and priority with real workers (docs/guides/flow-control.md): runs past
the limit stay queued and all complete; a keyed limit lets another tenant through; a
high-priority run started later is worked before queued low ones; the run record says why a
run waits; hostile priorities and keys are refused at start."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest
from aiohttp.test_utils import TestClient, TestServer

from toren.cli.operator import LocalOperator
from toren.cli.render import queue_text
from toren.errors import InvalidFlowControl
from toren.seams.shapes import QueueMessage
from toren.server.app import create_app
from toren.testing import write_agent_dir


def tools(log: Path, seconds: float = 0.3) -> str:
    """A tool that records its start and end (with the model's text, the run's input) in
    ``log``, one short append each: the file's order is the order of the events."""
    return f'''
import time

def work(text: str) -> str:
    """Work a while."""
    with open({str(log)!r}, "a") as f:
        f.write("start " + text + "\\n")
    time.sleep({seconds})
    with open({str(log)!r}, "a") as f:
        f.write("end " + text + "\\n")
    return "done"
'''


def most_at_once(log: Path) -> int:
    running = most = 0
    for line in log.read_text().splitlines():
        running += 1 if line.startswith("start ") else -1
        most = max(most, running)
    return most


def starts(log: Path) -> list[str]:
    return [line.removeprefix("start ") for line in log.read_text().splitlines()
            if line.startswith("start ")]


async def test_a_limit_of_two_keeps_six_runs_to_two_at_once_and_all_complete(
        make_runtime, tmp_path: Path) -> None:
    log = tmp_path / "work.log"
    runtime = await make_runtime(
        dirs=[write_agent_dir(tmp_path, "limited", tools_py=tools(log), concurrency=2)],
        concurrency=8)
    runs = [await runtime.start_run("limited", f"job {n}") for n in range(6)]
    for run_id in runs:
        assert (await runtime.wait_for_run(run_id, timeout_s=90)).status == "completed"
    assert len(starts(log)) == 6
    assert most_at_once(log) <= 2


async def test_a_keyed_limit_lets_another_tenant_through_a_backlog(
        make_runtime, tmp_path: Path) -> None:
    log = tmp_path / "work.log"
    runtime = await make_runtime(
        dirs=[write_agent_dir(tmp_path, "tenants", tools_py=tools(log),
                              concurrency={"limit": 1, "key": "input.customer"})],
        concurrency=4)
    backlog = [await runtime.start_run("tenants", {"customer": "a", "n": n}) for n in range(5)]
    other = await runtime.start_run("tenants", {"customer": "b", "n": 0})
    for run_id in [*backlog, other]:
        assert (await runtime.wait_for_run(run_id, timeout_s=90)).status == "completed"
    # the tool's text is the run's input as JSON text
    order = ["b" if '"b"' in text else "a" for text in starts(log)]
    # tenant a's runs one at a time; b's run waited for at most one of them
    assert order.index("b") <= 2, order
    events = await runtime.events(other)
    created = next(e for e in events if e.type == "RunCreated")
    assert created.data["concurrency_key"] == "b"


async def test_a_high_priority_run_started_later_is_worked_before_queued_low_ones(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    log = tmp_path / "work.log"
    directory = write_agent_dir(tmp_path, "busy", tools_py=tools(log, seconds=1.0))
    worker = await make_runtime(dirs=[directory], concurrency=1)
    api = await make_runtime(dirs=[directory], workers=False)
    # every message the worker starts, claimed or handed to it by its own appends
    worked: list[QueueMessage] = []
    start = worker.workers.worker._start

    def record(message: QueueMessage) -> None:
        worked.append(message)
        start(message)

    worker.workers.worker._start = record  # type: ignore[method-assign]
    blocker = await api.start_run("busy", "blocker")
    # the worker's one slot is taken once the blocker's tool has started
    for _ in range(600):
        if log.exists() and starts(log):
            break
        await asyncio.sleep(0.05)
    assert starts(log) == ["blocker"]
    lows = [await api.start_run("busy", f"low {n}", priority=-10) for n in range(3)]
    high = await api.start_run("busy", "high", priority=10)
    state = await api.store.queue_state("busy", high)
    assert state is not None and state["priority"] == 10
    for run_id in [blocker, *lows, high]:
        assert (await worker.wait_for_run(run_id, timeout_s=90)).status == "completed"
    assert starts(log) == ["blocker", "high", "low 0", "low 1", "low 2"]
    # each message of a run carried its priority: its task's (claimed) and its run tick's
    # (handed over by the task's last append), which is what a task's waiters order by
    kinds = {(m.run_id, m.kind, m.priority) for m in worked}
    assert {(high, "task", 10), (high, "run", 10)} <= kinds
    assert all(m.priority == -10 for m in worked if m.run_id in lows)


async def test_the_run_record_says_it_waits_for_a_concurrency_slot(
        make_runtime, tmp_path: Path, database_url: str) -> None:
    api = await make_runtime(dirs=[write_agent_dir(tmp_path, "slots", concurrency=1)],
                             workers=False)
    running = await api.start_run("slots", "first")
    waiting = await api.start_run("slots", "second")
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("UPDATE toren_control.queue SET claimed_by = 'elsewhere', "
                           "available_at = now() + interval '1 minute' WHERE run_id = %s",
                           [running])
    async with TestClient(TestServer(create_app(api, require_keys=False))) as client:
        detail = await (await client.get(f"/runs/{waiting}")).json()
        assert detail["queue"] == {"priority": 0, "concurrency_key": None,
                                   "waiting": "concurrency"}
        detail_waiting = detail["queue"]
        detail = await (await client.get(f"/runs/{running}")).json()
        assert detail["queue"]["waiting"] is None
        fleet = await (await client.get("/fleet")).json()
        assert fleet["agents"]["slots"]["queue"]["waiting"] == {
            "queued": 0, "concurrency": 1, "delayed": 0}
        metrics = (await (await client.get("/metrics")).text())
        assert 'toren_queue_waiting{agent="slots",reason="concurrency"} 1.0' in metrics
    # toren jobs show says it too, from the database and over a URL alike
    local = await LocalOperator(api).queue_state(waiting)
    assert local == detail_waiting
    assert queue_text(local) == ("waiting for a slot: its concurrency key's runs are all "
                                 "executing")


async def test_post_runs_refuses_a_bad_priority_naming_the_range(
        make_runtime, tmp_path: Path) -> None:
    api = await make_runtime(dirs=[write_agent_dir(tmp_path, "pri")], workers=False)
    async with TestClient(TestServer(create_app(api, require_keys=False))) as client:
        for priority in ["high", "10", 10**9, -101, True, 1.5, [1], {"n": 1}]:
            response = await client.post("/runs", json={"agent": "pri", "input": "x",
                                                        "priority": priority})
            assert response.status == 400, priority
            error = (await response.json())["error"]
            assert error["code"] == "invalid_flow_control", priority
            assert "-100 to 100" in error["message"]
        assert (await api.list_runs()) == []


async def test_post_runs_takes_a_priority_and_null_means_the_agents(
        make_runtime, tmp_path: Path) -> None:
    api = await make_runtime(dirs=[write_agent_dir(tmp_path, "pri", priority=7)],
                             workers=False)
    async with TestClient(TestServer(create_app(api, require_keys=False))) as client:
        for asked, kept in ((None, 7), (-3, -3), (100, 100)):
            response = await client.post("/runs", json={"agent": "pri", "input": "x",
                                                        "priority": asked})
            assert response.status == 201
            run_id = (await response.json())["id"]
            detail = await (await client.get(f"/runs/{run_id}")).json()
            assert detail["queue"]["priority"] == kept
            assert detail["queue"]["waiting"] == "queued"


UNUSABLE_KEYS = [
    ("plain text", "has no input.customer.id"),
    ({"customer": "acme"}, "has no input.customer.id"),
    ({"customer": {"id": ["a", "b"]}}, "list there"),
    ({"customer": {"id": None}}, "null there"),
    ({"customer": {"id": {"deep": 1}}}, "dict there"),
    ({"customer": {"id": "x" * 201}}, "at most 200"),
    ({"customer": {"id": "bad\x07key\u202e"}}, "printable"),
]


async def test_a_run_without_a_usable_concurrency_key_is_refused_at_start(
        make_runtime, tmp_path: Path) -> None:
    api = await make_runtime(dirs=[write_agent_dir(
        tmp_path, "keyed", concurrency={"limit": 2, "key": "input.customer.id"})],
        workers=False)
    for input, says in UNUSABLE_KEYS:
        with pytest.raises(InvalidFlowControl, match=says):
            await api.start_run("keyed", input)
    async with TestClient(TestServer(create_app(api, require_keys=False))) as client:
        response = await client.post("/runs", json={"agent": "keyed", "input": {"x": 1}})
        assert response.status == 400
        assert "input.customer.id" in (await response.json())["error"]["message"]
    assert (await api.list_runs()) == []
    # a usable one (a number counts as its text)
    run_id = await api.start_run("keyed", {"customer": {"id": 42}})
    state = await api.store.queue_state("keyed", run_id)
    assert state is not None and state["concurrency_key"] == "42"
