"""The ``sqs`` queue driver: one SQS queue per agent, fed by the host's outbox relay.

- **Labels.** Each agent has its own queue, ``<prefix><agent>``, and dead-letter queue,
  ``<prefix><agent>-dlq``: a worker receives only from the queues of the agents it serves, so
  a fleet never sees another fleet's messages (SQS cannot filter a receive by attribute).
- **After commit.** ``reads_outbox`` is ``False``: an append writes its messages to the store's
  outbox in its own transaction, and the outbox relay sends them here once committed (a crash
  between commit and send loses nothing: the relay sends again; handlers are idempotent).
- **Visibility.** A received message is hidden for the lease TTL; the worker's heartbeat
  extends it (``renew``) while the work lasts.
- **Deliveries.** ``attempts`` is SQS's ``ApproximateReceiveCount`` plus the deliveries the
  message had before it was deferred (carried in its body): a deferral does not count. A
  message whose attempts pass ``TOREN_MAX_DELIVERIES`` is moved to the dead-letter queue by
  the driver and returned as dead, so the worker fails its run with the reason. The queue's
  own redrive policy (at ``TOREN_MAX_DELIVERIES + 5`` receives) is only a backstop.
- **Delays.** The outbox holds delayed messages until due, so sends carry no delay. ``defer``
  re-sends the message with ``DelaySeconds`` (up to 15 minutes); a longer deferral hops: the
  copy carries its due time and is deferred again, without counting, until due.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from toren.plugin import Settings
from toren.plugin.drivers import OutgoingMessage, Queue, QueueMessage, Store
from toren_sqs.batching import MAX_BATCH, Batcher
from toren_sqs.settings import MAX_DELAY_S, SqsSettings
from toren_sqs.sqs import POOL_SIZE, SqsClient

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.0,<2"

log = logging.getLogger(__name__)

#: The redrive backstop: SQS moves a message to the dead-letter queue after this many more
#: receives than TOREN_MAX_DELIVERIES (the driver dead-letters it first, with a reason).
REDRIVE_MARGIN = 5


@dataclass(frozen=True)
class Body:
    """What a queue message carries (its JSON body)."""

    agent: str
    run_id: str | None
    kind: str
    payload: dict[str, Any]
    #: deliveries before the last deferral (they count towards dead-lettering)
    prior_attempts: int = 0
    #: epoch seconds before which the message is not due (a deferral longer than SQS allows)
    not_before: float | None = None
    #: why the message was dead-lettered (in the dead-letter queue only)
    dead_reason: str | None = None

    def encode(self) -> str:
        return json.dumps({"agent": self.agent, "run_id": self.run_id, "kind": self.kind,
                           "payload": self.payload, "prior_attempts": self.prior_attempts,
                           "not_before": self.not_before, "dead_reason": self.dead_reason},
                          separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> Body:
        data = json.loads(text)
        return cls(agent=data["agent"], run_id=data.get("run_id"), kind=data["kind"],
                   payload=data.get("payload") or {},
                   prior_attempts=int(data.get("prior_attempts") or 0),
                   not_before=data.get("not_before"), dead_reason=data.get("dead_reason"))


@dataclass(frozen=True)
class Received:
    """A message this process received and has not acknowledged or handed back."""

    queue_url: str
    receipt: str
    body: Body
    attempts: int
    received_at: float


class SqsQueue(Queue):
    """Toren's queue on Amazon SQS (``TOREN_QUEUE=sqs``). Settings: see ``SqsSettings``."""

    reads_outbox = False

    def __init__(self, settings: Settings, store: Store,
                 sqs_settings: SqsSettings | None = None) -> None:
        super().__init__(settings, store)
        self.sqs_settings = sqs_settings or SqsSettings.from_env()
        self._executor: ThreadPoolExecutor | None = None
        self._client: SqsClient | None = None
        self._urls: dict[str, str] = {}
        self._dlq_urls: dict[str, str] = {}
        self._held: dict[int, Received] = {}
        self._ids = itertools.count(1)
        #: messages received by a long poll in ``wait``, for the next ``claim``
        self._buffer: list[tuple[str, dict[str, Any]]] = []
        self._last_claim: tuple[tuple[str, ...], int, float] | None = None
        self._sends: Batcher | None = None
        self._deletes: Batcher | None = None

    @property
    def description(self) -> str:
        where = self.sqs_settings.endpoint_url or f"AWS region {self.sqs_settings.region}"
        return (f"Amazon SQS at {where} (a queue per agent, "
                f"{self.sqs_settings.prefix}<agent>; sent by the outbox relay)")

    @property
    def client(self) -> SqsClient:
        if self._client is None:
            raise RuntimeError("the SQS queue is not open")
        return self._client

    async def open(self) -> None:
        # long polls hold a thread each for up to 20 s: a pool of their own keeps them from
        # starving anything else that runs in threads
        self._executor = ThreadPoolExecutor(max_workers=POOL_SIZE,
                                            thread_name_prefix="toren-sqs")
        self._client = SqsClient(self.sqs_settings, self._executor)
        await self.client.check()
        self._sends = Batcher(self.client.send_batch)
        self._deletes = Batcher(self.client.delete_batch)

    async def close(self) -> None:
        for batcher in (self._sends, self._deletes):
            if batcher is not None:
                await batcher.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._client = self._executor = None

    # -- queues ----------------------------------------------------------------------------

    async def queue_url(self, agent: str) -> str:
        """The URL of ``agent``'s queue, created (with its dead-letter queue and redrive
        policy) if missing and ``TOREN_SQS_CREATE_QUEUES`` allows."""
        if agent not in self._urls:
            dlq = await self.dead_letter_url(agent)
            max_receives = self.settings.max_deliveries + REDRIVE_MARGIN
            self._urls[agent] = await self.client.ensure_queue(
                self.sqs_settings.queue_name(agent), self.sqs_settings.create_queues,
                dead_letter_url=dlq, max_receives=max_receives)
        return self._urls[agent]

    async def dead_letter_url(self, agent: str) -> str:
        if agent not in self._dlq_urls:
            self._dlq_urls[agent] = await self.client.ensure_queue(
                self.sqs_settings.queue_name(agent, dead_letters=True),
                self.sqs_settings.create_queues)
        return self._dlq_urls[agent]

    # -- the worker's side ------------------------------------------------------------------

    async def claim(self, agents: Sequence[str], worker_id: str, limit: int,
                    visibility_s: float, max_deliveries: int
                    ) -> tuple[list[QueueMessage], list[QueueMessage]]:
        self._last_claim = (tuple(agents), limit, visibility_s)
        raw = [(url, m) for url, m in self._buffer]
        self._buffer.clear()
        if len(raw) < limit:
            raw += await self._receive(agents, limit - len(raw), visibility_s, wait_s=0)
        claimed: list[QueueMessage] = []
        dead: list[QueueMessage] = []
        for url, message in raw:
            if len(claimed) >= limit:  # more than asked (a long poll's extra): let them go
                await self._release(url, message["ReceiptHandle"])
                continue
            outcome = await self._accept(url, message, max_deliveries)
            if outcome is None:
                continue
            is_dead, queue_message = outcome
            (dead if is_dead else claimed).append(queue_message)
        return claimed, dead

    async def _receive(self, agents: Sequence[str], limit: int, visibility_s: float,
                       wait_s: int) -> list[tuple[str, dict[str, Any]]]:
        urls = [await self.queue_url(agent) for agent in agents]
        if not urls or limit <= 0:
            return []
        per_queue = max(1, min(MAX_BATCH, math.ceil(limit / len(urls))))
        visibility = max(1, math.ceil(visibility_s))
        batches = await asyncio.gather(*(
            self.client.receive(url, per_queue, visibility, wait_s) for url in urls))
        return [(url, message) for url, messages in zip(urls, batches, strict=True)
                for message in messages]

    async def _accept(self, url: str, message: dict[str, Any], max_deliveries: int
                      ) -> tuple[bool, QueueMessage] | None:
        receipt = message["ReceiptHandle"]
        try:
            body = Body.decode(message["Body"])
        except (ValueError, KeyError, TypeError):
            # not a Toren message (someone else sent it): keep it out of the way, never lose it
            log.error("SQS message %s on %s is not a Toren message; moved to the dead-letter "
                      "queue", message.get("MessageId"), url)
            await self._dead_letter_raw(url, message)
            return None
        receives = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        attempts = body.prior_attempts + receives
        if body.not_before is not None and body.not_before > time.time():
            # a long deferral hopping towards its due time: not a delivery
            await self._resend(url, receipt, body, attempts - 1, body.not_before - time.time())
            return None
        local_id = next(self._ids)
        queue_message = QueueMessage(id=local_id, agent=body.agent, run_id=body.run_id,
                                     kind=body.kind, payload=body.payload, attempts=attempts)
        if attempts > max_deliveries:
            reason = (f"delivered {attempts - 1} times without completing "
                      f"(TOREN_MAX_DELIVERIES={max_deliveries})")
            await self.client.send(await self.dead_letter_url(body.agent),
                                   replace(body, dead_reason=reason).encode(), 0)
            await self._delete(url, receipt)
            return True, queue_message
        self._held[local_id] = Received(url, receipt, body, attempts, time.monotonic())
        return False, queue_message

    async def ack(self, message: QueueMessage, worker_id: str) -> None:
        held = self._held.pop(message.id, None)
        if held is not None:
            await self._delete(held.queue_url, held.receipt)

    async def defer(self, message: QueueMessage, worker_id: str, delay_s: float) -> None:
        held = self._held.pop(message.id, None)
        if held is not None:
            await self._resend(held.queue_url, held.receipt, held.body, held.attempts - 1,
                               delay_s)

    async def return_unknown(self, worker_id: str, held: Sequence[int]) -> int:
        """Hand back, uncounted and visible at once, every message this process received and
        still holds except ``held``: a stopping worker's (``held`` empty) whose handlers did
        not finish within the grace, so another task takes them without waiting for their
        visibility timeout. A receive whose answer was lost cannot be handed back: SQS gives
        the receipt handles only in that answer; those messages reappear after their
        visibility timeout (one lease TTL) and count that receive as a delivery."""
        keep = set(held)
        returned = 0
        for local_id in [local_id for local_id in self._held if local_id not in keep]:
            message = self._held.pop(local_id)
            try:
                await self._resend(message.queue_url, message.receipt, message.body,
                                   message.attempts - 1, 0)
                returned += 1
            except Exception as exc:  # it comes back after its visibility timeout anyway
                log.warning("could not hand back an SQS message (%s); it is visible again "
                            "after its visibility timeout", exc or type(exc).__name__)
        return returned

    async def renew(self, worker_id: str, message_ids: Sequence[int],
                    visibility_s: float) -> None:
        by_queue: dict[str, list[str]] = {}
        for message_id in message_ids:
            held = self._held.get(message_id)
            if held is not None:
                by_queue.setdefault(held.queue_url, []).append(held.receipt)
        visibility = max(1, math.ceil(visibility_s))
        await asyncio.gather(*(self.client.change_visibility(url, receipts, visibility)
                               for url, receipts in by_queue.items()))

    async def wait(self, timeout_s: float) -> None:
        """Long-poll the queues of the last claim (up to ``TOREN_SQS_WAIT_SECONDS``, within
        ``timeout_s``); what arrives is kept for the next ``claim``."""
        if self._last_claim is None or self._buffer:
            await asyncio.sleep(timeout_s)
            return
        agents, limit, visibility_s = self._last_claim
        wait_s = max(1, min(self.sqs_settings.wait_s, int(timeout_s)))
        self._buffer += await self._receive(agents, limit, visibility_s, wait_s=wait_s)

    async def depth(self, agents: Sequence[str]) -> dict[str, dict[str, int]] | None:
        """SQS's approximate counts per agent queue (``GetQueueAttributes``): ``ready``
        (visible), ``in_flight`` (received, not deleted) and ``delayed``. Messages held in the
        outbox until due are not counted."""
        urls = [await self.queue_url(agent) for agent in agents]
        counts = await asyncio.gather(*(self.client.queue_counts(url) for url in urls))
        return dict(zip(agents, counts, strict=True))

    # -- the relay's side -------------------------------------------------------------------

    async def enqueue(self, agent: str, run_id: str | None, message: OutgoingMessage) -> None:
        body = Body(agent=agent, run_id=run_id, kind=message.kind, payload=message.payload)
        await self._send(await self.queue_url(agent), body, message.delay_s)

    # -- helpers ----------------------------------------------------------------------------

    async def _send(self, url: str, body: Body, delay_s: float) -> None:
        if delay_s > MAX_DELAY_S:
            body = replace(body, not_before=time.time() + delay_s)
        delay = min(MAX_DELAY_S, max(0, math.ceil(delay_s)))
        assert self._sends is not None
        await self._sends.submit(url, {"MessageBody": body.encode(), "DelaySeconds": delay})

    async def _resend(self, url: str, receipt: str, body: Body, prior_attempts: int,
                      delay_s: float) -> None:
        """Send a copy (counting ``prior_attempts``) visible after ``delay_s``, then delete the
        original: a crash in between leaves both, and a duplicate is harmless."""
        copy = replace(body, prior_attempts=max(0, prior_attempts), not_before=None)
        await self._send(url, copy, delay_s)
        await self._delete(url, receipt)

    async def _delete(self, url: str, receipt: str) -> None:
        assert self._deletes is not None
        try:
            await self._deletes.submit(url, {"ReceiptHandle": receipt})
        except Exception as exc:  # another worker holds it now: it is that worker's to end
            log.debug("SQS delete on %s failed (%s); the message stays with its new holder",
                      url, exc)

    async def _release(self, url: str, receipt: str) -> None:
        await self.client.change_visibility(url, [receipt], 0)

    async def _dead_letter_raw(self, url: str, message: dict[str, Any]) -> None:
        dlq = url + "-dlq" if not url.endswith("-dlq") else url
        await self.client.send(dlq, str(message.get("Body", "")), 0)
        await self._delete(url, message["ReceiptHandle"])

