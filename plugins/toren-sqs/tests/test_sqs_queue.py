"""The SQS queue driver against a real SQS API (moto server) with real boto3: claims, acks,
visibility and renewal, deferral without counting, dead letters with a reason, long polls.
Runs through the outbox relay on SQS: tests/integration/test_sqs_runs.py."""

from __future__ import annotations

import asyncio
import json
import time

import boto3
import pytest
from toren_sqs.queue import SqsQueue
from toren_sqs.settings import SqsSettings

from toren.config import Settings
from toren.errors import ConfigError
from toren.seams.shapes import OutgoingMessage


class NoStore:
    """The SQS queue does not touch the store; the interface still takes one."""


async def open_queue(max_deliveries: int = 3) -> SqsQueue:
    settings = Settings(max_deliveries=max_deliveries)
    queue = SqsQueue(settings, NoStore())  # type: ignore[arg-type]
    await queue.open()
    return queue


def message(kind: str = "task", **payload: object) -> OutgoingMessage:
    return OutgoingMessage(kind=kind, payload=dict(payload))


def dead_letters(env: dict[str, str], agent: str) -> list[dict[str, object]]:
    client = boto3.client("sqs", endpoint_url=env["TOREN_SQS_ENDPOINT_URL"],
                          region_name="us-east-1")
    url = client.get_queue_url(QueueName=f"{env['TOREN_SQS_PREFIX']}{agent}-dlq")["QueueUrl"]
    found = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    return [json.loads(m["Body"]) for m in found.get("Messages", [])]


async def test_a_message_is_claimed_once_by_its_agents_workers_and_acked(sqs_env) -> None:
    queue = await open_queue()
    try:
        await queue.enqueue("alpha", "run-1", message(step=1))
        await queue.enqueue("beta", "run-2", message(step=2))

        claimed, dead = await queue.claim(["alpha"], "w1", 10, 30, 3)
        assert dead == [] and [(m.agent, m.run_id, m.payload, m.attempts) for m in claimed] == [
            ("alpha", "run-1", {"step": 1}, 1)]
        # hidden while held: a second worker of the same agent gets nothing
        assert (await queue.claim(["alpha"], "w2", 10, 30, 3)) == ([], [])
        await queue.ack(claimed[0], "w1")
        # beta's message waits for a worker that serves beta
        beta, _ = await queue.claim(["beta"], "w3", 10, 30, 3)
        assert [m.run_id for m in beta] == ["run-2"]
    finally:
        await queue.close()


async def test_an_unrenewed_message_comes_back_and_counts_a_renewed_one_stays(sqs_env) -> None:
    queue = await open_queue()
    try:
        await queue.enqueue("alpha", "lost", message())
        await queue.enqueue("alpha", "kept", message())
        first, _ = await queue.claim(["alpha"], "w1", 10, 1, 5)
        assert sorted(m.run_id for m in first) == ["kept", "lost"]
        kept = next(m for m in first if m.run_id == "kept")
        for _ in range(4):  # the heartbeat renews what the worker still holds
            await queue.renew("w1", [kept.id], 2)
            await asyncio.sleep(0.6)
        again, _ = await queue.claim(["alpha"], "w2", 10, 30, 5)
        assert [(m.run_id, m.attempts) for m in again] == [("lost", 2)]
    finally:
        await queue.close()


async def test_a_deferral_does_not_count_and_too_many_deliveries_dead_letter(sqs_env) -> None:
    queue = await open_queue(max_deliveries=2)
    try:
        await queue.enqueue("alpha", "run-d", message())
        claimed, _ = await queue.claim(["alpha"], "w1", 1, 30, 2)
        await queue.defer(claimed[0], "w1", 1)
        assert (await queue.claim(["alpha"], "w1", 1, 30, 2)) == ([], [])  # not yet visible
        await asyncio.sleep(1.5)
        claimed, _ = await queue.claim(["alpha"], "w1", 1, 1, 2)
        assert claimed[0].attempts == 1  # the deferred delivery did not count

        await asyncio.sleep(1.5)  # not acked: visible again, delivery 2
        claimed, dead = await queue.claim(["alpha"], "w1", 1, 1, 2)
        assert (claimed[0].attempts, dead) == (2, [])
        await asyncio.sleep(1.5)  # delivery 3 is past TOREN_MAX_DELIVERIES=2
        claimed, dead = await queue.claim(["alpha"], "w1", 1, 1, 2)
        assert claimed == [] and [(m.run_id, m.attempts) for m in dead] == [("run-d", 3)]
        letters = dead_letters(sqs_env, "alpha")
        assert [(b["run_id"], b["dead_reason"]) for b in letters] == [
            ("run-d", "delivered 2 times without completing (TOREN_MAX_DELIVERIES=2)")]
        await asyncio.sleep(1.5)
        assert (await queue.claim(["alpha"], "w1", 1, 1, 2)) == ([], [])  # gone from the queue
    finally:
        await queue.close()


