"""Completion webhooks, the pure part: subscriptions, URL and address checks, the body, the
retry delay (docs/guides/webhooks.md). The host sends (``toren.host.webhooks``); the store
writes a delivery in the transaction that changes a run's status (``WebhookStore``)."""

from __future__ import annotations

import ipaddress
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from toren.core.errors import InvalidWebhook

#: What a subscription may ask to be told: the run ended (any terminal status), or it parked
#: waiting for a person (an approval, an answer or a session's next message).
WEBHOOK_EVENTS = ("finished", "awaiting_approval", "awaiting_input")
#: What a subscription that names no events is told.
DEFAULT_EVENTS = ("finished",)
MAX_URL_LENGTH = 2048
#: Subscriptions one run (or one agent's ``notify:``) may have.
MAX_SUBSCRIPTIONS = 10
#: An environment variable's name, as ``secret_env`` names the signing secret.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: The shared address space of carrier-grade NAT (RFC 6598): not public, whatever
#: ``ipaddress`` says of it.
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_HOST_NAMES_OF_LOOPBACK = ("localhost", "localhost.localdomain", "ip6-localhost")


@dataclass(frozen=True)
class WebhookSubscription:
    """Whom to tell about a run: a URL, the events it wants, and (for an agent's ``notify:``)
    the environment variable holding its signing secret (``None``: the deployment's
    ``TOREN_WEBHOOK_SECRET``). The secret itself is never stored, only its variable's name."""

    url: str
    events: tuple[str, ...] = DEFAULT_EVENTS
    secret_env: str | None = None

    def to_json(self) -> dict[str, Any]:
        """As the store keeps it (the run's ``webhooks``, the agent's ``notify``)."""
        return {"url": self.url, "events": list(self.events), "secret_env": self.secret_env}


def parse_subscriptions(value: Any, *, field: str,
                        allow_secret_env: bool = False) -> tuple[WebhookSubscription, ...]:
    """Subscriptions as a request or agent.yaml gives them: one (a URL, or an object with
    ``url``, optional ``events`` and, where ``allow_secret_env``, ``secret_env``) or a list of
    them. ``InvalidWebhook`` naming ``field`` (``webhook``, ``notify[1].url``) when malformed.
    Called by the HTTP API (``POST /runs``, ``POST /sessions``), the CLI and the agent loader."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise InvalidWebhook(f"{field}: give at least one webhook, or leave {field} out")
    if len(items) > MAX_SUBSCRIPTIONS:
        raise InvalidWebhook(f"{field}: at most {MAX_SUBSCRIPTIONS} webhooks")
    many = isinstance(value, list)
    return tuple(_subscription(item, field=f"{field}[{n}]" if many else field,
                               allow_secret_env=allow_secret_env)
                 for n, item in enumerate(items))


def _subscription(value: Any, *, field: str, allow_secret_env: bool) -> WebhookSubscription:
    if isinstance(value, str):
        return WebhookSubscription(check_webhook_url(value, field=field))
    if not isinstance(value, dict):
        raise InvalidWebhook(f"{field} must be a URL or an object "
                             '{"url": "https://...", "events": ["finished"]}')
    allowed = {"url", "events", *(("secret_env",) if allow_secret_env else ())}
    unknown = set(value) - allowed
    if unknown:
        raise InvalidWebhook(f"{field}: unknown field(s) {', '.join(sorted(map(str, unknown)))}; "
                             f"a webhook has {', '.join(sorted(allowed))}")
    url = check_webhook_url(value.get("url"), field=f"{field}.url")
    events = value.get("events", list(DEFAULT_EVENTS))
    if (not isinstance(events, list) or not events
            or not all(isinstance(e, str) and e in WEBHOOK_EVENTS for e in events)):
        raise InvalidWebhook(f"{field}.events must be a non-empty list of "
                             f"{', '.join(WEBHOOK_EVENTS)}")
    secret_env = value.get("secret_env")
    if secret_env is not None and (not isinstance(secret_env, str)
                                   or not ENV_NAME.match(secret_env)):
        raise InvalidWebhook(f"{field}.secret_env must name an environment variable "
                             "(letters, digits and _), not hold the secret itself")
    return WebhookSubscription(url, tuple(dict.fromkeys(events)), secret_env)


def check_webhook_url(url: Any, *, field: str) -> str:
    """``url`` if it is an absolute ``http(s)`` URL a webhook may be sent to, else
    ``InvalidWebhook`` naming ``field``. Where it resolves to is checked at send time
    (``refused_address``); a literal address or ``localhost`` is checked by the caller with
    ``refused_host`` at submission too."""
    if not isinstance(url, str) or not url:
        raise InvalidWebhook(f"{field} is required: an http:// or https:// URL")
    if len(url) > MAX_URL_LENGTH:
        raise InvalidWebhook(f"{field} is longer than {MAX_URL_LENGTH} characters")
    if any(ch.isspace() or not ch.isprintable() for ch in url) or not url.isascii():
        raise InvalidWebhook(f"{field} must be an ASCII URL without spaces or control "
                             "characters (percent-encode them)")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port out of range)
    except ValueError as exc:
        raise InvalidWebhook(f"{field} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidWebhook(f"{field} must be an http:// or https:// URL")
    if not parts.hostname:
        raise InvalidWebhook(f"{field} has no host")
    if parts.username is not None or parts.password is not None:
        raise InvalidWebhook(f"{field} must not carry credentials: receivers check the "
                             "Toren-Signature header instead")
    if parts.fragment:
        raise InvalidWebhook(f"{field} must not have a #fragment")
    return url


def refused_host(url: str) -> str | None:
    """Why a webhook to ``url`` is refused without resolving its host: ``localhost`` or a
    literal address ``refused_address`` refuses (``None``: a name, checked at send time)."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if host in _HOST_NAMES_OF_LOOPBACK or host.endswith(".localhost"):
        return f"{host} is a loopback host name"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return refused_address(address)


