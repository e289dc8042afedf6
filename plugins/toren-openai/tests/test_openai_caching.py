"""OpenAI caches prompts on its own: Toren reads ``cached_tokens``, prices them at the model's
cached-input rate, and its receipts show what caching saved (real SDK, fake server, Postgres)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from fake_openai import PrefixCache

from toren.core.catalog import validate_event
from toren.core.pricing import Pricing
from toren.host.runtime import Runtime
from toren.seams.model import Usage
from toren.testing import write_agent_dir

#: gpt-4o-mini: input 0.15, cached input 0.075 (half), output 0.60 USD per million tokens.
MINI = Pricing(0.15, 0.60, 0.075)
#: Long enough to be cached (1,024 tokens and more).
LONG_PROMPT = "You are a careful agent. " * 240
TOOLS = "".join(f'def look_{i}(text: str) -> str:\n    """Look {i}."""\n    return "seen {i}"\n\n'
                for i in range(4))


async def run_agent(start_runtime: Any, tmp_path: Path, url: str, name: str,
                    **fields: Any) -> tuple[Runtime, str, list[dict[str, Any]]]:
    directory = write_agent_dir(tmp_path, name, model="openai/gpt-4o-mini", baseUrl=url,
                                tools_py=TOOLS, prompt=LONG_PROMPT, **fields)
    runtime = await start_runtime(directory)
    run_id = await runtime.start_run(name, "look around")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed", record.error
    events = await runtime.events(run_id)
    for event in events:
        validate_event(event.stream, event.type, event.data)
    return runtime, run_id, [e.data for e in events if e.type == "ModelCallCompleted"]


def prompt_tokens(usage: dict[str, int]) -> int:
    return usage["input_tokens"] + usage["cache_read_tokens"]


async def test_cached_tokens_are_recorded_priced_at_the_discount_and_the_saving_shown(
        make_fake: Any, start_runtime: Any, tmp_path: Path) -> None:
    fake = await make_fake(cache=PrefixCache())
    runtime, run_id, calls = await run_agent(start_runtime, tmp_path, fake.url, "looker")
    assert len(calls) == 5  # four tools, one at a time, then the answer
    # caching is automatic: the requests carry no breakpoint
    assert all("cache_control" not in json.dumps(body) for body in fake.requests)
    assert calls[0]["usage"]["cache_read_tokens"] == 0
    for before, call in itertools.pairwise(calls):
        # each call reads the previous call's whole prompt, in steps of 128 past 1,024
        cached = call["usage"]["cache_read_tokens"]
        assert prompt_tokens(before["usage"]) - 128 < cached <= prompt_tokens(before["usage"])
        assert (cached - 1024) % 128 == 0
        assert call["usage"]["cache_write_tokens"] == 0  # OpenAI bills no cache writes
    for call in calls:
        assert call["pricing"] == {"input_per_mtok": 0.15, "output_per_mtok": 0.60,
                                   "cache_read_per_mtok": 0.075, "cache_write_per_mtok": 0.15}
        assert call["cost_usd"] == pytest.approx(MINI.cost(Usage(**call["usage"])))

    totals = (await runtime.receipt(run_id))["totals"]
    usages = [Usage(**call["usage"]) for call in calls]
    read = sum(u.cache_read_tokens for u in usages)
    assert totals["cache_read_tokens"] == read > 0
    assert totals["cache_read_cost_usd"] == pytest.approx(read * 0.075 / 1e6)
    assert totals["cache_write_cost_usd"] == 0
    # the cached tokens would have cost the full input price: half of it was saved
    assert totals["cache_saved_usd"] == pytest.approx(read * (0.15 - 0.075) / 1e6)

    # promptCaching: false cannot stop OpenAI caching: the requests are the same
    again = await make_fake()
    await run_agent(start_runtime, tmp_path, again.url, "looker-off", promptCaching=False)
    assert again.requests == fake.requests
