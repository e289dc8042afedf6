"""Hard budgets, the pure parts: worst-case prices and whether a reservation fits."""

from __future__ import annotations

from toren.core.budgets import decide_reservation, worst_case_cost, worst_case_input_tokens
from toren.core.pricing import Pricing
from toren.seams.model import Message, ModelRequest, ToolCall, ToolSpec


def request(text: str, max_tokens: int = 1000) -> ModelRequest:
    return ModelRequest(model="m/x", system="sys", messages=(Message("user", text),),
                        max_tokens=max_tokens)


def test_the_input_bound_counts_bytes_so_any_text_is_covered() -> None:
    # CJK text takes about a token per character; its UTF-8 size (3 bytes each) still bounds it
    cjk = request("漢字" * 100)
    assert worst_case_input_tokens(cjk) >= 200 * 3
    with_tools = ModelRequest(
        model="m/x", system="", tools=(ToolSpec("lookup", "Look up.", {"type": "object"}),),
        messages=(Message("assistant", "", tool_calls=(ToolCall("1", "lookup", {"q": "x"}),)),))
    assert worst_case_input_tokens(with_tools) > len("lookup") * 2


def test_the_worst_case_prices_every_output_token_and_the_dearest_input() -> None:
    pricing = Pricing(input_per_mtok=3.0, output_per_mtok=15.0, cache_read_per_mtok=0.3,
                      cache_write_per_mtok=3.75)
    call = request("hello", max_tokens=2000)
    expected = (worst_case_input_tokens(call) * 3.75 + 2000 * 15.0) / 1_000_000
    assert worst_case_cost(call, pricing) == round(expected, 10)


def test_a_reservation_fits_only_when_every_scope_has_room() -> None:
    assert decide_reservation(1.0, {}) == (None, ())
    assert decide_reservation(1.0, {"run": (4.5, 5.0)}) == ("run", ())
    assert decide_reservation(1.0, {"run": (0.0, 5.0), "daily": (9.5, 10.0)}) == ("daily", ())
    # a reservation that leaves a scope at or past 80% asks for its warning (the ledger gives
    # it once per run and per day)
    assert decide_reservation(1.0, {"run": (1.0, 10.0)}) == (None, ())
    assert decide_reservation(1.0, {"run": (3.0, 5.0)}) == (None, ("run",))
    assert decide_reservation(1.0, {"run": (7.5, 10.0), "daily": (1.0, 100.0)}) == (
        None, ("run",))
