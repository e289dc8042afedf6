"""The plugin module (entry point ``tavily`` in group ``toren``): registers ``web_search``.

Transient failures (429, 5xx, timeouts) are retried inside the call with exponential backoff
and jitter; a refused key (401/403) or a bad request fails at once. What the model gets, the
results or the error, is recorded in the run's log like any tool result, so a resumed run never
searches again for a call whose result is recorded.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import random
from collections.abc import Callable, Mapping
from typing import Any, Literal

import toren
from toren.plugin import ToolError, positive_number

#: The plugin API versions this plugin is written for (docs/reference/versioning.md).
TOREN_PLUGIN_API = ">=1.0,<2"

KEY_VAR = "TAVILY_API_KEY"
BASE_URL_VAR = "TOREN_TAVILY_BASE_URL"
TIMEOUT_VAR = "TOREN_TAVILY_TIMEOUT"
ATTEMPTS_VAR = "TOREN_TAVILY_ATTEMPTS"
RETRY_BASE_VAR = "TOREN_TAVILY_RETRY_BASE"
DEFAULT_BASE_URL = "https://api.tavily.com"
#: Characters of one result's content given to the model (Tavily's snippets are short).
MAX_CONTENT_CHARS = 2000


def settings(env: Mapping[str, str] | None = None) -> tuple[str, float, int, float]:
    """Base URL, seconds per request, attempts per call, and the first backoff in seconds."""
    env = os.environ if env is None else env
    return (env.get(BASE_URL_VAR) or DEFAULT_BASE_URL,
            positive_number(env, TIMEOUT_VAR, 30.0, float),
            positive_number(env, ATTEMPTS_VAR, 4, int),
            positive_number(env, RETRY_BASE_VAR, 1.0, float))


@toren.tool(idempotent=True, requires_env=(KEY_VAR,))
async def web_search(query: str, max_results: int = 5,
                     topic: Literal["general", "news", "finance"] = "general") -> str:
    """Search the web and get the most relevant pages: title, url, content snippet, score.

    Args:
        query: What to search for, as you would type it into a search engine.
        max_results: How many results to return (1 to 20).
        topic: "news" for recent events, "finance" for markets, else "general".
    """
    # imported on first use, so loading plugins stays fast; in a thread, because importing
    # tavily-python and httpx takes long enough to stall the event loop (and lease renewals)
    tavily = await asyncio.to_thread(importlib.import_module, "tavily")
    call = toren.current_tool_call()
    key = call.getenv(KEY_VAR)
    if key is None:
        raise ToolError(f"{call.env_var(KEY_VAR)} is not set")
    base_url, timeout_s, attempts, retry_base_s = settings()
    client = tavily.AsyncTavilyClient(api_key=key, api_base_url=base_url)
    try:
        for attempt in range(1, attempts + 1):
            try:
                answer = await client.search(query, max_results=max(1, min(max_results, 20)),
                                             topic=topic, timeout=timeout_s)
                return json.dumps({"query": query, "results": results_of(answer)},
                                  ensure_ascii=False)
            except Exception as exc:  # tavily-python's errors, translated below
                problem, retryable = translate(exc, call.env_var(KEY_VAR), timeout_s)
                if not retryable or attempt == attempts:
                    suffix = f" (after {attempt} attempts)" if attempt > 1 else ""
                    raise ToolError(problem + suffix) from None
                delay = retry_base_s * 2 ** (attempt - 1)
                await asyncio.sleep(delay / 2 + random.uniform(0, delay / 2))
    finally:
        await client.close()
    raise AssertionError("unreachable")  # pragma: no cover


def results_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """Tavily's results, each reduced to title, url, content and score."""
    results = answer.get("results") if isinstance(answer, dict) else None
    return [{"title": str(item.get("title") or ""), "url": str(item.get("url") or ""),
             "content": str(item.get("content") or "")[:MAX_CONTENT_CHARS],
             "score": item.get("score")}
            for item in results or [] if isinstance(item, dict)]


def translate(exc: Exception, key_var: str, timeout_s: float) -> tuple[str, bool]:
    """A tavily-python (or httpx) exception as an error for the model, and whether to retry."""
    import httpx
    from tavily import errors

    detail = str(exc).strip()
    detail = f": {detail}" if detail else ""
    if isinstance(exc, errors.InvalidAPIKeyError | errors.MissingAPIKeyError):
        return f"Tavily refused the API key in {key_var} (401){detail}", False
    if isinstance(exc, errors.ForbiddenError):
        return f"Tavily refused the request (403){detail}", False
    if isinstance(exc, errors.UsageLimitExceededError):
        return f"Tavily is rate limiting or the plan's usage is exhausted (429){detail}", True
    if isinstance(exc, errors.BadRequestError):
        return f"Tavily rejected the search as invalid (400){detail}", False
    if isinstance(exc, errors.TimeoutError | httpx.TimeoutException):
        return f"Tavily did not answer within {timeout_s:g} s ({TIMEOUT_VAR})", True
    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        return f"Tavily answered HTTP {status}", status >= 500
    if isinstance(exc, httpx.TransportError):
        return f"cannot reach Tavily: {type(exc).__name__}{detail}", True
    if isinstance(exc, ValueError):  # a body that is not JSON
        return f"Tavily's answer could not be read{detail}", True
    return f"the search failed: {type(exc).__name__}{detail}", False


@toren.hookimpl
def register_tools(register: Callable[..., None]) -> None:
    register(web_search)
