"""Runs on the SQS queue driver (toren-sqs) with real boto3 against moto in server mode: the
outbox relay feeds SQS after commit, workers claim from their agents' queues, and a message
delivered too often fails its run with the reason. (``sqs_env``: toren-sqs's pytest
plugin, a moto server.)"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import psycopg
from toren_sqs.queue import SqsQueue

from tests.durable import check_log
from toren.host.relay import OutboxRelay
from toren.testing import write_agent_dir

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
    with psycopg.connect(database_url) as conn:  # everything left the outbox
        assert conn.execute("SELECT count(*) FROM toren_control.queue").fetchone() == (0,)


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