def refused_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why a webhook may not connect to ``address`` (server-side request forgery: loopback,
    private, link-local (cloud metadata services), multicast, reserved or unspecified
    addresses), or ``None`` for a public one. Unless ``TOREN_WEBHOOK_ALLOW_PRIVATE`` is on."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:
            return refused_address(embedded)
    kinds = (("loopback", address.is_loopback), ("link-local", address.is_link_local),
             ("multicast", address.is_multicast), ("unspecified", address.is_unspecified),
             ("private", address.is_private or address in _SHARED),
             ("reserved", address.is_reserved))
    for kind, matches in kinds:
        if matches:
            return f"{address} is a {kind} address"
    if not address.is_global:
        return f"{address} is not a public address"
    return None


def retry_delay(attempt: int, base_s: float, max_s: float,
                rng: random.Random | None = None) -> float:
    """Seconds before the next try after failed try number ``attempt`` (1, 2, ...):
    exponential from ``base_s``, at most ``max_s``, with jitter (between half and all of it)
    so receivers coming back are not hit by every sender at once."""
    exponent = min(attempt - 1, 60)  # 2**60 times any base is past any cap
    delay = min(max_s, base_s * math.pow(2, exponent))
    return (rng or random).uniform(delay / 2, delay)


def event_type(event: str) -> str:
    """The body's ``type``: ``run.finished``, ``run.awaiting_approval``, ..."""
    return f"run.{event}"


def webhook_body(*, event_id: str, event: str, status: str, occurred_at: datetime,
                 run: Mapping[str, Any], totals: Mapping[str, Any]) -> dict[str, Any]:
    """What a webhook POSTs (built once per delivery, at its first try, and sent unchanged on
    every retry). ``run`` is the run's row (``RunRecord.to_json``), ``status`` the run's
    status when the event happened, ``totals`` its receipt's totals."""
    created, finished = run.get("created_at"), run.get("finished_at")
    duration = None
    if created and finished:
        duration = round((datetime.fromisoformat(finished)
                          - datetime.fromisoformat(created)).total_seconds(), 3)
    return {
        "id": event_id, "type": event_type(event), "occurred_at": occurred_at.isoformat(),
        "run_id": run["id"], "agent": run["agent"], "kind": run.get("kind", "run"),
        "status": status, "stop_reason": run.get("stop_reason") if event == "finished" else None,
        "output": run.get("output") if event == "finished" else None,
        "error": run.get("error") if event == "finished" else None,
        "created_at": created, "finished_at": finished,
        "totals": {"cost_usd": totals.get("cost_usd", 0.0),
                   "input_tokens": totals.get("input_tokens", 0),
                   "output_tokens": totals.get("output_tokens", 0),
                   "model_calls": totals.get("model_calls", 0),
                   "tool_calls": totals.get("tool_calls", 0),
                   "duration_s": duration},
    }


def merge_subscriptions(*groups: Sequence[WebhookSubscription]) -> list[dict[str, Any]]:
    """The subscriptions as the store keeps them, duplicates (same URL, events and secret)
    once."""
    seen: dict[tuple[str, tuple[str, ...], str | None], dict[str, Any]] = {}
    for group in groups:
        for sub in group:
            seen.setdefault((sub.url, sub.events, sub.secret_env), sub.to_json())
    return list(seen.values())
