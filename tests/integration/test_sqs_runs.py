"""Runs on the SQS queue driver (toren-sqs) with real boto3 against moto in server mode: the
outbox relay feeds SQS after commit, workers claim from their agents' queues, and a message
delivered too often fails its run with the reason. (``sqs_env``: toren-sqs's pytest
plugin, a moto server.)"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import shutil
import statistics
import time
from pathlib import Path

import boto3
import psycopg
import pytest
from toren_sqs.queue import SqsQueue

from tests.durable import check_log
from toren.host.relay import OutboxRelay
from toren.seams.model import ModelResponse
from toren.testing import ScriptedModel, write_agent_dir

EXAMPLES = Path(__file__).resolve().parents[2] / "contrib" / "examples"


async def test_a_run_and_a_workflow_complete_on_sqs(sqs_env, make_runtime, database_url: str,
                                                    tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "planner-crew", tmp_path / "planner-crew")
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "crew"),
                                       tmp_path / "planner-crew"], queue_driver="sqs")
    assert isinstance(runtime.queue, SqsQueue) and runtime.relay is not None

    single = await runtime.start_run("crew", "postgres")
    planned = await runtime.start_run("planner-crew",
                                      "How does durable execution use event sourcing?")
    for run_id in (single, planned):
        record = await runtime.wait_for_run(run_id, timeout_s=90)
        assert record.status == "completed", record.error
        check_log(await runtime.events(run_id))
    assert [len(e.data["tasks"]) for e in await runtime.events(planned)
            if e.type == "WaveStarted"] == [1, 2, 1]
    # everything leaves the outbox: the relay sends what the runs' last appends wrote (a
    # wave's or a run's end) a moment after the run's row says completed, later under load
    async def outbox_left() -> int:
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            row = await (await conn.execute("SELECT count(*) FROM toren_control.queue")).fetchone()
        return int(row[0]) if row else -1

    deadline = asyncio.get_running_loop().time() + 30
    while (left := await outbox_left()) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
    assert left == 0, f"{left} message(s) still in the outbox after 30 s"


async def test_a_message_delivered_too_often_fails_its_run_with_the_reason(
        sqs_env, make_runtime, tmp_path: Path) -> None:
    # a tool that always kills the work in hand would need a process kill; instead the API
    # process (no workers) creates the run, and a raw consumer receives its message without
    # acknowledging it until it is past TOREN_MAX_DELIVERIES
    directory = write_agent_dir(tmp_path, "crew")
    api = await make_runtime(dirs=[directory], workers=False, queue_driver="sqs",
                             max_deliveries=2)
    run_id = await api.start_run("crew", "postgres")
    assert api.relay is None  # the relay runs beside workers: send by hand, as it would
    queue = api.queue
    assert isinstance(queue, SqsQueue)
    relay = OutboxRelay(api.store, queue, ["crew"], visibility_s=5, poll_interval_s=1)
    assert await relay.relay_once() == 1
    for attempt in (1, 2):
        claimed, dead = await queue.claim(["crew"], "raw", 1, 1, 2)
        assert [m.attempts for m in claimed] == [attempt] and dead == []
        await asyncio.sleep(1.5)  # not acknowledged: it comes back

    worker = await make_runtime(dirs=[directory], queue_driver="sqs", max_deliveries=2)
    record = await worker.wait_for_run(run_id, timeout_s=60)
    assert record.status == "failed"
    assert record.error is not None and record.error["code"] == "dead_lettered"
    assert "was delivered 3 times without completing" in record.error["message"]


async def test_a_send_lost_between_commit_and_relay_is_healed(
        sqs_env, make_runtime, database_url: str, tmp_path: Path) -> None:
    # the run's first message is committed to the outbox; a relay claims it and dies before
    # sending it (its claim is all that is left of it). Nothing else would send it: once the
    # claim expires, a live relay sends it, and the run completes once.
    directory = write_agent_dir(tmp_path, "crew")
    api = await make_runtime(dirs=[directory], workers=False, queue_driver="sqs")
    run_id = await api.start_run("crew", "postgres")
    dead_relay = await api.store.claim_outbox(["crew"], "relay-killed-before-send", 10, 2.0)
    assert [(entry.run_id, entry.kind) for entry in dead_relay] == [(run_id, "task")]

    worker = await make_runtime(dirs=[directory], queue_driver="sqs",
                                guardian_interval_s=600.0)
    record = await worker.wait_for_run(run_id, timeout_s=60)
    assert record.status == "completed", record.error
    events = await worker.events(run_id)
    check_log(events)
    assert sum(e.type == "TaskStarted" for e in events) == 1
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM toren_control.queue").fetchone() == (0,)


async def test_work_outlasting_the_visibility_timeout_is_not_delivered_again_on_sqs(
        sqs_env, make_runtime, tmp_path: Path) -> None:
    # a model call of three visibility timeouts (TOREN_LEASE_TTL 1 s): only the heartbeat's
    # ChangeMessageVisibility keeps the message from another delivery meanwhile
    slow = ScriptedModel(script=[ModelResponse(text="done", stop_reason="end_turn")], delay=3.0)
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a", model="test/slow")],
                                 models={"slow": slow}, queue_driver="sqs",
                                 guardian_interval_s=600.0)
    run_id = await runtime.start_run("a", "hello")
    record = await runtime.wait_for_run(run_id, timeout_s=60)
    assert record.status == "completed", record.error
    assert slow.calls == 1
    events = await runtime.events(run_id)
    assert sum(e.type == "TaskStarted" for e in events) == 1


@pytest.mark.slow
async def test_the_relay_s_added_latency_commit_to_visible_in_sqs(
        sqs_env, make_runtime, tmp_path: Path) -> None:
    """Commit -> message in SQS (its ``SentTimestamp``), through the outbox relay woken by the
    outbox's notification, against moto on this machine: printed as JSON (no assertion on
    time; docs/reference/plugins.md quotes the figures)."""
    directory = write_agent_dir(tmp_path, "crew")
    api = await make_runtime(dirs=[directory], workers=False, queue_driver="sqs")
    queue = api.queue
    assert isinstance(queue, SqsQueue)
    relay = OutboxRelay(api.store, queue, ["crew"], visibility_s=30, poll_interval_s=30)
    await relay.start()
    client = boto3.client("sqs", endpoint_url=sqs_env["TOREN_SQS_ENDPOINT_URL"],
                          region_name="us-east-1")
    url = await queue.queue_url("crew")
    latencies: list[float] = []
    try:
        for _ in range(60):
            run_id = await api.start_run("crew", "postgres")
            committed = time.time()  # start_run returns after its transaction committed
            found: list[dict[str, object]] = []
            for _ in range(100):
                answer = await asyncio.to_thread(
                    client.receive_message, QueueUrl=url, MaxNumberOfMessages=10,
                    WaitTimeSeconds=1, MessageSystemAttributeNames=["SentTimestamp"])
                found = answer.get("Messages", [])
                if found:
                    break
            assert found, "the relay did not send the entry"
            body = json.loads(str(found[0]["Body"]))
            assert body["run_id"] == run_id
            sent_ms = int(found[0]["Attributes"]["SentTimestamp"])  # type: ignore[index]
            latencies.append(max(0.0, sent_ms / 1000 - committed))
            await asyncio.to_thread(client.delete_message, QueueUrl=url,
                                    ReceiptHandle=found[0]["ReceiptHandle"])
    finally:
        await relay.stop()
    ordered = sorted(latencies)
    print(json.dumps({"relay_latency_ms": {
        "n": len(ordered), "p50": round(statistics.median(ordered) * 1000, 1),
        "p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 1),
        "max": round(ordered[-1] * 1000, 1), "against": "moto server on 127.0.0.1"}}))
    assert len(ordered) == 60


async def test_the_guardian_leaves_a_run_being_worked_alone_on_sqs(
        sqs_env, make_runtime, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # relayed messages are in SQS, not in the outbox the guardian reads: without the live
    # lease check, this run got a tick every sweep of its 6 s model call (10 at 0.5 s)
    caplog.set_level(logging.INFO, logger="toren.host.worker")
    slow = ScriptedModel(script=[ModelResponse(text="done", stop_reason="end_turn")], delay=4.0)
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a", model="test/slow")],
                                 models={"slow": slow}, queue_driver="sqs",
                                 guardian_interval_s=0.5)
    run_id = await runtime.start_run("a", "hello")
    record = await runtime.wait_for_run(run_id, timeout_s=60)
    assert record.status == "completed", record.error
    assert [r.getMessage() for r in caplog.records if "re-nudged" in r.getMessage()] == []
    assert slow.calls == 1


async def test_metrics_count_the_messages_in_sqs_not_the_outbox(
        sqs_env, make_runtime, database_url: str, tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families
    from rich.console import Console

    from toren.cli.top import render
    from toren.host.fleet import fleet_snapshot

    api = await make_runtime(dirs=[write_agent_dir(tmp_path, "crew")], workers=False,
                             queue_driver="sqs")
    await api.start_run("crew", "postgres")
    queue = api.queue
    assert isinstance(queue, SqsQueue)
    relay = OutboxRelay(api.store, queue, ["crew"], visibility_s=5, poll_interval_s=1)
    assert await relay.relay_once() == 1  # out of the outbox, into SQS
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM toren_control.queue").fetchone() == (0,)

    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in text_string_to_metric_families(
                   (await api.metrics.exposition()).decode())
               for sample in family.samples}
    assert samples[("toren_queue_messages", (("agent", "crew"), ("state", "ready")))] == 1
    assert samples[("toren_queue_messages", (("agent", "crew"), ("state", "in_flight")))] == 0
    # SQS tells the age of its oldest message only to CloudWatch: no made-up figure
    assert not [key for key in samples if key[0] == "toren_queue_oldest_ready_age_seconds"]

    # toren top and GET /fleet say the same, and show "-" for the age they cannot know
    snapshot = await fleet_snapshot(api.store, 10.0, queue_depth=api.metrics.queue_depth)
    assert snapshot["agents"]["crew"]["queue"] == {
        "ready": 1, "in_flight": 0, "delayed": 0, "oldest_ready_age_s": None,
        "waiting": {"queued": 1, "concurrency": 0, "delayed": 0}}
    shown = Console(width=200, record=True, file=io.StringIO())
    shown.print(render(snapshot))
    assert re.search(r"crew\s+│\s+1\s+│\s+0\s+│\s+0\s+│\s+-\s+│", shown.export_text()), \
        shown.export_text()
