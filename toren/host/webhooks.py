"""Completion webhooks, the sending half: claim due deliveries, POST them signed, record each
attempt, retry with backoff for a bounded time (docs/guides/webhooks.md).

The store writes a delivery in the transaction that changes a run's status
(``toren.seams.store.webhooks``); a run that ends while no host runs is told about once one
starts. Each delivery's body is fixed at its first attempt and its ``id`` is the event id, the
same on every retry, so a receiver deduplicates. Destinations are checked at send time against
server-side request forgery: every address the host resolves to must be public (unless
``TOREN_WEBHOOK_ALLOW_PRIVATE``), the connection goes to a checked address, and redirects are
not followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp.abc import ResolveResult

from toren.config import Settings
from toren.core.webhooks import (
    WebhookSubscription,
    refused_address,
    refused_host,
    retry_delay,
)
from toren.errors import InvalidWebhook
from toren.seams.store.webhooks import (
    AttemptOutcome,
    WebhookAttempt,
    WebhookDelivery,
    WebhookStore,
)
from toren.webhooks import SIGNATURE_HEADER, sign

log = logging.getLogger(__name__)

#: Deliveries claimed per round; a full round is followed by the next one at once.
DISPATCH_BATCH = 20
#: Seconds between a dispatcher's deletions of old ended deliveries.
FORGET_EVERY_S = 3600.0
#: Seconds a claimed delivery stays hidden past its attempt's timeout.
CLAIM_MARGIN_S = 10.0
#: Characters of an error (or of the receiver's answer) kept with an attempt.
MAX_ERROR_CHARS = 300
#: The body's builder: the delivery's JSON body from the run as it is now.
DescribeDelivery = Callable[[WebhookDelivery], Awaitable[Mapping[str, Any]]]


class WebhookRefused(Exception):  # not an OSError: aiohttp must not wrap it
    """The destination is not allowed (a private, loopback, link-local, ... address); not
    retried."""


class CheckedResolver(aiohttp.ThreadedResolver):
    """Resolves a webhook's host and refuses it unless every address is allowed: aiohttp then
    connects to one of exactly these addresses (no second lookup an attacker's DNS could
    answer differently)."""

    def __init__(self, allow_private: bool) -> None:
        super().__init__()
        self.allow_private = allow_private

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        results = await super().resolve(host, port, family)
        if not self.allow_private:
            for result in results:
                why = refused_address(ipaddress.ip_address(result["host"].split("%")[0]))
                if why is not None:
                    raise WebhookRefused(f"{host} resolves to {why}; set "
                                         "TOREN_WEBHOOK_ALLOW_PRIVATE=1 to allow it")
        return results


class WebhookSender:
    """POSTs one signed body and tells what happened; one HTTP session per dispatcher."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                resolver=CheckedResolver(self.settings.webhook_allow_private),
                # each new connection is checked again (a name may change its addresses)
                use_dns_cache=False, limit=50)
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=False,  # never through an environment proxy
                timeout=aiohttp.ClientTimeout(total=self.settings.webhook_timeout_s))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, str]:
        """The receiver's status and the start of its answer. Raises ``WebhookRefused`` for a
        destination not allowed, ``aiohttp.ClientError``, ``OSError`` or ``TimeoutError`` when
        no answer came."""
        if not self.settings.webhook_allow_private:
            why = refused_host(url)  # a literal address is never resolved: check it here
            if why is not None:
                raise WebhookRefused(f"{why}; set TOREN_WEBHOOK_ALLOW_PRIVATE=1 to allow it")
        async with self._client().post(url, data=body, headers=dict(headers),
                                       allow_redirects=False) as response:
            answer = await response.content.read(MAX_ERROR_CHARS)
            return response.status, answer.decode("utf-8", "replace")


