"""The SDK's exceptions as Toren errors: retryable or permanent, in one line a user can act on."""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping

import anthropic

from toren.plugin import ContextWindowExceeded, ProviderError
from toren_anthropic.provider import KEY_VAR, TIMEOUT_VAR

#: How the API words a request that does not fit the model's context window, e.g.
#: "prompt is too long: 210000 tokens > 200000 maximum" or "input length and `max_tokens`
#: exceed context limit: 190000 + 20000 > 200000".
_CONTEXT_OVERFLOW = re.compile(
    r"prompt is too long|exceeds? (the )?(model'?s? )?context( window| limit)?|context limit"
    r"|context window|too many (input )?tokens", re.IGNORECASE)
#: Statuses worth retrying: timeouts, lock conflicts, rate limits, server errors (529 included).
_RETRYABLE = {408, 409, 429}
_MAX_MESSAGE = 500


def provider_error(exc: anthropic.AnthropicError, *, model_id: str, endpoint: str,
                   timeout_s: float | None = None) -> ProviderError:
    """Translate an SDK exception raised while calling ``model_id`` at ``endpoint``."""
    if isinstance(exc, anthropic.APITimeoutError):
        waited = f" within {timeout_s:g}s ({TIMEOUT_VAR})" if timeout_s else ""
        return ProviderError(f"the Anthropic API at {endpoint} did not answer {model_id}"
                             f"{waited}", retryable=True, reason="timeout")
    if isinstance(exc, anthropic.APIConnectionError):
        cause = one_line(str(exc.__cause__ or exc.message))
        return ProviderError(f"cannot reach the Anthropic API at {endpoint}: {cause}",
                             retryable=True, reason="connection")
    if isinstance(exc, anthropic.APIStatusError):
        return status_error(exc, model_id=model_id, endpoint=endpoint)
    return ProviderError(f"the Anthropic SDK failed calling {model_id} at {endpoint}: "
                         f"{type(exc).__name__}: {one_line(str(exc))}")


def status_error(exc: anthropic.APIStatusError, *, model_id: str,
                 endpoint: str) -> ProviderError:
    status = exc.status_code
    detail = api_detail(exc)
    what = f"Anthropic API {status} {exc.type or 'error'} for {model_id}: {detail}"
    retry_after = retry_after_s(exc.response.headers)
    if status in _RETRYABLE or status >= 500:
        return ProviderError(what, retryable=True, retry_after_s=retry_after, status=status,
                             reason=retryable_reason(exc))
    if status == 413 or (status == 400 and _CONTEXT_OVERFLOW.search(detail)):
        return ContextWindowExceeded(what, status=status)
    if status == 401:
        return ProviderError(f"{what}; {endpoint} rejected the key: set a valid {KEY_VAR}",
                             status=status, reason="auth")
    if status == 403:
        return ProviderError(f"{what}; check that the key in {KEY_VAR} may use {model_id}",
                             status=status, reason="auth")
    if status == 404:
        return ProviderError(f"{what}; check the model id in agent.yaml and the base URL "
                             f"{endpoint}", status=status, reason="model_not_found")
    return ProviderError(what, status=status, reason="invalid_request")


def retryable_reason(exc: anthropic.APIStatusError) -> str:
    """The kind of a retryable status: the API says ``overloaded_error`` (HTTP 529) when it has
    no capacity for the model, which a fallback model may have."""
    status = exc.status_code
    if status == 529 or exc.type == "overloaded_error":
        return "overloaded"
    if status == 429:
        return "rate_limited"
    if status == 408:
        return "timeout"
    return "server_error"


def api_detail(exc: anthropic.APIStatusError) -> str:
    """The provider's own message (``error.message`` of the body), on one line."""
    if exc.api_message:
        detail = exc.api_message
    elif isinstance(exc.body, str) and exc.body.strip():
        detail = exc.body
    else:
        detail = exc.message
    if exc.request_id:
        detail = f"{one_line(detail)} (request {exc.request_id})"
    return one_line(detail)


def retry_after_s(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, or ``retry-after`` as seconds
    or an HTTP date; ``None`` if it said nothing usable."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MAX_MESSAGE else line[:_MAX_MESSAGE - 3] + "..."
