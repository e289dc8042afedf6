"""Receipts split a run's cost into prompt-cache reads and writes at their prices, and show
what caching saved against the uncached price (``toren.core.receipts``, ``toren.cli.render``);
agent.yaml's ``promptCaching`` switch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from toren.agents import load_agent
from toren.cli.render import cache_rows, event_line, receipt_tables, run_summary
from toren.core import events as ev
from toren.core.catalog import validate_event
from toren.core.events import Event
from toren.core.messages import Usage
from toren.core.pricing import Pricing
from toren.core.receipts import build_receipt
from toren.core.runs import RunRecord
from toren.errors import AgentDefinitionError
from toren.testing import write_agent_dir

SONNET = Pricing(3.0, 15.0, 0.30, 3.75)
PRICES = {"input_per_mtok": 3.0, "output_per_mtok": 15.0, "cache_read_per_mtok": 0.30,
          "cache_write_per_mtok": 3.75}


def call(seq: int, step: int, usage: Usage, *, priced: bool = True) -> Event:
    data: dict[str, Any] = {
        "step": step, "epoch": 1, "model": "anthropic/claude-sonnet-4-6", "text": "",
        "tool_calls": [], "stop_reason": "end_turn",
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                  "cache_read_tokens": usage.cache_read_tokens,
                  "cache_write_tokens": usage.cache_write_tokens},
        "cost_usd": SONNET.cost(usage) if priced else None, "latency_ms": 5.0,
        "repeated": False}
    if priced:
        data["pricing"] = PRICES
    validate_event("task:main", ev.MODEL_CALL_COMPLETED, data)
    return Event("r1", "task:main", seq, ev.MODEL_CALL_COMPLETED, data)


WRITES = Usage(input_tokens=10, output_tokens=20, cache_write_tokens=2000)
READS = Usage(input_tokens=0, output_tokens=20, cache_read_tokens=2000, cache_write_tokens=300)


def receipt(*events: Event) -> dict[str, Any]:
    return build_receipt(RunRecord(id="r1", agent="a", status="completed", input="go",
                                   stop_reason="end_turn"), list(events))


def test_each_call_shows_its_cache_costs_and_what_caching_saved_it() -> None:
    made = receipt(call(1, 1, WRITES), call(2, 2, READS))
    first, second = made["tasks"][0]["model_calls"]
    assert first["pricing"] == PRICES
    assert first["cache_write_cost_usd"] == pytest.approx(2000 * 3.75 / 1e6)
    assert first["cache_read_cost_usd"] == 0
    # writing costs 1.25x input: caching cost the first call 0.25x on what it wrote
    assert first["cache_saved_usd"] == pytest.approx(-2000 * 0.75 / 1e6)
    assert second["cache_read_cost_usd"] == pytest.approx(2000 * 0.30 / 1e6)
    assert second["uncached_cost_usd"] == pytest.approx((2300 * 3.0 + 20 * 15.0) / 1e6)
    assert second["cache_saved_usd"] == pytest.approx(second["uncached_cost_usd"]
                                                      - SONNET.cost(READS))
    totals = made["totals"]
    assert (totals["cache_read_tokens"], totals["cache_write_tokens"]) == (2000, 2300)
    assert totals["cache_saved_usd"] == pytest.approx(
        first["cache_saved_usd"] + second["cache_saved_usd"])
    assert totals["uncached_cost_usd"] - totals["cost_usd"] == pytest.approx(
        totals["cache_saved_usd"])
    assert made["tasks"][0]["totals"]["cache_saved_usd"] == totals["cache_saved_usd"]


def test_a_call_of_unknown_price_has_no_cache_costs_and_is_left_out_of_the_totals() -> None:
    made = receipt(call(1, 1, WRITES), call(2, 2, READS, priced=False))
    unknown = made["tasks"][0]["model_calls"][1]
    assert unknown["pricing"] is None
    assert unknown["cache_read_cost_usd"] is None and unknown["cache_saved_usd"] is None
    assert made["totals"]["cache_read_tokens"] == 2000  # tokens are still counted
    assert made["totals"]["cache_read_cost_usd"] == 0
    assert made["totals"]["cache_saved_usd"] == pytest.approx(-2000 * 0.75 / 1e6)


def render(table: Any) -> str:
    console = Console(width=250, record=True, color_system=None)
    console.print(table)
    return console.export_text()


def test_the_terminal_receipt_shows_reads_writes_their_prices_and_the_saving() -> None:
    made = receipt(call(1, 1, WRITES), call(2, 2, READS), call(3, 3, READS))
    saved = made["totals"]["cache_saved_usd"]
    assert saved > 0
    assert cache_rows(made) == [
        ("cache reads", f"4000 tokens at $0.3/MTok: ${4000 * 0.30 / 1e6:.4f}"),
        ("cache writes", f"2600 tokens at $3.75/MTok: ${2600 * 3.75 / 1e6:.4f}"),
        ("caching saved", f"${saved:.4f} (${made['totals']['uncached_cost_usd']:.4f} without "
                          "caching)")]
    summary = render(run_summary(made))
    assert "cache reads" in summary and "caching saved" in summary
    calls = render(receipt_tables(made)[0])
    assert "cache read" in calls and "cache write" in calls and "cache saved" in calls
    assert f"2000 · ${2000 * 0.30 / 1e6:.4f}" in calls
    assert f"-${2000 * 0.75 / 1e6:.4f}" in calls  # the first call paid the write premium
    line = event_line(call(2, 2, READS))
    assert line is not None and "(cache 2000 read, 300 written)" in line


def test_only_writes_so_far_say_so_and_a_run_without_cache_shows_nothing() -> None:
    made = receipt(call(1, 1, WRITES))
    assert cache_rows(made)[-1][1].startswith(f"-${2000 * 0.75 / 1e6:.4f}: cache writes not "
                                              "read back yet")
    assert cache_rows(receipt(call(1, 1, Usage(10, 20)))) == []


def test_prompt_caching_is_on_unless_agent_yaml_turns_it_off(tmp_path: Path) -> None:
    assert load_agent(write_agent_dir(tmp_path, "plain")).prompt_caching is True
    off = load_agent(write_agent_dir(tmp_path, "off", promptCaching=False))
    assert off.prompt_caching is False and off.to_json()["promptCaching"] is False
    with pytest.raises(AgentDefinitionError, match=r"agent.yaml:2: promptCaching"):
        load_agent(write_agent_dir(tmp_path, "bad", promptCaching="yes"))
