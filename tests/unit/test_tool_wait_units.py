"""``toren.wait_for_signal`` without a database: what a tool's wait asks for the first time,
what it returns once the log recorded the wait's end, and its refusals."""

from __future__ import annotations

import pytest

import toren
from toren.core import events as ev
from toren.errors import ConfigError, NonDeterminismError, SignalTimeout
from toren.execution.context import ToolCallContext, ToolWaitRequested, _current


def context(*ended: ev.ToolWaitEnded) -> ToolCallContext:
    return ToolCallContext("shop", "run", "main", 1, "c1", "key", epoch=1, signal_waits=ended)


def ended(wait: int, name: str = "paid", **fields: object) -> ev.ToolWaitEnded:
    return ev.ToolWaitEnded(call_id="c1", wait=wait, name=name, epoch=1, **fields)  # type: ignore[arg-type]


async def in_tool(ctx: ToolCallContext, *waits: tuple[str, float | None]) -> list[object]:
    token = _current.set(ctx)
    try:
        return [await toren.wait_for_signal(name, timeout=timeout) for name, timeout in waits]
    finally:
        _current.reset(token)


async def test_a_first_wait_asks_to_park_and_is_not_an_exception() -> None:
    with pytest.raises(ToolWaitRequested) as asked:
        await in_tool(context(), ("paid", 5))
    assert (asked.value.wait, asked.value.name, asked.value.timeout_s) == (1, "paid", 5.0)
    assert not isinstance(asked.value, Exception)  # a tool's `except Exception` lets it through


async def test_recorded_waits_return_in_order_then_the_next_one_parks() -> None:
    ctx = context(ended(1, signal=3, payload={"n": 1}), ended(2, "late", timed_out=True))
    token = _current.set(ctx)
    try:
        assert await toren.wait_for_signal("paid") == {"n": 1}
        with pytest.raises(SignalTimeout) as timed_out:
            await toren.wait_for_signal("late", timeout=2)
        assert (timed_out.value.name, timed_out.value.timeout_s) == ("late", 2)
        with pytest.raises(ToolWaitRequested) as asked:
            await toren.wait_for_signal("third")
        assert asked.value.wait == 3
    finally:
        _current.reset(token)


async def test_refusals() -> None:
    with pytest.raises(LookupError, match="only available while Toren runs a tool"):
        await toren.wait_for_signal("paid")
    with pytest.raises(ConfigError, match="invalid signal name"):
        await in_tool(context(), ("Not Valid", None))
    for timeout in (-1, float("inf"), True, "5"):
        with pytest.raises(ConfigError, match="timeout must be a number of seconds"):
            await in_tool(context(), ("paid", timeout))  # type: ignore[arg-type]
    with pytest.raises(NonDeterminismError, match="waited for the signal 'paid'"):
        await in_tool(context(ended(1, signal=1)), ("other", None))
