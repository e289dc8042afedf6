"""An append that waits out a short database outage (``append_through_outage``), and a worker's
estimate of the database's clock (``DatabaseClock``), each against a stand-in for the store's
one call."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

import pytest

from toren.errors import DatabaseTlsError, DatabaseUnavailable
from toren.execution.outages import append_through_outage
from toren.host.db_clock import DatabaseClock


class Refusals:
    """An append that the database refuses ``times`` times, then takes."""

    def __init__(self, times: int, error: DatabaseUnavailable | None = None) -> None:
        self.left = times
        self.tries = 0
        self.error = error or DatabaseUnavailable("no space left on device")

    async def __call__(self) -> None:
        self.tries += 1
        if self.left:
            self.left -= 1
            raise self.error


async def test_an_append_refused_briefly_goes_through_within_the_lease() -> None:
    append = Refusals(2)
    await append_through_outage(append, within_s=2.0, first_delay_s=0.05, what="an append")
    assert (append.tries, append.left) == (3, 0)


async def test_an_append_refused_past_the_lease_lets_the_error_through() -> None:
    append = Refusals(1000)
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable, match="no space left"):
        await append_through_outage(append, within_s=0.5, first_delay_s=0.05, what="x")
    took = time.monotonic() - started
    # 0.05 + 0.1 + 0.2 slept; the next 0.4 would pass the 0.5 s
    assert append.tries == 4 and took < 0.5 + 0.3


async def test_a_refusal_retrying_cannot_cure_is_not_retried() -> None:
    append = Refusals(1, DatabaseTlsError("certificate verify failed"))
    with pytest.raises(DatabaseTlsError):
        await append_through_outage(append, within_s=5.0, first_delay_s=0.05, what="x")
    assert append.tries == 1


class Registry:
    """The one call ``DatabaseClock`` makes of a ``WorkerRegistry``."""

    def __init__(self, offset_s: float) -> None:
        self.offset_s = offset_s

    async def database_now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset_s)


@pytest.mark.parametrize("offset_s", [30.0, -30.0])
async def test_the_clock_follows_the_database_and_says_when_the_host_is_off(
        offset_s: float, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="toren.host.db_clock")
    clock = DatabaseClock()
    assert abs((clock.now() - datetime.now(UTC)).total_seconds()) < 1  # none read yet
    registry = Registry(offset_s)
    await clock.read(registry)  # type: ignore[arg-type]
    assert abs(clock.offset_s - offset_s) < 0.5
    first = clock.now()
    await asyncio.sleep(0.2)  # carried forward by the monotonic clock
    assert 0.15 < (clock.now() - first).total_seconds() < 1.0
    assert abs((clock.now() - datetime.now(UTC)).total_seconds() - offset_s) < 0.5
    side = "behind" if offset_s > 0 else "ahead of"
    [said] = [r.getMessage() for r in caplog.records]
    assert f"this host's clock is 30.0s {side} the database's" in said
    await clock.read(registry)  # type: ignore[arg-type]
    assert len(caplog.records) == 1  # once, not at every read
    registry.offset_s = 0.1
    await clock.read(registry)  # type: ignore[arg-type]
    assert "agrees with the database's again" in caplog.records[-1].getMessage()
