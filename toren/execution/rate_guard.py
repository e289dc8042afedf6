"""A task's side of the fleet's provider rate limits: wait for room in every matching bucket
before a model call, settle what the call used after it, pause the key's bucket for everyone on
a provider's 429 (``toren.core.rate_limits``, ``toren.seams.store.rate_limits``).

With no limits configured the task loop never reaches the store from here: no statement is
added to a model call. A parked call holds no pool connection (it sleeps on the store's
wake-ups, or until the time the store computed it will fit), keeps its task lease (the
worker's heartbeat renews it, as for any running task), and looks every few seconds whether
its run was cancelled, which ends the wait (``RunCancelled``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from toren.agents import AgentSpec
from toren.core.messages import ModelRequest, Usage
from toren.core.rate_limits import BucketLimit, RateLimits, estimate_input_tokens, pause_targets
from toren.errors import ProviderError, RunCancelled, TorenError
from toren.seams.model import Model
from toren.seams.store.rate_limits import RateLimitStore, RateRequest, RateSettlement

log = logging.getLogger(__name__)

#: Longest a parked call sleeps between looks (a lost wake-up, a cancelled run).
MAX_SLICE_S = 5.0


@dataclass(frozen=True)
class RateLimiter:
    """The deployment's limits and the store that keeps their shared budget, in
    ``ExecutionPorts.rate_limits`` (``limits.configured`` false without ``TOREN_RATE_LIMITS``:
    then only agents with ``limits.rate`` of their own take from it)."""

    store: RateLimitStore
    limits: RateLimits


@dataclass(frozen=True)
class RateHold:
    """A granted reservation: settled once the call ends."""

    call_id: int
    buckets: tuple[BucketLimit, ...]
    input_estimate: int
    key_env: str | None
    waited_s: float = 0.0
    blocked_by: str | None = None

    def started_fields(self) -> dict[str, Any]:
        """The ``ModelCallStarted`` fields that say the call waited (none if it did not)."""
        if self.waited_s <= 0:
            return {}
        return {"rate_limit_wait_s": round(self.waited_s, 3),
                "rate_limited_by": self.blocked_by}


class RateGuard:
    """Reservations of one task's model calls in the fleet's rate-limit buckets."""

    def __init__(self, limiter: RateLimiter | None, agent: AgentSpec, run_id: str, stream: str,
                 cancelled: Callable[[], Awaitable[bool]], slice_s: float = MAX_SLICE_S) -> None:
        self.limiter = limiter
        self.agent = agent
        self.run_id = run_id
        self.stream = stream
        self.cancelled = cancelled
        self.slice_s = slice_s
        #: Settlements not yet written (one batch after each append), each with the
        #: ``time.monotonic()`` its request was sent at (``None``: not sent).
        self.unsettled: list[tuple[RateSettlement, float | None]] = []

    async def acquire(self, model: Model, model_id: str, request: ModelRequest, epoch: int,
                      priority: int = 0) -> RateHold | None:
        """Wait until the call fits every bucket it matches and reserve it there; ``None``
        when no limits apply. ``RunCancelled`` if the run is cancelled meanwhile."""
        if self.limiter is None:
            return None
        limits = self.limiter.limits
        own = self.agent.limits.rate
        if not limits.configured and not own:
            return None  # no limits file and none of its own: not one statement
        buckets = limits.matching(model_id, model.key_env,
                                  (self.agent.name, own) if own else None)
        if not buckets:
            return None
        store = self.limiter.store
        estimate = estimate_input_tokens(request)
        started = time.monotonic()
        looked = started
        waiter: int | None = None
        blocked: str | None = None
        try:
            while True:
                waited = time.monotonic() - started if waiter is not None else 0.0
                decision = await store.reserve_rate(RateRequest(
                    buckets, limits.counted_s, 1, estimate, request.max_tokens, self.run_id,
                    self.stream, epoch, priority, waiter, round(waited, 3)))
                if decision.call_id is not None:
                    return RateHold(decision.call_id, buckets, estimate, model.key_env, waited,
                                    blocked)
                if waiter is None:
                    log.info("run %s: the model call waits for room in rate limit %s",
                             self.run_id, decision.blocked_by or "(behind another call)")
                waiter = decision.waiter_id
                blocked = decision.blocked_by or blocked
                now = time.monotonic()
                if now - looked >= self.slice_s:
                    looked = now
                    if await self.cancelled():
                        raise RunCancelled(f"run {self.run_id} was cancelled while its model "
                                           "call waited for the rate limit")
                wait = self.slice_s if decision.wait_s is None else decision.wait_s
                await store.wait_rate_change(min(max(wait, 0.005), self.slice_s))
        except BaseException:
            if waiter is not None:
                await self._withdraw(waiter)
            raise

    async def _withdraw(self, waiter: int) -> None:
        assert self.limiter is not None
        try:  # shielded: a cancelled task still leaves the line
            await asyncio.shield(self.limiter.store.withdraw_rate_waiter(waiter))
        except (TorenError, asyncio.CancelledError) as exc:  # gone with its lease anyway
            log.debug("could not withdraw rate-limit waiter %s: %s", waiter, exc)

    def answered(self, hold: RateHold | None, usage: Usage, sent_at: float) -> None:
        """The call was answered: it took what the provider reported (input tokens not read
        from a cache; cache writes count), from ``sent_at`` (``time.monotonic()``) on."""
        if hold is not None:
            self.unsettled.append((RateSettlement(
                hold.call_id, 1, usage.input_tokens + usage.cache_write_tokens,
                usage.output_tokens), sent_at))

    def unanswered(self, hold: RateHold | None, *, reached: bool,
                   sent_at: float | None = None) -> None:
        """The call got no answer: its output tokens return; its input stays counted if the
        provider may have read it (``reached``: no error status came back)."""
        if hold is not None:
            self.unsettled.append((RateSettlement(
                hold.call_id, 1, hold.input_estimate if reached else 0, 0), sent_at))

    def not_made(self, hold: RateHold | None) -> None:
        """The call was not made after all (its budget refused it): it takes nothing."""
        if hold is not None:
            self.unsettled.append((RateSettlement(hold.call_id, 0, 0, 0), None))

    async def failed(self, hold: RateHold | None, exc: ProviderError, sent_at: float) -> None:
        """Settle a call the provider refused; a 429 with ``Retry-After`` pauses the key's
        bucket for every worker until then (the retry then waits in line like any call)."""
        self.unanswered(hold, reached=exc.status is None, sent_at=sent_at)
        if hold is None or self.limiter is None or exc.status != 429 or not exc.retry_after_s:
            return
        targets = pause_targets(hold.buckets, hold.key_env)
        if not targets:
            return
        log.warning("%s answered 429: pausing rate limit %s for %.1fs for the whole fleet",
                    self.agent.name, ", ".join(targets), exc.retry_after_s)
        try:
            await self.limiter.store.pause_rate(targets, exc.retry_after_s)
        except TorenError as exc_:  # the retry's own backoff still applies
            log.warning("could not pause rate limit %s: %s", ", ".join(targets), exc_)

    async def write(self) -> None:
        """Write the settlements recorded so far, in one batch (after each append)."""
        if not self.unsettled or self.limiter is None:
            return
        now = time.monotonic()  # sent times become "seconds ago" as the batch leaves
        unsettled = [replace(settlement, sent_s_ago=None if sent_at is None
                             else max(0.0, round(now - sent_at, 3)))
                     for settlement, sent_at in self.unsettled]
        self.unsettled = []
        try:
            await self.limiter.store.settle_rate(unsettled)
        except TorenError as exc:  # a held reservation is released once the lease is gone
            log.warning("could not settle %d rate-limit reservations of run %s: %s",
                        len(unsettled), self.run_id, exc)
