"""Provider rate limits shared by a fleet: the buckets a deployment (``TOREN_RATE_LIMITS``) and an
agent (``limits.rate:``) declare, which of them a model call takes from, and what it takes.

Pure values and functions; the shared budget itself is the store's (``RateLimitStore``).

Bucket names, as written in the limits file:

- ``<provider>`` (``anthropic``): every call to that provider's models;
- ``<provider>/<model>`` (``anthropic/claude-sonnet-4-5``): calls to that model;
- ``key:<VAR>`` (``key:ANTHROPIC_API_KEY``): calls made with the API key read from the
  environment variable (or secret) ``VAR``; the key's value is never named, stored or logged.

Every bucket that matches a call applies: the call takes from all of them at once. An agent's
``limits.rate:`` declares buckets of the same shape that only its own calls take from (stored
as ``agent:<agent>:<name>``), a separate, tighter budget on top of the deployment's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toren.core.attachments import estimated_tokens
from toren.core.messages import ModelRequest

#: The window every limit is counted over, in seconds (the limits are "per minute"). A limits
#: file may scale it down (``windowSeconds``) for tests and benchmarks only.
DEFAULT_WINDOW_S = 60.0
#: Characters per token of the input estimate made before a call (corrected by the usage the
#: provider reports once it answers): English text and JSON run at 3.5-4.5 with the common
#: tokenizers; 4 is what OpenAI and Anthropic quote as the rule of thumb.
CHARS_PER_TOKEN = 4
FIELDS = {"requestsPerMinute": "requests", "inputTokensPerMinute": "input_tokens",
          "outputTokensPerMinute": "output_tokens"}
#: The largest limit accepted (per minute): far above any provider's tier, small enough for
#: the database's integers.
MAX_LIMIT = 1_000_000_000
_NAME = re.compile(r"^(key:[A-Za-z_][A-Za-z0-9_]*|[A-Za-z0-9_.-]+(/[^\s/][^\s]*)?)$")


class RateLimitConfigError(ValueError):
    """A limits file or ``limits.rate:`` block that cannot be used: the message says where and
    what to write instead (the loaders wrap it in ``ConfigError``/``AgentLoadError``)."""


@dataclass(frozen=True)
class RateLimit:
    """One bucket's limits per window (``None``: that dimension is not limited)."""

    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None

    def to_json(self) -> dict[str, int | None]:
        return {"requestsPerMinute": self.requests, "inputTokensPerMinute": self.input_tokens,
                "outputTokensPerMinute": self.output_tokens}


@dataclass(frozen=True)
class BucketLimit:
    """A bucket as a call takes from it: its stored name and its limits scaled to the window."""

    name: str
    requests: int | None
    input_tokens: int | None
    output_tokens: int | None


@dataclass(frozen=True)
class RateLimits:
    """The deployment's buckets by name (``TOREN_RATE_LIMITS``) and the window they count over."""

    buckets: Mapping[str, RateLimit]
    window_s: float = DEFAULT_WINDOW_S
    #: ``False``: no limits file (``TOREN_RATE_LIMITS`` unset): only agents' own ``limits.rate``
    #: apply, and a call of an agent without them reaches no rate-limit store.
    configured: bool = True

    @property
    def counted_s(self) -> float:
        """How long a reservation counts: the window, plus an allowance for the moments
        between the reservation and the request reaching the provider (1% of the window, at
        least 0.25 s), so that a provider counting arrivals never sees a window over the
        limit when one call's request took longer to leave than the next one's."""
        return self.window_s + max(0.25, self.window_s * 0.01)

    def matching(self, model_id: str, key_env: str | None,
                 agent: tuple[str, Mapping[str, RateLimit]] | None = None
                 ) -> tuple[BucketLimit, ...]:
        """The buckets a call of ``model_id`` with the key from ``key_env`` takes from: the
        deployment's (with a limits file, always its key's, ``key:<VAR>``, unlimited unless
        configured: what a 429 pauses), then ``agent``'s own (``(name, limits.rate)``), sorted
        by name so every worker locks them in one order."""
        found = [self.scaled(name, limit) for name, limit in self.buckets.items()
                 if matches(name, model_id, key_env)]
        key = f"key:{key_env}" if key_env is not None and self.configured else None
        if key is not None and key not in self.buckets:
            # unlimited unless configured: the bucket a provider's 429 pauses for the fleet
            found.append(BucketLimit(key, None, None, None))
        if agent is not None:
            agent_name, own = agent
            found += [self.scaled(f"agent:{agent_name}:{name}", limit)
                      for name, limit in own.items() if matches(name, model_id, key_env)]
        return tuple(sorted(found, key=lambda bucket: bucket.name))

    def scaled(self, name: str, limit: RateLimit) -> BucketLimit:
        """``limit`` (per minute) as allowed in one window of ``window_s``."""
        def scale(value: int | None) -> int | None:
            return None if value is None else max(1, math.floor(value * self.window_s / 60))
        return BucketLimit(name, scale(limit.requests), scale(limit.input_tokens),
                           scale(limit.output_tokens))


