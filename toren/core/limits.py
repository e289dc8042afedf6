"""Caps on a task and when to compact it: plain values read from agent.yaml by the agent loader
and obeyed by the pure decisions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toren.core.rate_limits import RateLimit, parse_buckets


@dataclass(frozen=True)
class Limits:
    """Caps on one task (``limits:`` in agent.yaml or subagent front matter)."""

    max_steps: int = 50
    max_budget_usd: float | None = None
    #: ``dailyBudgetUsd``: all runs of the agent in one UTC day (read from agent.yaml only).
    daily_budget_usd: float | None = None
    max_tool_output_bytes: int = 65536
    max_waves: int | None = None
    #: Seconds a tool call may take before Toren stops waiting for it (``timeout`` error).
    tool_timeout_s: float = 300.0
    #: ``rate:``: provider rate limits of this agent's calls alone, by bucket name, on top of
    #: the deployment's (``toren.core.rate_limits``; read from agent.yaml only).
    rate: Mapping[str, RateLimit] = field(default_factory=dict)

    @classmethod
    def from_yaml(cls, data: Mapping[str, Any] | None, base: Limits | None = None) -> Limits:
        base = base or cls()
        data = data or {}
        return cls(
            max_steps=data.get("maxSteps", base.max_steps),
            max_budget_usd=data.get("maxBudgetUsd", base.max_budget_usd),
            daily_budget_usd=data.get("dailyBudgetUsd", base.daily_budget_usd),
            max_tool_output_bytes=data.get("maxToolOutputBytes", base.max_tool_output_bytes),
            max_waves=data.get("maxWaves", base.max_waves),
            tool_timeout_s=data.get("toolTimeoutSeconds", base.tool_timeout_s),
            rate=parse_buckets(data["rate"], "limits.rate") if "rate" in data else base.rate,
        )

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "maxSteps": self.max_steps, "maxBudgetUsd": self.max_budget_usd,
            "dailyBudgetUsd": self.daily_budget_usd,
            "maxToolOutputBytes": self.max_tool_output_bytes, "maxWaves": self.max_waves,
            "toolTimeoutSeconds": self.tool_timeout_s}
        if self.rate:  # only when set: a definition without it keeps its digest
            shown["rate"] = {name: {k: v for k, v in limit.to_json().items() if v is not None}
                             for name, limit in self.rate.items()}
        return shown


@dataclass(frozen=True)
class Compaction:
    """``compaction:`` in agent.yaml: when to summarise older turns of a task."""

    enabled: bool = True
    threshold_tokens: int | None = None
    keep_recent_messages: int = 6

    @classmethod
    def from_yaml(cls, data: Mapping[str, Any] | None) -> Compaction:
        data = data or {}
        return cls(enabled=data.get("enabled", True),
                   threshold_tokens=data.get("thresholdTokens"),
                   keep_recent_messages=data.get("keepRecentMessages", 6))
