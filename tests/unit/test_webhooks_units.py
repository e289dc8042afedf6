"""Completion webhooks' pure parts: signatures a receiver verifies, the addresses refused,
subscriptions as requests and agent.yaml give them, the retry delay."""

from __future__ import annotations

import ipaddress
import random

import pytest

from toren.core.webhooks import (
    WebhookSubscription,
    parse_subscriptions,
    refused_address,
    refused_host,
    retry_delay,
)
from toren.errors import InvalidWebhook, WebhookSignatureError
from toren.webhooks import sign, verify

BODY = b'{"id":"e1","type":"run.finished"}'


def test_a_signature_verifies_and_any_change_fails() -> None:
    header = sign("secret", BODY, timestamp=1_700_000_000)
    assert verify("secret", BODY, header, now=1_700_000_100) == 1_700_000_000
    for secret, body, value in (
            ("other", BODY, header),  # another secret
            ("secret", BODY + b" ", header),  # another body
            ("secret", BODY, header.replace("t=1700000000", "t=1700000001")),  # another time
            ("secret", BODY, header[:-1] + ("0" if header[-1] != "0" else "1"))):
        with pytest.raises(WebhookSignatureError, match="does not match"):
            verify(secret, body, value, now=1_700_000_000)


@pytest.mark.parametrize("header", [None, "", "v1=abc", "t=1700000000", "t=x,v1=abc"])
def test_a_malformed_signature_header_is_refused(header: str | None) -> None:
    with pytest.raises(WebhookSignatureError):
        verify("secret", BODY, header, now=1_700_000_000)


def test_an_old_signature_is_a_replay_and_rotation_takes_either_secret() -> None:
    header = sign("secret", BODY, timestamp=1_700_000_000)
    with pytest.raises(WebhookSignatureError, match="replay"):
        verify("secret", BODY, header, now=1_700_000_000 + 301)
    both = f"{header},v1={sign('new', BODY, timestamp=1_700_000_000).split('v1=')[1]}"
    verify("new", BODY, both, now=1_700_000_000)
    verify("secret", BODY, both, now=1_700_000_000)


@pytest.mark.parametrize("address", [
    "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
    "0.0.0.0", "224.0.0.1", "240.0.0.1", "::1", "fe80::1", "fc00::1", "fd00:ec2::254",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "2002:7f00:1::1", "::"])
def test_private_and_special_addresses_are_refused(address: str) -> None:
    assert refused_address(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert refused_address(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(("url", "refused"), [
    ("http://localhost/x", True), ("http://LOCALHOST./x", True), ("http://a.localhost/x", True),
    ("http://127.0.0.1:8080/x", True), ("http://[::1]/x", True),
    ("https://hooks.example.com/x", False), ("https://93.184.216.34/x", False)])
def test_refused_host_checks_names_and_literal_addresses(url: str, refused: bool) -> None:
    assert (refused_host(url) is not None) is refused


def test_subscriptions_from_a_url_an_object_or_a_list() -> None:
    assert parse_subscriptions("https://a.example/h", field="webhook") == (
        WebhookSubscription("https://a.example/h"),)
    assert parse_subscriptions(
        [{"url": "https://a.example/h", "events": ["awaiting_input", "finished"]},
         "http://b.example/h"], field="webhook") == (
        WebhookSubscription("https://a.example/h", ("awaiting_input", "finished")),
        WebhookSubscription("http://b.example/h"))
    assert parse_subscriptions({"url": "https://a.example/h", "secret_env": "KEY"},
                               field="notify", allow_secret_env=True)[0].secret_env == "KEY"


@pytest.mark.parametrize(("value", "named"), [
    ({"url": "https://a.example/h", "secret_env": "KEY"}, "webhook: unknown field"),
    ([{"url": "https://a.example/h"}, {"url": "gopher://x"}], "webhook[1].url"),
    ({"url": "https://a.example/h", "events": ["done"]}, "webhook.events"),
    ("https://user:pw@a.example/h", "credentials"),
])
def test_a_bad_subscription_names_its_field(value: object, named: str) -> None:
    with pytest.raises(InvalidWebhook, match=named.replace("[", r"\[").replace("]", r"\]")):
        parse_subscriptions(value, field="webhook")


def test_the_retry_delay_grows_with_jitter_up_to_its_cap() -> None:
    rng = random.Random(7)
    delays = [retry_delay(n, 1.0, 60.0, rng) for n in range(1, 12)]
    for n, delay in enumerate(delays, start=1):
        full = min(60.0, 2.0 ** (n - 1))
        assert full / 2 <= delay <= full
    assert retry_delay(10_000, 1.0, 60.0, rng) <= 60.0
