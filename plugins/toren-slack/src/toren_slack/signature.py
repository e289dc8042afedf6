"""Slack's request signature: ``X-Slack-Signature: v0=<hex HMAC-SHA256 of
v0:<X-Slack-Request-Timestamp>:<raw body>>`` with the app's signing secret.

Not slack_sdk's ``SignatureVerifier``: it decodes the body as UTF-8 (a hostile body that is
not raises) and ``int()``s the timestamp header (a hostile header raises); here both are
plain refusals, and the HMAC is over the raw bytes as they arrived.
"""

from __future__ import annotations

import hashlib
import hmac
import re

#: How far a request's timestamp may be from this machine's clock (Slack's own advice).
MAX_SKEW_S = 5 * 60
_TIMESTAMP = re.compile(r"[0-9]{1,12}")


def sign(body: bytes, timestamp: str, signing_secret: str) -> str:
    """The ``X-Slack-Signature`` Slack sends for ``body`` at ``timestamp`` (what a test's
    fake platform sends too)."""
    base = b"v0:" + timestamp.encode("ascii") + b":" + body
    return "v0=" + hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()


def signature_valid(body: bytes, timestamp: str | None, signature: str | None,
                    signing_secret: str, now: float) -> bool:
    """Whether ``signature`` signs the raw ``body`` at ``timestamp`` with ``signing_secret``
    (compared in constant time) and ``timestamp`` is within ``MAX_SKEW_S`` of ``now`` (a
    replayed request is refused). A missing header, another scheme or an empty secret is
    invalid."""
    if not signature or not timestamp or not signing_secret:
        return False
    if not _TIMESTAMP.fullmatch(timestamp) or abs(now - int(timestamp)) > MAX_SKEW_S:
        return False
    return hmac.compare_digest(signature.encode("ascii", "replace"),
                               sign(body, timestamp, signing_secret).encode("ascii"))
