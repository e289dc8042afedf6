"""Metrics.appended counts in plain dicts and hands them to Prometheus in batches."""

from __future__ import annotations

from typing import Any

import pytest

from toren.core import events as ev
from toren.core.events import NewEvent
from toren.host.metrics import FLUSH_EVERY, Metrics


def tool_done(name: str, is_error: bool = False) -> NewEvent:
    return NewEvent.of(ev.ToolCallCompleted(
        step=1, call_id="c1", name=name, output="ok", is_error=is_error,
        error_kind="exception" if is_error else None, truncated=False, original_bytes=2,
        duration_ms=1.0, epoch=1))


def sample(metrics: Metrics, name: str, **labels: str) -> Any:
    return metrics.registry.get_sample_value(name, labels)


def test_counts_reach_prometheus_without_a_scrape_every_flush_every_appends() -> None:
    """A process nobody scrapes does not keep its counts in memory: every ``FLUSH_EVERY``
    appends they go to the metrics (a scrape flushes first, so it never sees fewer)."""
    metrics = Metrics(fleet=None, agents=["calc"], live_window_s=30)  # type: ignore[arg-type]
    for _ in range(FLUSH_EVERY - 1):
        metrics.appended("calc", [tool_done("add")], 0.002)
    # the label set is there from its first count (as with Counter.inc), its count not yet
    assert sample(metrics, "toren_tool_calls_total", agent="calc", tool="add",
                  outcome="ok") == 0
    metrics.appended("calc", [tool_done("add"), tool_done("add", is_error=True)], 0.002)
    assert sample(metrics, "toren_tool_calls_total", agent="calc", tool="add",
                  outcome="ok") == FLUSH_EVERY
    assert sample(metrics, "toren_tool_calls_total", agent="calc", tool="add",
                  outcome="error") == 1
    assert sample(metrics, "toren_append_seconds_count") == FLUSH_EVERY
    metrics.appended("calc", [tool_done("add")], 0.002)
    metrics.flush()
    assert sample(metrics, "toren_tool_calls_total", agent="calc", tool="add",
                  outcome="ok") == FLUSH_EVERY + 1
    assert sample(metrics, "toren_append_seconds_sum") == pytest.approx(0.002 * (FLUSH_EVERY + 1))
