"""Anthropic's list prices (USD per million tokens) and context windows, by model id.

Source: the per-model pages and the pricing page of platform.claude.com, checked 2026-11-30.
Cache writes are priced at the 5-minute rate (the default cache lifetime). A model missing here
has no known price: its calls are recorded with an unknown cost, never a guessed one, until the
agent sets ``pricing:`` in agent.yaml (which also overrides every row below).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from toren.plugin import Pricing, Usage

#: ``claude-sonnet-4-5-20250929`` is the dated snapshot of the ``claude-sonnet-4-5`` row.
_DATED = re.compile(r"^(?P<base>.+?)-(?P<date>20\d{6})$")

_1M = 1_000_000
_200K = 200_000


@dataclass(frozen=True)
class ModelPrice:
    """The price and context window of one model.

    A model whose price depends on the prompt's length has ``long_prompt``: from
    ``long_prompt_threshold`` prompt tokens (input + cache reads + cache writes) on, every
    token of that call, output included, is billed at the ``long_prompt`` rates.
    """

    pricing: Pricing
    context_window: int
    long_prompt_threshold: int | None = None
    long_prompt: Pricing | None = None

    @property
    def flat(self) -> bool:
        """Whether one ``Pricing`` prices every call (no prompt-length tier)."""
        return self.long_prompt is None

    def tier(self, usage: Usage) -> Pricing:
        """The prices of one call, picked by the call's prompt length."""
        prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        if (self.long_prompt is not None and self.long_prompt_threshold is not None
                and prompt > self.long_prompt_threshold):
            return self.long_prompt
        return self.pricing

    def cost(self, usage: Usage) -> float:
        """The cost of one call, at its tier's prices."""
        return self.tier(usage).cost(usage)


def _price(input_: float, output: float, cache_read: float, cache_write: float,
           context_window: int) -> ModelPrice:
    return ModelPrice(Pricing(input_, output, cache_read, cache_write), context_window)


#: Keyed by the API model id without a date suffix.
PRICES: dict[str, ModelPrice] = {
    # Fable and Mythos share specifications and prices.
    "claude-fable-5-2": _price(8.0, 40.0, 0.20, 10.0, _1M),
    "claude-mythos-5-2": _price(8.0, 40.0, 0.20, 10.0, _1M),
    "claude-fable-5-1": _price(10.0, 50.0, 0.25, 12.50, _1M),
    "claude-mythos-5-1": _price(10.0, 50.0, 0.25, 12.50, _1M),
    "claude-fable-5": _price(10.0, 50.0, 1.00, 12.50, _1M),
    "claude-mythos-5": _price(10.0, 50.0, 1.00, 12.50, _1M),
    "claude-opus-5-5": _price(4.0, 20.0, 0.20, 5.0, _1M),
    "claude-opus-5": _price(5.0, 25.0, 0.50, 6.25, _1M),
    "claude-opus-4-8": _price(5.0, 25.0, 0.50, 6.25, _1M),
    "claude-opus-4-7": _price(5.0, 25.0, 0.50, 6.25, _1M),
    "claude-opus-4-6": _price(5.0, 25.0, 0.50, 6.25, _1M),
    "claude-opus-4-5": _price(5.0, 25.0, 0.50, 6.25, _200K),
    "claude-sonnet-5-5": _price(2.0, 10.0, 0.10, 2.50, _1M),
    "claude-sonnet-5": _price(2.0, 10.0, 0.20, 2.50, _1M),
    "claude-sonnet-4-6": _price(3.0, 15.0, 0.30, 3.75, _1M),
    "claude-sonnet-4-5": _price(3.0, 15.0, 0.30, 3.75, _200K),
    "claude-haiku-5-5": ModelPrice(
        Pricing(0.10, 0.50, 0.01, 0.125), _1M,
        long_prompt_threshold=100_000, long_prompt=Pricing(0.50, 2.50, 0.05, 0.625)),
    "claude-haiku-4-5": _price(1.0, 5.0, 0.10, 1.25, _200K),
}


def price_for(model: str) -> ModelPrice | None:
    """The row for an API model id (``claude-sonnet-4-5`` or a dated ``...-20250929``)."""
    row = PRICES.get(model)
    if row is not None:
        return row
    dated = _DATED.match(model)
    return PRICES.get(dated["base"]) if dated else None
