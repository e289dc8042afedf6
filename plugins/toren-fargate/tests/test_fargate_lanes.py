"""A long-lane worker service on SQS (``TOREN_LANE=long``): it receives only from the long
agents' queues, and its queue-depth metric, under its own ``Fleet``, counts only those queues,
so the long service autoscales on its own work (aws/: the ``worker-long`` service)."""

from __future__ import annotations

import asyncio

import boto3
import pytest


async def test_a_long_lane_fargate_worker_works_and_counts_only_long_agents_queues(
        sqs_env: dict[str, str], toren_runtime, make_agent_dir,
        monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = sqs_env["TOREN_SQS_ENDPOINT_URL"]
    namespace = f"Toren-{sqs_env['TOREN_SQS_PREFIX'].rstrip('-')}-lanes"
    for name, value in {"TOREN_FARGATE_HEALTH_PORT": "0",
                        "TOREN_FARGATE_METRIC_INTERVAL": "0.3",
                        "TOREN_FARGATE_METRIC_NAMESPACE": namespace,
                        "TOREN_FARGATE_FLEET": "crews-long",
                        "TOREN_CLOUDWATCH_ENDPOINT_URL": endpoint}.items():
        monkeypatch.setenv(name, value)
    quick, slow = make_agent_dir("quick"), make_agent_dir("slow", runtime="long")
    runtime = await toren_runtime([quick, slow], queue_driver="sqs", runtime_driver="fargate",
                                  shutdown_grace_s=5.0, lane="long")
    assert runtime.lane_agents == ["slow"]
    assert runtime.workers.health_state()[1]["lane"] == "long"

    slow_run = await runtime.start_run("slow", "the archive")
    quick_run = await runtime.start_run("quick", "not my lane")
    assert (await runtime.wait_for_run(slow_run, timeout_s=60)).status == "completed"
    # the short agent's message reached its own SQS queue and waits there for a short worker
    depth: dict[str, dict[str, int]] | None = {}
    for _ in range(100):
        depth = await runtime.queue.depth(["quick"])
        if depth and depth["quick"]["ready"] == 1:
            break
        await asyncio.sleep(0.1)
    assert depth == {"quick": {"ready": 1, "in_flight": 0, "delayed": 0}}
    assert (await runtime.get_run(quick_run)).status == "queued"

    client = boto3.client("cloudwatch", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    for _ in range(50):
        listed = client.list_metrics(Namespace=namespace, MetricName="QueueDepth")["Metrics"]
        if listed:
            break
        await asyncio.sleep(0.1)
    assert {tuple((d["Name"], d["Value"]) for d in m["Dimensions"]) for m in listed} == {
        (("Fleet", "crews-long"),), (("Fleet", "crews-long"), ("Agent", "slow"))}
