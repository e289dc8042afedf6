"""The transactional outbox with a queue that does not read it: the relay feeds the queue.

The queue here is ``tests.memory_queue.MemoryQueue`` (a stand-in for a queue on another
service), registered as ``memory`` in ``toren.queue`` through a real entry point that only
these tests put on ``sys.path``. The outbox is the real Postgres one.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from stevedore.extension import ExtensionManager

from tests.durable import check_log, types
from tests.memory_queue import MemoryBroker, MemoryQueue, reset_broker
from toren.host.relay import OutboxRelay
from toren.seams.model import ModelResponse
from toren.testing import ScriptedModel, write_agent_dir

EXAMPLES = Path(__file__).resolve().parents[2] / "contrib" / "examples"


@pytest.fixture
def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryBroker]:
    """Install the ``memory`` queue driver for this test (an entry point in a dist-info on
    ``sys.path``) and give it an empty broker."""
    site = tmp_path / "site"
    info = site / "toren_test_memory_queue-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: toren-test-memory-queue\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "[toren.queue]\nmemory = tests.memory_queue:MemoryQueue\n")
    monkeypatch.syspath_prepend(str(site))
    # stevedore keeps each namespace's entry points for the life of the process: let it read
    # them again with this one installed, and again after the test without it
    ExtensionManager.ENTRY_POINT_CACHE.pop("toren.queue", None)
    yield reset_broker()
    ExtensionManager.ENTRY_POINT_CACHE.pop("toren.queue", None)


def outbox_rows(database_url: str) -> list[tuple[int, str, str | None]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT id, kind, claimed_by FROM toren_control.queue ORDER BY id").fetchall()


async def eventually(check: Callable[[], Awaitable[bool] | bool], what: str,
                     timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        outcome = check()
        if not isinstance(outcome, bool):
            outcome = await outcome
        if outcome:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        await asyncio.sleep(0.05)


async def test_a_run_completes_through_the_relay(make_runtime, broker: MemoryBroker,
                                                 database_url: str, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], queue_driver="memory")
    assert isinstance(runtime.queue, MemoryQueue) and runtime.relay is not None

    run_id = await runtime.start_run("a", "hello")
    record = await runtime.wait_for_run(run_id, timeout_s=30)

    assert record.status == "completed", record.error
    events = await runtime.events(run_id)
    check_log(events)
    assert types(events, "run")[-1] == "RunFinished"
    # every message went outbox -> relay -> memory queue: the task, then the tick it sent
    kinds = [kind for _agent, sent_run, kind, _payload in broker.sent if sent_run == run_id]
    assert kinds[:2] == ["task", "run"]
    # each was acknowledged through the queue after the append that ended its work
    await eventually(lambda: not broker.messages, "the memory queue empties")
    assert outbox_rows(database_url) == []


async def test_an_idle_relay_wakes_on_a_new_entry(make_runtime, broker: MemoryBroker,
                                                  tmp_path: Path) -> None:
    # nothing polls within the test's time: each hop waits on a notification (the outbox
    # table's NOTIFY for the relay, the memory queue's wake-up for the worker)
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], queue_driver="memory",
                                 poll_interval_s=600.0)
    await asyncio.sleep(0)  # let the relay find the outbox empty and start waiting
    run_id = await runtime.start_run("a", "hello")

    record = await runtime.wait_for_run(run_id, timeout_s=30)

    assert record.status == "completed", record.error


async def test_a_workflow_with_waves_and_a_delayed_message_completes(
        make_runtime, broker: MemoryBroker, database_url: str, tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "planner-crew", tmp_path / "planner-crew")
    flow = write_agent_dir(tmp_path, "timer", subagents={})
    (flow / "workflow.py").write_text(
        "async def workflow(ctx):\n    await ctx.sleep(0.5)\n    return 'slept'\n")
    runtime = await make_runtime(dirs=[tmp_path / "planner-crew", flow], queue_driver="memory")

    planned = await runtime.start_run("planner-crew",
                                     "How does durable execution use event sourcing?")
    slept = await runtime.start_run("timer", "go")

    planner = await runtime.wait_for_run(planned, timeout_s=60)
    timer = await runtime.wait_for_run(slept, timeout_s=60)
    assert planner.status == "completed", planner.error
    assert [len(e.data["tasks"]) for e in await runtime.events(planned)
            if e.type == "WaveStarted"] == [1, 2, 1]
    # the timer's message waited in the outbox until due, then went out without a delay
    assert (timer.status, timer.output) == ("completed", "slept")
    assert types(await runtime.events(slept), "run").count("TimerFired") == 1
    await eventually(lambda: not outbox_rows(database_url), "the outbox empties")


async def test_a_relay_killed_between_send_and_ack_sends_again(
        make_runtime, broker: MemoryBroker, database_url: str, tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "a")
    api = await make_runtime(dirs=[directory], workers=False, queue_driver="memory")
    run_id = await api.start_run("a", "hello")
    [(entry_id, kind, _)] = outbox_rows(database_url)
    assert kind == "task"

    # a relay that sends the entry and dies before acknowledging it
    broker.hang_after_send = True
    doomed = OutboxRelay(api.store, api.queue, ["a"], visibility_s=1.0, poll_interval_s=0.05)
    await doomed.start()
    await eventually(lambda: len(broker.sent) == 1, "the doomed relay sends the entry")
    await doomed.stop()
    assert outbox_rows(database_url) == [(entry_id, "task", doomed.id)]  # sent, not acked

    # workers (with their own relay) start: the entry comes back after its visibility timeout
    # and is sent again, and the run completes once
    broker.hang_after_send = False
    worker = await make_runtime(dirs=[directory], queue_driver="memory")
    record = await worker.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed", record.error
    await eventually(lambda: sum(1 for _a, r, k, _p in broker.sent
                                 if r == run_id and k == "task") == 2,
                     "the unacknowledged entry is sent a second time")
    await eventually(lambda: outbox_rows(database_url) == [], "the outbox empties")
    await eventually(lambda: not broker.messages, "the duplicate is worked and acknowledged")
    events = await worker.events(run_id)
    check_log(events)
    assert types(events).count("TaskFinished") == 1
    assert types(events, "run").count("RunFinished") == 1


async def test_relay_claims_hide_entries_without_counting_and_ack_only_its_own(
        make_runtime, database_url: str, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a"),
                                       write_agent_dir(tmp_path, "b")], workers=False)
    store = runtime.store
    first = await runtime.start_run("a", "one")
    await runtime.start_run("b", "two")

    claimed = await store.claim_outbox(["a"], "relay-1", 10, 30.0)
    assert [(entry.agent, entry.run_id, entry.kind) for entry in claimed] == [
        ("a", first, "task")]  # only the agents asked for
    assert await store.claim_outbox(["a"], "relay-2", 10, 30.0) == []  # hidden meanwhile
    assert await store.ack_outbox("relay-2", [claimed[0].id]) == 0  # not its claim

    # a claim that expires comes back, and deliveries are not counted
    short = await store.claim_outbox(["b"], "relay-1", 10, 0.2)
    await eventually(lambda: store.claim_outbox(["b"], "relay-2", 10, 30.0), "b's entry returns",
                     timeout_s=10)
    with psycopg.connect(database_url) as conn:
        attempts = conn.execute("SELECT attempts FROM toren_control.queue WHERE id = %s",
                                (short[0].id,)).fetchone()
    assert attempts == (0,)
    assert await store.ack_outbox("relay-1", [short[0].id]) == 0  # relay-2 holds it now
    assert await store.ack_outbox("relay-1", [claimed[0].id]) == 1
    assert [row[2] for row in outbox_rows(database_url)] == ["relay-2"]


async def test_work_outlasting_the_visibility_timeout_is_not_delivered_again(
        make_runtime, broker: MemoryBroker, tmp_path: Path) -> None:
    # each model call takes three visibility timeouts (TOREN_LEASE_TTL is 1 s here): only the
    # worker's heartbeat (Queue.renew) keeps the message from coming back meanwhile. (No
    # guardian sweep: with a queue that does not read the outbox, it would send this active
    # run ticks, and the ticks the task's message again, as the guardian's contract says.)
    slow = ScriptedModel(script=[ModelResponse(text="done", stop_reason="end_turn")], delay=3.0)
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a", model="test/slow")],
                                 models={"slow": slow}, queue_driver="memory",
                                 guardian_interval_s=600.0)
    run_id = await runtime.start_run("a", "hello")

    record = await runtime.wait_for_run(run_id, timeout_s=30)

    assert record.status == "completed", record.error
    [task_message] = [message_id for message_id, (_agent, sent_run, kind, _payload)
                      in enumerate(broker.sent, start=1) if sent_run == run_id and kind == "task"]
    assert broker.claims[task_message] == 1
    assert slow.calls == 1


async def test_a_stopping_worker_hands_the_queue_its_messages_back_uncounted(
        make_runtime, broker: MemoryBroker, tmp_path: Path) -> None:
    slow = ScriptedModel(script=[ModelResponse(text="done", stop_reason="end_turn")], delay=30.0)
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a", model="test/slow")],
                                 models={"slow": slow}, queue_driver="memory",
                                 shutdown_grace_s=0.1, guardian_interval_s=600.0)
    await runtime.start_run("a", "hello")
    await eventually(lambda: slow.calls == 1, "the task is in its model call")

    await runtime.stop()

    [held] = broker.messages.values()
    assert held.claimed_by is None and held.message.attempts == 0  # back, uncounted
