"""OpenAI's list prices (USD per million tokens) and context windows, by model.

Standard tier, short-context rates, as published on https://openai.com/api/pricing (read
2026-11). A dated snapshot (``gpt-4o-2024-08-06``, ``gpt-4-0613``) is priced as its model; any
other id that is not in the table (a local model, a new or renamed variant) has no price, so
its cost is recorded as unknown rather than guessed. An agent's ``pricing:`` overrides both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from toren.plugin import Pricing


@dataclass(frozen=True)
class ModelInfo:
    """What the table knows about one model."""

    pricing: Pricing
    #: The most input the model accepts, in tokens (compaction starts at 80% of it). For the
    #: GPT-5 family that is the 272K input limit (and the end of the short-context price),
    #: not the 400K total that includes output.
    context_window: int


def _info(input_: float, cached: float | None, output: float, window: int) -> ModelInfo:
    # No cached price means no cache discount: cache reads cost the input price.
    return ModelInfo(Pricing(input_per_mtok=input_, output_per_mtok=output,
                             cache_read_per_mtok=cached), window)


_GPT5_INPUT = 272_000
_GPT41_WINDOW = 1_047_576

#: model -> (input, cached input, output) USD per million tokens, and context window.
MODELS: dict[str, ModelInfo] = {
    "gpt-5.5": _info(5.00, 0.50, 30.00, _GPT5_INPUT),
    "gpt-5.5-pro": _info(30.00, None, 180.00, _GPT5_INPUT),
    "gpt-5.4": _info(2.50, 0.25, 15.00, _GPT5_INPUT),
    "gpt-5.4-mini": _info(0.75, 0.075, 4.50, _GPT5_INPUT),
    "gpt-5.4-nano": _info(0.20, 0.02, 1.25, _GPT5_INPUT),
    "gpt-5.4-pro": _info(30.00, None, 180.00, _GPT5_INPUT),
    "gpt-5.2": _info(1.75, 0.175, 14.00, _GPT5_INPUT),
    "gpt-5.1": _info(1.25, 0.125, 10.00, _GPT5_INPUT),
    "gpt-5": _info(1.25, 0.125, 10.00, _GPT5_INPUT),
    "gpt-5-mini": _info(0.25, 0.025, 2.00, _GPT5_INPUT),
    "gpt-5-nano": _info(0.05, 0.005, 0.40, _GPT5_INPUT),
    "gpt-5-pro": _info(15.00, None, 120.00, _GPT5_INPUT),
    "gpt-4.1": _info(2.00, 0.50, 8.00, _GPT41_WINDOW),
    "gpt-4.1-mini": _info(0.40, 0.10, 1.60, _GPT41_WINDOW),
    "gpt-4.1-nano": _info(0.10, 0.025, 0.40, _GPT41_WINDOW),
    "gpt-4o": _info(2.50, 1.25, 10.00, 128_000),
    "gpt-4o-mini": _info(0.15, 0.075, 0.60, 128_000),
    "o4-mini": _info(1.10, 0.275, 4.40, 200_000),
    "o3": _info(2.00, 0.50, 8.00, 200_000),
    "o3-pro": _info(20.00, None, 80.00, 200_000),
    "o3-mini": _info(1.10, 0.55, 4.40, 200_000),
    "o1": _info(15.00, 7.50, 60.00, 200_000),
}

#: A snapshot suffix: ``-2024-08-06`` or the older ``-0613``.
_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{4})")


def lookup(model_name: str) -> ModelInfo | None:
    """The table entry for a model (without ``openai/``), or ``None`` if it is not priced.

    The longest table name that is the model itself or the model before a snapshot suffix
    wins, so ``gpt-4o-mini-2024-07-18`` is ``gpt-4o-mini`` and never ``gpt-4o``, and
    ``gpt-5.6`` or ``o3-deep-research`` are not mistaken for ``gpt-5`` or ``o3``.
    """
    name = table_name(model_name, MODELS)
    return MODELS[name] if name is not None else None


def table_name(model_name: str, names: Iterable[str]) -> str | None:
    """The name of ``names`` that ``model_name`` is, itself or as a dated snapshot (the
    longest such name), or ``None``: the rule of ``lookup``, for any table keyed by model."""
    name = model_name.strip().lower()
    for candidate in sorted(names, key=len, reverse=True):
        if name == candidate or (name.startswith(candidate)
                                 and _SNAPSHOT.fullmatch(name[len(candidate):])):
            return candidate
    return None
