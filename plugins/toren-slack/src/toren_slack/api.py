"""Web API calls through slack_sdk's ``AsyncWebClient``, with its errors as ``ChannelError``.

The client is given Toren's aiohttp session and no retry handlers of its own: the channel's
outbox decides when a send is retried (after a 429's ``Retry-After``, with backoff), so a
message is never posted twice by two layers retrying at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from toren.plugin import ChannelError

DEFAULT_API_URL = "https://slack.com/api/"
#: ``ok: false`` error codes that mean "later" rather than "never".
RETRYABLE_ERRORS = frozenset({"ratelimited", "rate_limited", "internal_error", "fatal_error",
                              "service_unavailable", "request_timeout", "team_added_to_org"})


def web_client(session: aiohttp.ClientSession, token: str, api_url: str) -> AsyncWebClient:
    """A Web API client for ``token`` at ``api_url`` over ``session`` (no retries of its own)."""
    return AsyncWebClient(token=token, base_url=api_url, session=session, timeout=30,
                          retry_handlers=[])


async def call(client: AsyncWebClient, method: str, **params: Any) -> dict[str, Any]:
    """The answer of Web API ``method`` (``ok: true``); ``ChannelError`` otherwise: retryable
    for HTTP 429 (``retry_after_s`` from ``Retry-After``), 5xx, ``ratelimited`` and network
    failures; permanent for ``invalid_auth``, ``channel_not_found``, ``not_in_channel`` and
    the rest. The token never appears in the message (only the method and Slack's code)."""
    try:
        response = await client.api_call(method, json=params)
    except SlackApiError as exc:
        raise _api_error(method, exc) from None
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise ChannelError(f"Slack {method}: {type(exc).__name__} (network)",
                           retryable=True) from None
    except SlackClientError as exc:  # a request the SDK refused to make
        raise ChannelError(f"Slack {method}: {type(exc).__name__}") from None
    data = response.data
    return data if isinstance(data, dict) else {}


def _api_error(method: str, exc: SlackApiError) -> ChannelError:
    response = exc.response
    # a SlackResponse (status_code), or aiohttp's response for a body that was not JSON
    status = getattr(response, "status_code", None) or getattr(response, "status", None) or 0
    data = getattr(response, "data", None)
    error = str(data.get("error", ""))[:100] if isinstance(data, dict) else ""
    headers = getattr(response, "headers", None)
    retry_after = _seconds(_header(headers, "Retry-After"))
    retryable = status == 429 or status >= 500 or error in RETRYABLE_ERRORS
    return ChannelError(f"Slack {method} answered {status}: {error or 'no error code'}",
                        retryable=retryable, retry_after_s=retry_after, status=int(status))


def _header(headers: object, name: str) -> str | None:
    if not isinstance(headers, Mapping):
        return None
    for key, value in headers.items():
        if str(key).lower() == name.lower():
            return str(value[0] if isinstance(value, list) and value else value)
    return None


def _seconds(value: str | None) -> float | None:
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds <= 3600 else None
