"""Meta's webhook signature: ``X-Hub-Signature-256: sha256=<hex HMAC of the raw body>``."""

from __future__ import annotations

import hashlib
import hmac


def sign(body: bytes, app_secret: str) -> str:
    """The header value Meta sends for ``body`` (what a test's fake platform sends too)."""
    return "sha256=" + hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()


def signature_valid(body: bytes, header: str | None, app_secret: str) -> bool:
    """Whether ``header`` is the signature of the raw ``body`` with ``app_secret``, compared
    in constant time. A missing header, another scheme or an empty secret is invalid."""
    if not header or not app_secret or not header.startswith("sha256="):
        return False
    return hmac.compare_digest(header.encode("ascii", "replace"),
                               sign(body, app_secret).encode("ascii"))
