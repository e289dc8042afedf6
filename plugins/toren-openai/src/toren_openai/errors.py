"""The SDK's exceptions as Toren errors: one line a user can act on, retryable or permanent."""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Mapping
from typing import Any

import openai

from toren.plugin import ContextWindowExceeded, ProviderError

#: Longest wait a Retry-After header may ask for before it is taken as nonsense (one day).
MAX_RETRY_AFTER_S = 86_400.0

# vLLM, llama.cpp and proxies say it in words where OpenAI sends a code.
_CONTEXT_WORDS = re.compile(
    r"context[ _-]?(length|window|size)|maximum context|prompt is too long|too many tokens|"
    r"exceeds? the (available )?context", re.IGNORECASE)
_OVERLOADED = re.compile(r"overloaded|over capacity|no capacity", re.IGNORECASE)
_REJECTED_WORDS = re.compile(
    r"unsupported|not supported|unrecognized|extra (inputs|fields)|not permitted", re.IGNORECASE)


def translate(exc: openai.OpenAIError, *, model_id: str, endpoint: str) -> ProviderError:
    """The ``ProviderError`` for an SDK exception raised by a call to ``model_id``.

    Args:
        exc: what the SDK raised.
        model_id: the Toren model id, named in messages.
        endpoint: the base URL the client talks to, named in messages.
    """
    if isinstance(exc, openai.APITimeoutError):
        return ProviderError(f"{model_id}: no answer from {endpoint} within the timeout "
                             "(TOREN_OPENAI_TIMEOUT); will retry", retryable=True,
                             reason="timeout")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        why = f": {cause}" if cause and str(cause) else ""
        return ProviderError(f"{model_id}: cannot connect to {endpoint}{why}; will retry",
                             retryable=True, reason="connection")
    if not isinstance(exc, openai.APIStatusError):
        return ProviderError(f"{model_id}: {exc}")
    status = exc.status_code
    code = error_code(exc)
    message = provider_message(exc)
    said = f"{endpoint} answered {status}" + (f" ({code})" if code else "")
    if status == 429:
        if code == "insufficient_quota":
            return ProviderError(
                f"{model_id}: the account of OPENAI_API_KEY has no quota left ({said}: "
                f"{message}); this does not pass by retrying: check the plan and billing",
                status=status, reason="quota")
        return ProviderError(f"{model_id}: rate limited ({said}: {message})", retryable=True,
                             retry_after_s=retry_after(exc.response.headers), status=status,
                             reason="rate_limited")
    if status >= 500 or status in (408, 409):
        return ProviderError(f"{model_id}: {said}: {message}", retryable=True,
                             retry_after_s=retry_after(exc.response.headers), status=status,
                             reason=_retryable_reason(status, code, message))
    if status in (400, 413) and is_context_overflow(exc):
        return ContextWindowExceeded(f"{model_id}: the request does not fit the context window "
                                     f"({said}: {message})", status=status)
    if status in (401, 403):
        return ProviderError(f"{model_id}: {said}: {message}. Check OPENAI_API_KEY (and that "
                             f"its project may use {model_id.partition('/')[2]})",
                             status=status, reason="auth")
    if status == 404:
        return ProviderError(f"{model_id}: not found at {endpoint} ({said}: {message}); check "
                             "the model name and the base URL (baseUrl / OPENAI_BASE_URL, which "
                             "usually ends in /v1)", status=status, reason="model_not_found")
    return ProviderError(f"{model_id}: {said}: {message}", status=status,
                         reason="invalid_request")


def _retryable_reason(status: int, code: str | None, message: str) -> str:
    """``overloaded`` when the server says it has no capacity (OpenAI answers 503 "The engine
    is currently overloaded"; compatible servers say so in words), which a fallback model may
    have; ``timeout`` for 408; else ``server_error``."""
    if status == 408:
        return "timeout"
    if (code or "").lower() in ("overloaded", "server_overloaded") or _OVERLOADED.search(message):
        return "overloaded"
    return "server_error"


def error_code(exc: openai.APIStatusError) -> str | None:
    """The ``code`` (else ``type``) of the error body, if the server sent one."""
    if exc.code:
        return exc.code
    return exc.type if isinstance(exc.type, str) and exc.type else None


def provider_message(exc: openai.APIStatusError) -> str:
    """What the server said, without the SDK's ``Error code: NNN -`` prefix."""
    body: Any = exc.body
    if isinstance(body, Mapping):
        message = body.get("message") or body.get("detail") or body.get("error")
        if isinstance(message, str) and message.strip():
            return _one_line(message)
    if isinstance(body, str) and body.strip():
        return _one_line(body)
    return _one_line(exc.message) or "no message"


def is_context_overflow(exc: openai.APIStatusError) -> bool:
    """Whether a 400 says the prompt is longer than the model's context window."""
    return (error_code(exc) == "context_length_exceeded"
            or bool(_CONTEXT_WORDS.search(provider_message(exc))))


def rejects_parameter(exc: openai.APIStatusError, parameter: str) -> bool:
    """Whether a 400 rejects ``parameter`` (``max_tokens`` on OpenAI's reasoning models)."""
    if exc.status_code not in (400, 422):
        return False
    text = provider_message(exc)
    if exc.param:  # a structured answer names the parameter it is about
        return exc.param == parameter and (exc.code == "unsupported_parameter"
                                           or bool(_REJECTED_WORDS.search(text)))
    # "... Use 'max_completion_tokens' instead" names the cure, not the rejected parameter
    text = re.sub(r"use\s+\W?\w+\W?\s+instead", "", text, flags=re.IGNORECASE)
    return parameter in text and bool(_REJECTED_WORDS.search(text))


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked to wait: ``retry-after-ms``, else ``retry-after`` (seconds or an
    HTTP date); ``None`` if absent or unreadable."""
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            continue
        return _sane(seconds)
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        return _sane(email.utils.mktime_tz(parsed) - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def _sane(seconds: float) -> float | None:
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_AFTER_S)


def _one_line(text: str, limit: int = 500) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit] + "..."
