"""The queue-depth metric the worker service autoscales on, sent to CloudWatch.

Every ``TOREN_FARGATE_METRIC_INTERVAL`` seconds a worker reads ``Queue.depth`` for the agents
it serves (those of its lane, ``TOREN_LANE``: a long-lane service, with its own
``TOREN_FARGATE_FLEET``, scales on its own queues) and sends, in one ``PutMetricData`` call
to namespace ``TOREN_FARGATE_METRIC_NAMESPACE`` (``Toren``):

- ``QueueDepth`` with dimension ``Fleet=<TOREN_FARGATE_FLEET>``: messages ready or in flight
  for the fleet's agents together: what the scaling policy tracks (``Maximum`` statistic:
  every worker of the fleet sends the same figure);
- ``QueueDepth`` with dimensions ``Fleet``, ``Agent=<name>``, per agent;
- ``QueueDelayed`` with dimension ``Fleet``: messages not due yet (not work to scale for).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import botocore.config
import botocore.exceptions

from toren.plugin import TorenError
from toren_fargate.settings import FargateSettings

log = logging.getLogger(__name__)

METRIC = "QueueDepth"
DELAYED_METRIC = "QueueDelayed"


class MetricError(TorenError):
    """CloudWatch refused or could not be reached (retried on the next interval)."""

    code = "metric_failed"
    retryable = True


def depth_data(fleet: str, depth: Mapping[str, Mapping[str, int]]) -> list[dict[str, Any]]:
    """The ``MetricData`` of one ``PutMetricData`` call for a ``Queue.depth`` answer."""
    fleet_dim = {"Name": "Fleet", "Value": fleet}
    total = sum(row.get("ready", 0) + row.get("in_flight", 0) for row in depth.values())
    delayed = sum(row.get("delayed", 0) for row in depth.values())
    data = [{"MetricName": METRIC, "Dimensions": [fleet_dim], "Value": float(total),
             "Unit": "Count"},
            {"MetricName": DELAYED_METRIC, "Dimensions": [fleet_dim], "Value": float(delayed),
             "Unit": "Count"}]
    for agent, row in sorted(depth.items()):
        data.append({"MetricName": METRIC,
                     "Dimensions": [fleet_dim, {"Name": "Agent", "Value": agent}],
                     "Value": float(row.get("ready", 0) + row.get("in_flight", 0)),
                     "Unit": "Count"})
    return data


class QueueDepthPublisher:
    """Sends the queue-depth metric (see the module docstring) with boto3, in a thread.

    Args:
        settings: namespace, fleet, region and endpoint.
    """

    def __init__(self, settings: FargateSettings) -> None:
        self.settings = settings
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="toren-metric")
        self._client = boto3.client(
            "cloudwatch", region_name=settings.region,
            endpoint_url=settings.cloudwatch_endpoint_url,
            config=botocore.config.Config(retries={"mode": "standard", "max_attempts": 3},
                                          connect_timeout=5, read_timeout=10))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def publish(self, depth: Mapping[str, Mapping[str, int]]) -> list[dict[str, Any]]:
        """Send one ``PutMetricData`` for ``depth``; return the data sent."""
        data = depth_data(self.settings.fleet, depth)
        # PutMetricData takes at most 1,000 data per call
        for start in range(0, len(data), 1000):
            await self._call(Namespace=self.settings.metric_namespace,
                             MetricData=data[start:start + 1000])
        return data

    async def _call(self, **kwargs: Any) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor,
                                       functools.partial(self._client.put_metric_data, **kwargs))
        except botocore.exceptions.ClientError as exc:
            error = exc.response.get("Error", {})
            raise MetricError(f"CloudWatch PutMetricData failed: {error.get('Code')}: "
                              f"{error.get('Message')} (the task role needs "
                              "cloudwatch:PutMetricData)") from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise MetricError(f"CloudWatch is unreachable: {exc}") from exc

