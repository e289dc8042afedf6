"""The rate-limit store: provider budgets per window that every worker of every fleet on one
database takes from before a model call (docs/guides/flow-control.md)."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from toren.core.rate_limits import BucketLimit


@dataclass(frozen=True)
class RateRequest:
    """What one model call asks of its buckets, and who asks (the task lease it runs under:
    its reservation and its place in line live as long as that lease)."""

    buckets: tuple[BucketLimit, ...]
    window_s: float
    requests: int
    input_tokens: int
    output_tokens: int
    run_id: str
    stream: str
    epoch: int
    #: Higher first; ties by arrival (the run's priority).
    priority: int = 0
    #: The waiter row of this call's earlier attempts (``RateDecision.waiter_id``).
    waiter_id: int | None = None
    #: Seconds this call has waited so far (counted on its buckets once it is granted).
    waited_s: float = 0.0


@dataclass(frozen=True)
class RateDecision:
    """``reserve_rate``'s answer: granted (``call_id``), or parked (``waiter_id``) with the
    seconds until it would fit (``wait_s``; ``None``: a call ahead of it goes first, wait to be
    woken) and the bucket that stopped it."""

    call_id: int | None
    wait_s: float | None = None
    waiter_id: int | None = None
    blocked_by: str | None = None


@dataclass(frozen=True)
class RateSettlement:
    """What a call took once it ended: 1 request and the usage the provider reported (0 output
    tokens for a call that was not answered), and how long before this settlement its request
    was sent (``sent_s_ago``): the reservation then counts from that moment on, as the
    provider counted the request, if that is later than when it was reserved."""

    call_id: int
    requests: int
    input_tokens: int
    output_tokens: int
    sent_s_ago: float | None = None


@dataclass(frozen=True)
class BucketState:
    """One bucket as operators see it (``toren top``, ``/fleet``, ``/metrics``)."""

    name: str
    #: Limits per window as configured (``None``: not limited).
    requests_limit: int | None
    input_limit: int | None
    output_limit: int | None
    window_s: float
    #: What the current window holds (held reservations at their estimate).
    requests: int
    input_tokens: int
    output_tokens: int
    held: int
    waiting: int
    paused_until: datetime | None
    waits_total: int
    wait_seconds_total: float
    pauses_total: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "window_s": self.window_s,
                "limits": {"requests": self.requests_limit, "input_tokens": self.input_limit,
                           "output_tokens": self.output_limit},
                "used": {"requests": self.requests, "input_tokens": self.input_tokens,
                         "output_tokens": self.output_tokens},
                "held": self.held, "waiting": self.waiting,
                "paused_until": None if self.paused_until is None
                else self.paused_until.isoformat(),
                "waits_total": self.waits_total,
                "wait_seconds_total": round(self.wait_seconds_total, 3),
                "pauses_total": self.pauses_total}


class RateLimitStore(abc.ABC):
    """Shared provider budgets: a sliding window per bucket.

    The task loop (through ``ExecutionPorts.rate_limits``, only when limits are configured)
    calls ``reserve_rate`` before every model call, ``wait_rate_change`` while a call is
    parked, ``settle_rate`` after the append that records the calls' answers,
    ``pause_rate`` when a provider answers 429 with ``Retry-After``, and
    ``withdraw_rate_waiter`` when a parked call gives up. ``rate_limit_state`` is read by
    ``/fleet``, ``/metrics`` and ``toren top``.

    A reservation and a waiter live as long as the task lease named in the request: once the
    lease is gone (the worker died), the next reservation on the bucket releases the held
    reservation's output tokens and drops the waiter.
    """

    @abc.abstractmethod
    async def reserve_rate(self, request: RateRequest) -> RateDecision:
        """Take the call's requests and tokens from every bucket of ``request`` at once if it
        fits all of them, no bucket is paused and no waiter ahead of it (higher priority, or
        the same and earlier) shares a bucket with it; else park it (or keep it parked) and say
        how long until it would fit. Atomic across processes: no window ever holds more than a
        bucket's limit (a call larger than a limit takes a whole empty window)."""

    @abc.abstractmethod
    async def settle_rate(self, settlements: Sequence[RateSettlement]) -> None:
        """Replace the reservations by what the calls used, in one batch (each counting from
        when its request was sent, if later than its reservation), and wake parked calls
        that may now fit."""

    @abc.abstractmethod
    async def pause_rate(self, buckets: Sequence[str], seconds: float) -> None:
        """Take no call on ``buckets`` from any worker for ``seconds`` (a provider's 429)."""

    @abc.abstractmethod
    async def withdraw_rate_waiter(self, waiter_id: int) -> None:
        """Remove a parked call from the line (it gave up) and wake the next."""

    @abc.abstractmethod
    async def wait_rate_change(self, timeout_s: float) -> None:
        """Return when a parked call may fit (room was freed, a waiter ahead was served) or
        after ``timeout_s``, holding no pooled connection meanwhile."""

    @abc.abstractmethod
    async def rate_limit_state(self) -> list[BucketState]:
        """Every bucket ever used, by name."""