async def test_an_idle_worker_long_polls_and_wakes_when_a_message_arrives(sqs_env) -> None:
    queue = await open_queue()
    sender = await open_queue()
    try:
        assert (await queue.claim(["alpha"], "w1", 4, 30, 3)) == ([], [])
        started = time.monotonic()
        waiting = asyncio.create_task(queue.wait(5))
        await asyncio.sleep(0.3)
        await sender.enqueue("alpha", "late", message())
        await waiting
        woke_after = time.monotonic() - started
        claimed, _ = await queue.claim(["alpha"], "w1", 4, 30, 3)
        assert [m.run_id for m in claimed] == ["late"]
        assert woke_after < 1.5  # within TOREN_SQS_WAIT_SECONDS=1 (+ the round trip)
    finally:
        await queue.close()
        await sender.close()


async def test_concurrent_sends_go_out_in_batches_and_all_arrive(sqs_env) -> None:
    queue = await open_queue()
    try:
        await asyncio.gather(*(queue.enqueue("alpha", f"run-{i}", message(i=i))
                               for i in range(25)))
        got: set[str] = set()
        for _ in range(10):
            claimed, _ = await queue.claim(["alpha"], "w1", 10, 30, 3)
            got |= {m.run_id or "" for m in claimed}
            for m in claimed:
                await queue.ack(m, "w1")
            if len(got) == 25:
                break
        assert got == {f"run-{i}" for i in range(25)}
    finally:
        await queue.close()


async def test_a_deferral_longer_than_sqs_allows_hops_until_due(sqs_env) -> None:
    queue = await open_queue()
    try:
        await queue.enqueue("alpha", "far", message())
        claimed, _ = await queue.claim(["alpha"], "w1", 1, 30, 3)
        await queue.defer(claimed[0], "w1", 3600)  # an hour: more than SQS's 15 minutes
        client = boto3.client("sqs", endpoint_url=sqs_env["TOREN_SQS_ENDPOINT_URL"],
                              region_name="us-east-1")
        url = client.get_queue_url(QueueName=f"{sqs_env['TOREN_SQS_PREFIX']}alpha")["QueueUrl"]
        attributes = client.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])["Attributes"]
        assert attributes["ApproximateNumberOfMessagesDelayed"] == "1"  # waiting, not lost
    finally:
        await queue.close()


def test_bad_settings_are_refused_with_the_variable_named() -> None:
    with pytest.raises(ConfigError, match=r"TOREN_SQS_WAIT_SECONDS='60'"):
        SqsSettings.from_env({"TOREN_SQS_WAIT_SECONDS": "60"})
    with pytest.raises(ConfigError, match=r"TOREN_SQS_PREFIX='bad prefix!'"):
        SqsSettings.from_env({"TOREN_SQS_PREFIX": "bad prefix!"})
    with pytest.raises(ConfigError, match="shorten TOREN_SQS_PREFIX"):
        SqsSettings(prefix="p" * 60).queue_name("a" * 30)


async def test_missing_queues_are_an_error_when_creating_is_off(sqs_env, monkeypatch) -> None:
    monkeypatch.setenv("TOREN_SQS_CREATE_QUEUES", "0")
    queue = await open_queue()
    try:
        with pytest.raises(ConfigError, match="does not exist and TOREN_SQS_CREATE_QUEUES=0"):
            await queue.enqueue("alpha", "r", message())
    finally:
        await queue.close()


async def test_a_stopping_worker_hands_back_what_it_holds_at_once_and_uncounted(
        sqs_env) -> None:
    queue = await open_queue()
    other = await open_queue()
    try:
        await queue.enqueue("alpha", "kept", message())
        await queue.enqueue("alpha", "cut-off", message())
        claimed, _ = await queue.claim(["alpha"], "w1", 10, 300, 3)
        assert sorted(m.run_id for m in claimed) == ["cut-off", "kept"]
        kept = next(m for m in claimed if m.run_id == "kept")
        # hidden for 300 s, yet another worker gets the one handed back now, as delivery 1
        assert await queue.return_unknown("w1", [kept.id]) == 1
        again, _ = await other.claim(["alpha"], "w2", 10, 30, 3)
        assert [(m.run_id, m.attempts) for m in again] == [("cut-off", 1)]
        assert await queue.return_unknown("w1", [kept.id]) == 0  # nothing else to hand back
    finally:
        await queue.close()
        await other.close()
