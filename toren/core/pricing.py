"""Prices of model calls: USD per million tokens, by kind of token."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol


class TokenCounts(Protocol):
    """Token counts of one call, as ``toren.core.messages.Usage`` holds them (a protocol:
    messages.py imports this module, for the prices in ``ModelResponse``)."""

    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cache_read_tokens(self) -> int: ...
    @property
    def cache_write_tokens(self) -> int: ...


@dataclass(frozen=True)
class Pricing:
    """What one million tokens of each kind cost, in US dollars.

    Cache prices default to the input price when a provider has no separate one.
    """

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None

    @property
    def cache_read(self) -> float:
        """USD per million tokens read from the provider's prompt cache."""
        return self.input_per_mtok if self.cache_read_per_mtok is None \
            else self.cache_read_per_mtok

    @property
    def cache_write(self) -> float:
        """USD per million tokens written to the provider's prompt cache."""
        return self.input_per_mtok if self.cache_write_per_mtok is None \
            else self.cache_write_per_mtok

    def resolved(self) -> Pricing:
        """The same prices with the cache prices spelt out (as recorded with each call)."""
        return replace(self, cache_read_per_mtok=self.cache_read,
                       cache_write_per_mtok=self.cache_write)

    def cost(self, usage: TokenCounts) -> float:
        """The cost of a call with ``usage`` (input tokens exclude cached ones)."""
        total = (usage.input_tokens * self.input_per_mtok
                 + usage.output_tokens * self.output_per_mtok
                 + usage.cache_read_tokens * self.cache_read
                 + usage.cache_write_tokens * self.cache_write)
        return round(total / 1_000_000, 10)

    def uncached_cost(self, usage: TokenCounts) -> float:
        """What the call would have cost without prompt caching: the tokens it read from or
        wrote to the cache billed as plain input."""
        prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        total = prompt * self.input_per_mtok + usage.output_tokens * self.output_per_mtok
        return round(total / 1_000_000, 10)

    @classmethod
    def from_yaml(cls, data: Mapping[str, Any]) -> Pricing:
        """From agent.yaml ``pricing:`` (camelCase keys, validated by the schema)."""
        return cls(input_per_mtok=float(data["inputPerMTok"]),
                   output_per_mtok=float(data["outputPerMTok"]),
                   cache_read_per_mtok=_optional(data.get("cacheReadPerMTok")),
                   cache_write_per_mtok=_optional(data.get("cacheWritePerMTok")))

    def to_json(self) -> dict[str, float | None]:
        return {"inputPerMTok": self.input_per_mtok, "outputPerMTok": self.output_per_mtok,
                "cacheReadPerMTok": self.cache_read_per_mtok,
                "cacheWritePerMTok": self.cache_write_per_mtok}


def _optional(value: Any) -> float | None:
    return None if value is None else float(value)
