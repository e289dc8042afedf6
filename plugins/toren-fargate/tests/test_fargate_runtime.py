"""The fargate runtime's parts against real servers: task protection against a fake ECS agent
speaking its HTTP API, the queue-depth metric against moto's CloudWatch (server mode, real
boto3), the health endpoint over HTTP, and the whole runtime around a real worker on SQS."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import aiohttp
import boto3
import pytest
from toren_fargate.metrics import MetricError, QueueDepthPublisher, depth_data
from toren_fargate.protection import ProtectionError, TaskProtection
from toren_fargate.runtime import FargateRuntime
from toren_fargate.settings import FargateSettings
from toren_fargate.testing import FakeEcsAgent

from toren.errors import ConfigError


@pytest.fixture
def ecs_agent() -> Iterator[FakeEcsAgent]:
    agent = FakeEcsAgent().start()
    yield agent
    agent.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cloudwatch(endpoint: str) -> object:
    return boto3.client("cloudwatch", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


# -- task protection ----------------------------------------------------------------------------

async def test_protection_is_asked_for_when_busy_and_given_up_when_idle_a_while(
        ecs_agent: FakeEcsAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    protection = TaskProtection(ecs_agent.url, 30, idle_before_release_s=5)
    clock = [1000.0]
    monkeypatch.setattr("toren_fargate.protection.time.monotonic", lambda: clock[0])
    try:
        await protection.update(busy=True)
        await protection.update(busy=True)  # still busy, far from expiry: no call
        await protection.update(busy=False)
        clock[0] += 3
        await protection.update(busy=True)  # idle 3 s between two messages: kept, no call
        await protection.update(busy=False)
        clock[0] += 4
        await protection.update(busy=False)  # idle 4 s: kept
        clock[0] += 1
        await protection.update(busy=False)  # idle 5 s: given up
        await protection.update(busy=False)
        await protection.update(busy=True)
        await protection.update(busy=False, now_final=True)  # stopping: at once
    finally:
        await protection.close()
    assert ecs_agent.requests == [{"ProtectionEnabled": True, "ExpiresInMinutes": 30},
                                  {"ProtectionEnabled": False},
                                  {"ProtectionEnabled": True, "ExpiresInMinutes": 30},
                                  {"ProtectionEnabled": False}]


async def test_protection_is_renewed_before_it_expires(ecs_agent: FakeEcsAgent,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    protection = TaskProtection(ecs_agent.url, 2)
    clock = [1000.0]
    monkeypatch.setattr("toren_fargate.protection.time.monotonic", lambda: clock[0])
    try:
        await protection.update(busy=True)
        clock[0] += 50  # 70 s of 120 left: no renewal yet
        await protection.update(busy=True)
        clock[0] += 20  # 50 s left: less than half
        await protection.update(busy=True)
    finally:
        await protection.close()
    assert ecs_agent.states() == [True, True]


async def test_an_agent_that_fails_or_refuses_is_a_typed_retryable_error(
        ecs_agent: FakeEcsAgent) -> None:
    protection = TaskProtection(ecs_agent.url, 30)
    try:
        ecs_agent.fail_with = 500
        with pytest.raises(ProtectionError, match="answered 500"):
            await protection.update(busy=True)
        assert not protection.enabled  # asked again on the next tick
        ecs_agent.fail_with = None
        ecs_agent.refuse = True
        with pytest.raises(ProtectionError, match="TASK_NOT_VALID"):
            await protection.update(busy=True)
        ecs_agent.refuse = False
        await protection.update(busy=True)
        assert protection.enabled and ecs_agent.states() == [True]
    finally:
        await protection.close()
    unreachable = TaskProtection(f"http://127.0.0.1:{free_port()}", 30)
    try:
        with pytest.raises(ProtectionError, match="could not set task protection") as info:
            await unreachable.update(busy=True)
        assert info.value.retryable
    finally:
        await unreachable.close()


# -- the queue-depth metric ---------------------------------------------------------------------

async def test_the_queue_depth_metric_lands_in_cloudwatch(sqs_env: dict[str, str]) -> None:
    endpoint = sqs_env["TOREN_SQS_ENDPOINT_URL"]
    namespace = f"Toren-{sqs_env['TOREN_SQS_PREFIX'].rstrip('-')}"
    settings = FargateSettings(metric_namespace=namespace, fleet="crews",
                               cloudwatch_endpoint_url=endpoint)
    publisher = QueueDepthPublisher(settings)
    try:
        await publisher.publish({"alpha": {"ready": 3, "in_flight": 2, "delayed": 4},
                                 "beta": {"ready": 1, "in_flight": 0, "delayed": 0}})
    finally:
        publisher.close()
    client = cloudwatch(endpoint)
    listed = client.list_metrics(Namespace=namespace)["Metrics"]  # type: ignore[attr-defined]
    found = {(m["MetricName"], tuple(sorted((d["Name"], d["Value"]) for d in m["Dimensions"])))
             for m in listed}
    assert found == {("QueueDepth", (("Fleet", "crews"),)),
                     ("QueueDelayed", (("Fleet", "crews"),)),
                     ("QueueDepth", (("Agent", "alpha"), ("Fleet", "crews"))),
                     ("QueueDepth", (("Agent", "beta"), ("Fleet", "crews")))}
    now = datetime.now(UTC)
    answer = client.get_metric_data(  # type: ignore[attr-defined]
        MetricDataQueries=[{"Id": "depth", "MetricStat": {
            "Metric": {"Namespace": namespace, "MetricName": "QueueDepth",
                       "Dimensions": [{"Name": "Fleet", "Value": "crews"}]},
            "Period": 60, "Stat": "Maximum"}}],
        StartTime=now - timedelta(minutes=5), EndTime=now + timedelta(minutes=5))
    assert answer["MetricDataResults"][0]["Values"] == [6.0]  # ready + in flight


def test_metric_data_sum_ready_and_in_flight_and_keep_delayed_apart() -> None:
    data = depth_data("f", {"a": {"ready": 1, "in_flight": 1, "delayed": 7}})
    assert [(d["MetricName"], d["Value"]) for d in data] == [
        ("QueueDepth", 2.0), ("QueueDelayed", 7.0), ("QueueDepth", 2.0)]


async def test_unreachable_cloudwatch_is_a_typed_retryable_error(
        sqs_env: dict[str, str]) -> None:
    publisher = QueueDepthPublisher(FargateSettings(
        cloudwatch_endpoint_url=f"http://127.0.0.1:{free_port()}"))
    try:
        with pytest.raises(MetricError, match="CloudWatch is unreachable") as info:
            await publisher.publish({"a": {"ready": 1, "in_flight": 0, "delayed": 0}})
        assert info.value.retryable
    finally:
        publisher.close()


# -- settings -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "value", "says"), [
    ("TOREN_FARGATE_STOP_TIMEOUT", "500", "TOREN_FARGATE_STOP_TIMEOUT='500'"),
    ("TOREN_FARGATE_STOP_TIMEOUT", "soon", "the task's stopTimeout"),
    ("TOREN_FARGATE_HEALTH_PORT", "70000", "a port number"),
    ("TOREN_FARGATE_PROTECTION_MINUTES", "0", "ECS allows 1-2880"),
    ("TOREN_FARGATE_METRIC_INTERVAL", "nan", "TOREN_FARGATE_METRIC_INTERVAL='nan'"),
    ("TOREN_FARGATE_METRIC_NAMESPACE", "AWS/SQS", "not starting with AWS/"),
    ("TOREN_FARGATE_FLEET", "", "the metric's Fleet dimension"),
])
def test_bad_settings_are_refused_with_the_variable_named(name: str, value: str,
                                                          says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        FargateSettings.from_env({name: value})


def test_a_drain_that_cannot_fit_the_stop_timeout_refuses_to_start() -> None:
    settings = FargateSettings.from_env({"TOREN_FARGATE_STOP_TIMEOUT": "30"})
    settings.check_drain_fits(22.0)
    with pytest.raises(ConfigError, match=r"TOREN_SHUTDOWN_GRACE=25 needs a stopTimeout of at "
                                          r"least 33 s"):
        settings.check_drain_fits(25.0)
    assert FargateSettings.from_env({"ECS_AGENT_URI": "http://169.254.170.2/v4/x/"}
                                    ).agent_uri == "http://169.254.170.2/v4/x"


# -- the runtime around a real worker, on SQS ------------------------------------------------

async def test_a_busy_fargate_worker_is_protected_healthy_and_counted(
        sqs_env: dict[str, str], ecs_agent: FakeEcsAgent, toren_runtime,
        make_agent_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    namespace = f"Toren-{sqs_env['TOREN_SQS_PREFIX'].rstrip('-')}"
    for name, value in {"ECS_AGENT_URI": ecs_agent.url, "TOREN_FARGATE_HEALTH_PORT": str(port),
                        "TOREN_FARGATE_HEALTH_HOST": "127.0.0.1",
                        "TOREN_FARGATE_METRIC_INTERVAL": "0.3",
                        "TOREN_FARGATE_METRIC_NAMESPACE": namespace,
                        "TOREN_CLOUDWATCH_ENDPOINT_URL": sqs_env["TOREN_SQS_ENDPOINT_URL"],
                        "TOREN_SCRIPTED_DELAY": "2"}.items():
        monkeypatch.setenv(name, value)
    runtime = await toren_runtime([make_agent_dir("crew")], queue_driver="sqs",
                                  runtime_driver="fargate", shutdown_grace_s=5.0)
    assert isinstance(runtime.workers, FargateRuntime)
    assert "scale-in protection while busy" in runtime.workers.description
    health_url = f"http://127.0.0.1:{port}/healthz"
    async with aiohttp.ClientSession() as session:
        async with session.get(health_url) as response:
            idle = await response.json()
            assert response.status == 200 and idle["in_flight"] == 0
        run_id = await runtime.start_run("crew", "postgres")
        for _ in range(200):  # the model call takes 2 s: the worker is busy meanwhile
            async with session.get(health_url) as response:
                busy = await response.json()
            if busy["in_flight"] and busy["protected"]:
                break
            await asyncio.sleep(0.05)
        assert (busy["status"], busy["in_flight"], busy["protected"]) == ("ok", 1, True)
        async with session.get(f"http://127.0.0.1:{port}/other") as response:
            assert response.status == 404
        async with session.post(health_url, data=b"x" * 4096) as response:
            assert response.status == 405
        record = await runtime.wait_for_run(run_id, timeout_s=60)
        assert record.status == "completed", record.error
    for _ in range(100):  # the protection loop looks every second
        if ecs_agent.states() == [True, False]:
            break
        await asyncio.sleep(0.1)
    assert ecs_agent.states() == [True, False], ecs_agent.requests
    assert ecs_agent.requests[0]["ExpiresInMinutes"] == 60
    listed = cloudwatch(sqs_env["TOREN_SQS_ENDPOINT_URL"]).list_metrics(  # type: ignore[attr-defined]
        Namespace=namespace, MetricName="QueueDepth")["Metrics"]
    assert {tuple((d["Name"], d["Value"]) for d in m["Dimensions"]) for m in listed} == {
        (("Fleet", "default"),), (("Fleet", "default"), ("Agent", "crew"))}

    workers = runtime.workers
    stopping = asyncio.create_task(runtime.stop())
    await asyncio.sleep(0)
    assert workers.health_state()[0] is False  # draining: unhealthy for the load balancer
    await stopping