def matches(name: str, model_id: str, key_env: str | None) -> bool:
    """Whether the bucket ``name`` applies to a call of ``model_id`` made with the key read from
    ``key_env`` (see the module docstring)."""
    if name.startswith("key:"):
        return key_env is not None and name[4:] == key_env
    if "/" in name:
        return name == model_id
    return model_id.partition("/")[0] == name


def pause_targets(buckets: tuple[BucketLimit, ...], key_env: str | None) -> tuple[str, ...]:
    """The buckets a provider's 429 pauses for the whole fleet: the key's own bucket
    (``key:<VAR>``, deployment-wide), which every call made with that key takes from."""
    return tuple(bucket.name for bucket in buckets
                 if key_env is not None and bucket.name == f"key:{key_env}")


def estimate_input_tokens(request: ModelRequest) -> int:
    """A cheap estimate of a request's input tokens before it is made: its characters (system
    prompt, messages, tool definitions) / ``CHARS_PER_TOKEN``, plus what its attachments take
    by Anthropic's formula; the usage the provider reports settles the difference."""
    chars = len(request.system)
    for message in request.messages:
        chars += len(message.text or "")
        for call in message.tool_calls:
            chars += len(call.name) + len(repr(call.arguments))
    for tool in request.tools:
        chars += len(tool.name) + len(tool.description) + len(repr(tool.parameters))
    images = sum(estimated_tokens(attachment) for attachment in request.attachments)
    return math.ceil(chars / CHARS_PER_TOKEN) + images


def parse_bucket(name: str, data: Any, where: str) -> RateLimit:
    """One bucket's limits, ``where`` naming it in errors (``file: limits.anthropic``)."""
    if not isinstance(name, str) or not _NAME.match(name) or name.startswith("agent:"):
        raise RateLimitConfigError(
            f"{where}: {name!r} is not a bucket name: use a provider (anthropic), a "
            "provider/model (anthropic/claude-sonnet-4-5) or key:<ENV_VAR> "
            "(key:ANTHROPIC_API_KEY)")
    if not isinstance(data, Mapping) or not data:
        raise RateLimitConfigError(
            f"{where}: expected a mapping with at least one of {', '.join(FIELDS)}")
    values: dict[str, int] = {}
    for field, value in data.items():
        if field not in FIELDS:
            raise RateLimitConfigError(
                f"{where}.{field}: unknown field; use {', '.join(FIELDS)}")
        if isinstance(value, bool) or not isinstance(value, int) or not (
                1 <= value <= MAX_LIMIT):
            raise RateLimitConfigError(
                f"{where}.{field}: expected a whole number from 1 to {MAX_LIMIT}, got "
                f"{value!r}")
        values[FIELDS[field]] = value
    return RateLimit(**values)


def parse_buckets(data: Any, where: str) -> dict[str, RateLimit]:
    """A mapping of bucket names to limits (``limits:`` of the file, ``limits.rate:``)."""
    if not isinstance(data, Mapping):
        raise RateLimitConfigError(f"{where}: expected a mapping of bucket names to limits")
    return {name: parse_bucket(name, value, f"{where}.{name}") for name, value in data.items()}


def parse_rate_limits(data: Any, source: str) -> RateLimits:
    """The deployment's limits from a parsed limits file (``source`` names it in errors)."""
    if not isinstance(data, Mapping):
        raise RateLimitConfigError(f"{source}: expected a mapping with a 'limits:' key")
    unknown = sorted(set(data) - {"limits", "windowSeconds"})
    if unknown:
        raise RateLimitConfigError(
            f"{source}: unknown key {unknown[0]!r}; the file holds 'limits:' (and, for tests "
            "and benchmarks only, 'windowSeconds:')")
    if "limits" not in data:
        raise RateLimitConfigError(f"{source}: missing 'limits:' (bucket names to limits)")
    window = data.get("windowSeconds", DEFAULT_WINDOW_S)
    if isinstance(window, bool) or not isinstance(window, int | float) or not (
            0.1 <= window <= 3600):
        raise RateLimitConfigError(
            f"{source}: windowSeconds: expected seconds from 0.1 to 3600, got {window!r}")
    return RateLimits(parse_buckets(data["limits"], f"{source}: limits"), float(window))
