#!/usr/bin/env python3
"""What prompt caching saves on a long tool loop: a run of 30 agent steps through Toren (real
Postgres, the real SDKs) against the providers' fakes, which bill a prompt cache as the
providers do.

    .venv/bin/python bench/prompt_caching.py --server-url postgresql://postgres@127.0.0.1/postgres
    .venv/bin/python bench/prompt_caching.py --server-url URL --steps 10 --smoke

Anthropic: the same run twice, with ``promptCaching: true`` (cache_control breakpoints) and
``false``, each against a fresh ``FakeAnthropic(cache=PromptCache())``; the cost is the
receipt's, checked against the fake's own bill of what it served (its usage priced at Sonnet
4.6's list prices). OpenAI caches on its own, so there is no run without it: the figure is the
receipt's cost against its cost at the uncached price, the fake (``PrefixCache``) reporting
``cached_tokens`` as OpenAI does. Prints one JSON object on stdout; ``ratio`` is the cost with
caching over the cost without. Needs toren-anthropic and toren-openai (requirements/test.txt);
without them it reports itself skipped. ``bench/run.py`` runs it as figure 11 (``caching``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FAKES = (ROOT / "plugins" / "toren-anthropic" / "tests",
         ROOT / "plugins" / "toren-openai" / "tests")
#: A system prompt of about 2,000 tokens: an agent's instructions, house style and examples.
PROMPT = ("You are a research agent. Read each page the fetch tool returns, keep notes, and "
          "cite the page numbers you used. " * 64)
#: A tool whose results are about 300 tokens, like a search hit or a short page.
TOOLS = '''
from toren import tool


@tool(idempotent=True)
def fetch(n: int) -> str:
    """Fetch page n of the report."""
    return f"page {n}: " + "the quarterly figures rose in every region. " * 28
'''


def log(message: str) -> None:
    print(f"[prompt_caching] {message}", file=sys.stderr, flush=True)


def openai_loop(steps: int) -> Any:
    """A stateless OpenAI responder: calls ``fetch`` until ``steps`` results, then answers."""
    from fake_openai import completion, tool_call, usage

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        done = sum(1 for message in body["messages"] if message["role"] == "tool")
        if done < steps:
            return completion(None, [tool_call("fetch", {"n": done + 1},
                                               call_id=f"call_{done + 1:02d}")],
                              usage_data=usage(completion=10))
        return completion(f"read {done} pages", usage_data=usage(completion=10))

    return respond


async def run_once(url: str, work: Path, agent: str, model: str, base_url: str,
                   **fields: Any) -> dict[str, Any]:
    """Run the agent once to its end on a fresh runtime; its receipt."""
    from toren.config import Settings
    from toren.host.runtime import Runtime
    from toren.testing import write_agent_dir

    directory = write_agent_dir(work, agent, model=model, baseUrl=base_url, tools_py=TOOLS,
                                prompt=PROMPT, limits={"maxSteps": 200}, **fields)
    settings = dataclasses.replace(
        Settings.from_env(os.environ), database_url=url, home=work / "home",
        load_plugins=("toren-anthropic", "toren-openai"), poll_interval_s=0.05)
    runtime = Runtime([directory], settings=settings)
    await runtime.start(workers=True)
    try:
        run_id = await runtime.start_run(agent, "Summarise the report.")
        record = await runtime.wait_for_run(run_id, timeout_s=600)
        if record.status != "completed":
            raise RuntimeError(f"{agent} ended {record.status}: {record.error}")
        return await runtime.receipt(run_id)
    finally:
        await runtime.stop()
        for model_id in runtime.agents[agent].model_ids:
            close = getattr(runtime.model(model_id, base_url=base_url), "aclose", None)
            if close is not None:
                await close()


def summary(receipt: dict[str, Any]) -> dict[str, Any]:
    totals = receipt["totals"]
    return {key: totals[key] for key in (
        "model_calls", "input_tokens", "output_tokens", "cache_read_tokens",
        "cache_write_tokens", "cost_usd", "cache_read_cost_usd", "cache_write_cost_usd",
        "uncached_cost_usd", "cache_saved_usd")}


async def anthropic(url: str, work: Path, steps: int) -> dict[str, Any]:
    from fake_anthropic import FakeAnthropic, PromptCache, tool_loop

    from toren.core.pricing import Pricing
    from toren.seams.model import Usage

    sonnet = Pricing(3.0, 15.0, 0.30, 3.75)
    runs: dict[str, dict[str, Any]] = {}
    for caching in (True, False):
        fake = await FakeAnthropic(responder=tool_loop(steps, tool="fetch"),
                                   cache=PromptCache()).start()
        try:
            receipt = await run_once(url, work, f"claude-{'on' if caching else 'off'}",
                                     "anthropic/claude-sonnet-4-6", fake.url,
                                     promptCaching=caching)
        finally:
            await fake.stop()
        # the provider's bill: what the fake served, at the list prices
        billed = sum(sonnet.cost(Usage(u["input_tokens"], u["output_tokens"],
                                       u["cache_read_input_tokens"] or 0,
                                       u["cache_creation_input_tokens"] or 0))
                     for u in fake.usages if u is not None)
        runs["with" if caching else "without"] = summary(receipt) | {
            "requests": len(fake.requests), "provider_bill_usd": round(billed, 10)}
    with_, without = runs["with"], runs["without"]
    return {"model": "anthropic/claude-sonnet-4-6", "with_caching": with_,
            "without_caching": without,
            "cost_with_usd": with_["cost_usd"], "cost_without_usd": without["cost_usd"],
            "ratio": round(with_["cost_usd"] / without["cost_usd"], 4),
            "saved_usd": round(without["cost_usd"] - with_["cost_usd"], 10),
            # the receipt's estimate (from the cached run alone) against the measured saving
            "receipt_saved_usd": with_["cache_saved_usd"],
            "receipts_match_provider_bill": all(
                abs(run["cost_usd"] - run["provider_bill_usd"]) < 1e-9 for run in runs.values())}


async def openai(url: str, work: Path, steps: int) -> dict[str, Any]:
    from fake_openai import FakeOpenAI, PrefixCache

    from toren.core.pricing import Pricing
    from toren.seams.model import Usage

    mini = Pricing(0.15, 0.60, 0.075)
    fake = FakeOpenAI(responder=openai_loop(steps), cache=PrefixCache())
    base_url = await fake.start()
    try:
        receipt = await run_once(url, work, "gpt-mini", "openai/gpt-4o-mini", base_url)
        usages = list(fake.usages)
    finally:
        await fake.stop()
    billed = sum(mini.cost(Usage(u["prompt_tokens"] - cached(u), u["completion_tokens"],
                                 cached(u))) for u in usages)
    run = summary(receipt) | {"requests": len(usages), "provider_bill_usd": round(billed, 10)}
    return {"model": "openai/gpt-4o-mini", "run": run, "cost_usd": run["cost_usd"],
            "cost_at_uncached_price_usd": run["uncached_cost_usd"],
            "ratio": round(run["cost_usd"] / run["uncached_cost_usd"], 4),
            "saved_usd": run["cache_saved_usd"],
            "receipt_matches_provider_bill": abs(run["cost_usd"] - billed) < 1e-9}


def cached(usage: dict[str, Any]) -> int:
    return int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)


async def measure(url: str, steps: int) -> dict[str, Any]:
    os.environ.setdefault("ANTHROPIC_API_KEY", "sk-ant-bench")
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")
    with tempfile.TemporaryDirectory(prefix="toren-bench-caching-") as work:
        started = time.perf_counter()
        claude = await anthropic(url, Path(work), steps)
        log(f"anthropic: ${claude['cost_with_usd']:.4f} with caching, "
            f"${claude['cost_without_usd']:.4f} without ({claude['ratio']:g}x)")
        gpt = await openai(url, Path(work), steps)
        log(f"openai: ${gpt['cost_usd']:.4f}, ${gpt['cost_at_uncached_price_usd']:.4f} at the "
            f"uncached price ({gpt['ratio']:g}x)")
        return {"steps": steps, "anthropic": claude, "openai": gpt,
                "seconds": round(time.perf_counter() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server-url", required=True,
                        help="Postgres server (the role needs CREATEDB): a fresh database")
    parser.add_argument("--steps", type=int, default=30, help="agent steps (tool calls) per run")
    parser.add_argument("--smoke", action="store_true", help="tiny: 5 steps, checks it runs")
    args = parser.parse_args()
    steps = 5 if args.smoke else args.steps
    result: dict[str, Any] = {"bench": "toren_caching", "figure": "caching",
                              "smoke": args.smoke}
    missing = [name for name in ("toren_anthropic", "toren_openai")
               if importlib.util.find_spec(name) is None]
    if missing:
        result |= {"ok": True, "skipped": f"{' and '.join(missing)} not installed "
                                          "(pip install -r requirements/test.txt)"}
        print(json.dumps(result), flush=True)
        return 0
    sys.path[:0] = [str(path) for path in FAKES]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from toren_bench import BenchDatabase

    db = BenchDatabase(args.server_url, "caching")
    try:
        result |= asyncio.run(measure(db.url, steps))
        result["ok"] = True
    except Exception as exc:
        log(f"failed: {exc!r}")
        result |= {"ok": False, "error": repr(exc)[:500]}
    finally:
        db.close()
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
