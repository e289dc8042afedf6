"""Signing and verifying Toren's webhooks: what a receiver imports (docs/guides/webhooks.md).

Every webhook carries ``Toren-Signature: t=<unix seconds>,v1=<hex>``, where ``<hex>`` is
HMAC-SHA256 of ``f"{t}.{body}"`` (the raw body bytes) under the signing secret. A receiver
checks it with ``verify`` before trusting the body, and deduplicates on the body's ``id`` (the
same on every retry of one delivery).
"""

from __future__ import annotations

import hashlib
import hmac
import time

from toren.core.errors import WebhookSignatureError

#: The header that carries the signature.
SIGNATURE_HEADER = "Toren-Signature"
#: How old a signature ``verify`` accepts by default: a captured request replayed later fails.
DEFAULT_TOLERANCE_S = 300.0

__all__ = ["DEFAULT_TOLERANCE_S", "SIGNATURE_HEADER", "WebhookSignatureError", "sign", "verify"]


def _digest(secret: str | bytes, timestamp: int, body: bytes) -> str:
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    return hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign(secret: str | bytes, body: bytes, *, timestamp: int | None = None) -> str:
    """The ``Toren-Signature`` value for ``body`` sent at ``timestamp`` (default: now).
    Called by the host for every attempt of a delivery (a new timestamp each time)."""
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={_digest(secret, t, body)}"


def verify(secret: str | bytes, body: bytes, header: str | None, *,
           tolerance_s: float = DEFAULT_TOLERANCE_S, now: float | None = None) -> int:
    """Check a webhook's ``Toren-Signature`` header against its raw ``body``; return its
    timestamp. Raises ``WebhookSignatureError`` when the header is missing or malformed, the
    timestamp is more than ``tolerance_s`` from ``now`` (a replay), or no ``v1`` signature
    matches (compared in constant time). Several ``v1=`` parts are allowed (any may match).

    Args:
        secret: the signing secret (``TOREN_WEBHOOK_SECRET``, or the variable an agent's
            ``notify:`` names).
        body: the request body exactly as received, before any JSON parsing.
        header: the ``Toren-Signature`` header's value.
    """
    if not header:
        raise WebhookSignatureError(f"no {SIGNATURE_HEADER} header")
    timestamp: int | None = None
    signatures: list[str] = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t":
            try:
                timestamp = int(value)
            except ValueError:
                raise WebhookSignatureError(f"{SIGNATURE_HEADER}: t is not a number") from None
        elif key == "v1":
            signatures.append(value)
    if timestamp is None or not signatures:
        raise WebhookSignatureError(f"{SIGNATURE_HEADER} must be t=<unix seconds>,v1=<hex>")
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        raise WebhookSignatureError(f"{SIGNATURE_HEADER} is {abs(current - timestamp):.0f}s "
                                    f"from now (more than {tolerance_s:g}s): a replay?")
    expected = _digest(secret, timestamp, body)
    if not any(hmac.compare_digest(expected, candidate) for candidate in signatures):
        raise WebhookSignatureError(f"{SIGNATURE_HEADER} does not match the body and secret")
    return timestamp