class WebhookDispatcher:
    """Sends the deliveries of ``agents``; started by the host with its workers.

    Args:
        store: the store (its ``WebhookStore`` interface).
        agents: whose deliveries to send (each fleet sends its own agents').
        settings: ``webhook_*`` settings (timeout, retry base, cap and window, secret,
            private destinations) and ``poll_interval_s``.
        describe: builds a delivery's body (called once, at its first attempt).
        env: where secrets named by ``secret_env`` are read (the process environment).
    """

    def __init__(self, store: WebhookStore, agents: Sequence[str], settings: Settings,
                 describe: DescribeDelivery, *, env: Mapping[str, str] | None = None) -> None:
        self.store = store
        self.agents = list(agents)
        self.settings = settings
        self.describe = describe
        self.env = os.environ if env is None else env
        self.id = f"webhooks-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.sender = WebhookSender(settings)
        self._loop: asyncio.Task[None] | None = None
        self._next_retry: float | None = None
        self._forgotten_at: float | None = None

    async def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="toren-webhooks")

    async def stop(self) -> None:
        """Stop at once; a delivery mid-send comes back after its claim's visibility (and is
        sent again: receivers deduplicate on its id)."""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None
        await self.sender.close()

    async def dispatch_once(self) -> int:
        """Claim up to ``DISPATCH_BATCH`` due deliveries and send them concurrently; return how
        many were claimed."""
        # an attempt takes at most the timeout; the margin covers recording it (a claim that
        # expires anyway is sent again by whoever claims it next: receivers deduplicate)
        visibility_s = self.settings.webhook_timeout_s + CLAIM_MARGIN_S
        deliveries = await self.store.claim_webhook_deliveries(self.agents, self.id,
                                                               DISPATCH_BATCH, visibility_s)
        if deliveries:
            await asyncio.gather(*(self.deliver(d) for d in deliveries))
        return len(deliveries)

    async def deliver(self, delivery: WebhookDelivery) -> AttemptOutcome:
        """One attempt of ``delivery``: sign, POST, record; return what became of it."""
        started_at = datetime.now(UTC)
        began = time.monotonic()
        status: int | None = None
        error: str | None = None
        outcome: AttemptOutcome = "retry"
        try:
            body = delivery.body
            if body is None:
                built = json.dumps(dict(await self.describe(delivery)), separators=(",", ":"),
                                   ensure_ascii=False)
                body = await self.store.fix_webhook_body(delivery.id, built)
            secret = self._secret(delivery)
            raw = body.encode("utf-8")
            status, answer = await self.sender.post(delivery.url, raw, {
                "Content-Type": "application/json", "User-Agent": "Toren-Webhooks/1",
                "Toren-Event-Id": delivery.id, "Toren-Event": delivery.event,
                SIGNATURE_HEADER: sign(secret, raw)})
            self.settings.crash_point("after_webhook_sent")
            if 200 <= status < 300:
                outcome = "delivered"
            elif 300 <= status < 400:
                error = f"HTTP {status}: redirects are not followed; give the final URL"
            else:
                error = f"HTTP {status}: {answer}".strip()
        except WebhookRefused as exc:
            error, outcome = str(exc), "failed"
        except SecretMissing as exc:
            error = str(exc)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the body could not be built (the run gone, say)
            log.exception("webhook %s of run %s failed", delivery.id, delivery.run_id)
            error = f"{type(exc).__name__}: {exc}"
        retry_in_s = 0.0
        if outcome == "retry":
            retry_in_s = retry_delay(delivery.attempts, self.settings.webhook_retry_base_s,
                                     self.settings.webhook_retry_max_delay_s)
            waited = (datetime.now(UTC) - delivery.occurred_at).total_seconds()
            if waited + retry_in_s > self.settings.webhook_retry_for_s:
                outcome = "failed"
                error = (f"{error}; gave up after {delivery.attempts} attempt(s) "
                         f"(TOREN_WEBHOOK_RETRY_FOR={self.settings.webhook_retry_for_s:g}s)")
        attempt = WebhookAttempt(delivery.attempts, started_at,
                                 (time.monotonic() - began) * 1000.0, status,
                                 error[:MAX_ERROR_CHARS] if error else None)
        await self.store.record_webhook_attempt(delivery.id, self.id, attempt, outcome,
                                                retry_in_s)
        if outcome == "retry":
            due = time.monotonic() + retry_in_s
            self._next_retry = due if self._next_retry is None else min(self._next_retry, due)
            log.info("webhook %s to %s: %s; retrying in %.1fs", delivery.id, delivery.url,
                     error, retry_in_s)
        elif outcome == "failed":
            log.warning("webhook %s to %s failed: %s", delivery.id, delivery.url, error)
        return outcome

    def _secret(self, delivery: WebhookDelivery) -> str:
        if delivery.secret_env is not None:
            secret = self.env.get(delivery.secret_env)
            if not secret:
                raise SecretMissing(f"the signing secret's variable {delivery.secret_env} is "
                                    "not set in the sending process")
            return secret
        if not self.settings.webhook_secret:
            raise SecretMissing("no signing secret: set TOREN_WEBHOOK_SECRET")
        return self.settings.webhook_secret

    async def forget_old(self) -> None:
        """Delete deliveries that ended more than ``TOREN_WEBHOOK_KEEP`` ago, at most once per
        ``FORGET_EVERY_S`` (every dispatcher may: the delete is idempotent)."""
        now = time.monotonic()
        if self._forgotten_at is not None and now - self._forgotten_at < FORGET_EVERY_S:
            return
        self._forgotten_at = now
        forgotten = await self.store.forget_webhook_deliveries(self.settings.webhook_keep_s)
        if forgotten:
            log.info("forgot %d webhook deliveries ended more than %gs ago", forgotten,
                     self.settings.webhook_keep_s)

    async def _run(self) -> None:
        while True:
            try:
                await self.forget_old()
                sent = await self.dispatch_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the loop must outlive any one failure (database blips)
                log.warning("webhook dispatcher %s failed (%s); retrying", self.id, exc)
                sent = 0
            if sent < DISPATCH_BATCH:
                wait_s = self.settings.poll_interval_s
                if self._next_retry is not None:
                    wait_s = max(0.0, min(wait_s, self._next_retry - time.monotonic()))
                    self._next_retry = None
                await self.store.wait_webhooks(wait_s)


class SecretMissing(Exception):
    """The signing secret is not set in this process: the attempt fails and is retried."""


def admit_webhooks(subscriptions: Sequence[WebhookSubscription], settings: Settings, *,
                   field: str = "webhook") -> list[dict[str, Any]]:
    """The subscriptions given with a run or session, as the store keeps them, once they pass
    what can be checked at submission: a literal private address or ``localhost`` (unless
    ``TOREN_WEBHOOK_ALLOW_PRIVATE``), and a signing secret to sign them with.
    ``InvalidWebhook`` naming ``field`` otherwise. Called by ``Runtime.start_run`` and
    ``SessionsService.start``; where a host name resolves to is checked at send time."""
    for sub in subscriptions:
        why = None if settings.webhook_allow_private else refused_host(sub.url)
        if why is not None:
            raise InvalidWebhook(f"{field}: {sub.url} is refused ({why}); webhooks go to public "
                                 "addresses unless TOREN_WEBHOOK_ALLOW_PRIVATE=1")
        if sub.secret_env is None and not settings.webhook_secret:
            raise InvalidWebhook(f"{field}: this deployment has no signing secret for "
                                 "webhooks; set TOREN_WEBHOOK_SECRET")
    return [sub.to_json() for sub in subscriptions]
