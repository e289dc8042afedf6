"""Prices of model calls: USD per million tokens, by kind of token."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toren.core.messages import Usage


@dataclass(frozen=True)
class Pricing:
    """What one million tokens of each kind cost, in US dollars.

    Cache prices default to the input price when a provider has no separate one.
    """

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None

    def cost(self, usage: Usage) -> float:
        """The cost of a call with ``usage`` (input tokens exclude cached ones)."""
        cache_read = self.input_per_mtok if self.cache_read_per_mtok is None \
            else self.cache_read_per_mtok
        cache_write = self.input_per_mtok if self.cache_write_per_mtok is None \
            else self.cache_write_per_mtok
        total = (usage.input_tokens * self.input_per_mtok
                 + usage.output_tokens * self.output_per_mtok
                 + usage.cache_read_tokens * cache_read
                 + usage.cache_write_tokens * cache_write)
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
