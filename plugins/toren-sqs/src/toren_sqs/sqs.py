"""The few SQS calls the driver makes, run on boto3 in a thread pool of the driver's own
(boto3 blocks; the event loop must not)."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import boto3
import botocore.config
import botocore.exceptions

from toren.plugin import ConfigError, TorenError
from toren_sqs.settings import SqsSettings

T = TypeVar("T")

#: Threads (and HTTP connections) for SQS calls: long polls hold one each for up to 20 s.
POOL_SIZE = 16


class SqsError(TorenError):
    """SQS refused or could not be reached (retryable: the worker tries again)."""

    code = "sqs_error"
    retryable = True


class SqsClient:
    """An SQS client whose calls are awaitable.

    Args:
        settings: where SQS is.
        executor: the threads the blocking boto3 calls run in.
    """

    def __init__(self, settings: SqsSettings, executor: ThreadPoolExecutor) -> None:
        self.settings = settings
        self._executor = executor
        self._client = boto3.client(
            "sqs", region_name=settings.region, endpoint_url=settings.endpoint_url,
            config=botocore.config.Config(
                retries={"mode": "standard", "max_attempts": 4},
                # a long poll holds the connection up to 20 s
                read_timeout=settings.wait_s + 10, connect_timeout=5,
                max_pool_connections=POOL_SIZE))

    async def _call(self, method: Callable[..., T], /, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, functools.partial(method, **kwargs))
        except botocore.exceptions.ClientError as exc:
            error = exc.response.get("Error", {})
            raise SqsError(f"SQS {exc.operation_name} failed: {error.get('Code')}: "
                           f"{error.get('Message')}") from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise SqsError(f"SQS is unreachable: {exc}") from exc

    async def check(self) -> None:
        """One cheap call at startup, so bad credentials or a wrong endpoint fail there."""
        try:
            await self._call(self._client.list_queues, QueueNamePrefix=self.settings.prefix,
                             MaxResults=1)
        except SqsError as exc:
            raise ConfigError(f"{exc.message}; check the AWS credentials, AWS_REGION and "
                              "TOREN_SQS_ENDPOINT_URL") from exc

    async def ensure_queue(self, name: str, create: bool, *, dead_letter_url: str | None = None,
                           max_receives: int = 0) -> str:
        """The URL of queue ``name``; created if missing (when ``create``), with a redrive
        policy to ``dead_letter_url`` after ``max_receives`` receives."""
        try:
            found = await self._call(self._client.get_queue_url, QueueName=name)
            return str(found["QueueUrl"])
        except SqsError as exc:
            cause = exc.__cause__
            missing = (isinstance(cause, botocore.exceptions.ClientError)
                       and "NonExistentQueue" in str(cause.response.get("Error", {})
                                                     .get("Code", "")))
            if not missing:
                raise
            if not create:
                raise ConfigError(f"the SQS queue {name} does not exist and "
                                  "TOREN_SQS_CREATE_QUEUES=0: create it (aws/ does) or allow "
                                  "the driver to") from None
        attributes = {"MessageRetentionPeriod": str(14 * 24 * 3600)}
        if dead_letter_url is not None:
            dlq = await self._call(self._client.get_queue_attributes,
                                   QueueUrl=dead_letter_url, AttributeNames=["QueueArn"])
            attributes["RedrivePolicy"] = json.dumps({
                "deadLetterTargetArn": dlq["Attributes"]["QueueArn"],
                "maxReceiveCount": str(max_receives)})
        created = await self._call(self._client.create_queue, QueueName=name,
                                   Attributes=attributes)
        return str(created["QueueUrl"])

    async def receive(self, url: str, limit: int, visibility_s: int, wait_s: int
                      ) -> list[dict[str, Any]]:
        answer = await self._call(
            self._client.receive_message, QueueUrl=url, MaxNumberOfMessages=limit,
            VisibilityTimeout=visibility_s, WaitTimeSeconds=wait_s,
            MessageSystemAttributeNames=["ApproximateReceiveCount"])
        return list(answer.get("Messages", []))

    async def queue_counts(self, url: str) -> dict[str, int]:
        """The queue's approximate ``ready``, ``in_flight`` and ``delayed`` message counts."""
        answer = await self._call(
            self._client.get_queue_attributes, QueueUrl=url, AttributeNames=[
                "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed"])
        found = answer.get("Attributes", {})
        return {"ready": int(found.get("ApproximateNumberOfMessages", 0)),
                "in_flight": int(found.get("ApproximateNumberOfMessagesNotVisible", 0)),
                "delayed": int(found.get("ApproximateNumberOfMessagesDelayed", 0))}

    async def send(self, url: str, body: str, delay_s: int) -> None:
        await self._call(self._client.send_message, QueueUrl=url, MessageBody=body,
                         DelaySeconds=delay_s)

    async def send_batch(self, url: str, entries: list[dict[str, Any]]
                         ) -> list[Exception | None]:
        return await self._batch(self._client.send_message_batch, url, entries)

    async def delete_batch(self, url: str, entries: list[dict[str, Any]]
                           ) -> list[Exception | None]:
        return await self._batch(self._client.delete_message_batch, url, entries)

    async def change_visibility(self, url: str, receipts: list[str], visibility_s: int) -> None:
        for start in range(0, len(receipts), 10):
            entries = [{"Id": str(i), "ReceiptHandle": receipt,
                        "VisibilityTimeout": visibility_s}
                       for i, receipt in enumerate(receipts[start:start + 10])]
            # a receipt another worker took over fails alone; the rest are renewed
            await self._call(self._client.change_message_visibility_batch, QueueUrl=url,
                             Entries=entries)

    async def _batch(self, method: Callable[..., dict[str, Any]], url: str,
                     entries: list[dict[str, Any]]) -> list[Exception | None]:
        numbered = [{"Id": str(i), **entry} for i, entry in enumerate(entries)]
        answer = await self._call(method, QueueUrl=url, Entries=numbered)
        failed = {item["Id"]: item for item in answer.get("Failed", [])}
        return [SqsError(f"SQS refused a batch entry: {failed[str(i)].get('Code')}: "
                         f"{failed[str(i)].get('Message')}") if str(i) in failed else None
                for i in range(len(entries))]
