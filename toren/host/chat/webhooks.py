"""What chat platforms' webhook routes share: their JSON bodies read by the HTTP API's rules."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from toren.core.decisions import MAX_JSON_DEPTH, unstorable


class WebhookBodyError(ValueError):
    """A webhook body that is not JSON a chat channel takes (the route answers 400)."""


async def webhook_json(raw: bytes) -> Any:
    """``raw`` parsed as JSON, in a thread (the body is the platform's, and parsing a large
    one is not free); ``WebhookBodyError`` saying why not: not JSON, or arrays and objects
    nested deeper than the HTTP API allows (``MAX_JSON_DEPTH``)."""
    return await asyncio.to_thread(_parse, raw)


def _parse(raw: bytes) -> Any:
    try:
        body = json.loads(raw)
    except RecursionError:
        # deeper than the parser's own stack: the rule below, met before it could be checked
        raise WebhookBodyError(f"the body cannot be taken: arrays and objects may be nested "
                               f"at most {MAX_JSON_DEPTH} levels deep") from None
    except ValueError:
        raise WebhookBodyError("the body is not JSON") from None
    problem = unstorable(body, nesting_only=True)
    if problem:
        raise WebhookBodyError(f"the body cannot be taken: {problem}")
    return body
