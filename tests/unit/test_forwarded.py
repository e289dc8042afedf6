"""Which ``X-Forwarded-For`` hop is the client (``toren.core.forwarded``): only a trusted
proxy's header is read, only as far back as trusted proxies go, and hostile headers (made-up
hops, garbage, huge chains) never name an address nobody trusted vouched for."""

from __future__ import annotations

import pytest

from toren.config import Settings
from toren.core.forwarded import MAX_HOPS, client_address, parse_trusted_proxies
from toren.errors import ConfigError

ALB = parse_trusted_proxies("10.40.0.0/16")


@pytest.mark.parametrize(("peer", "forwarded", "trusted", "client"), [
    # no proxy trusted: the header is the client's own words
    ("198.51.100.4", ["1.2.3.4"], (), "198.51.100.4"),
    # a peer that is not a trusted proxy: its header is ignored, however plausible
    ("198.51.100.4", ["10.40.1.1"], ALB, "198.51.100.4"),
    # the load balancer's hop: the client it saw
    ("10.40.3.9", ["203.0.113.7"], ALB, "203.0.113.7"),
    # the client prepended a made-up address: the hop the proxy wrote wins
    ("10.40.3.9", ["127.0.0.1, 203.0.113.7"], ALB, "203.0.113.7"),
    # two trusted proxies in a row, then the client
    ("10.40.3.9", ["203.0.113.7, 10.40.8.8"], ALB, "203.0.113.7"),
    # several headers are one list, in order
    ("10.40.3.9", ["5.5.5.5", "203.0.113.7"], ALB, "203.0.113.7"),
    # every hop trusted: the left-most
    ("10.40.3.9", ["10.40.2.2, 10.40.8.8"], ALB, "10.40.2.2"),
    # no header from a trusted proxy: the proxy itself
    ("10.40.3.9", [], ALB, "10.40.3.9"),
    # garbage from the right end: the proxy that passed it on
    ("10.40.3.9", ["203.0.113.7, <script>"], ALB, "10.40.3.9"),
    ("10.40.3.9", ["203.0.113.7, 10.40.8.8, unknown"], ALB, "10.40.3.9"),
    ("10.40.3.9", ["unknown, 10.40.8.8"], ALB, "10.40.8.8"),
    # ports and IPv6 forms; canonical text out
    ("10.40.3.9", ["203.0.113.7:51234"], ALB, "203.0.113.7"),
    ("10.40.3.9", ["[2001:DB8::1]:443"], ALB, "2001:db8::1"),
    ("10.40.3.9", ["2001:db8:0:0::1"], ALB, "2001:db8::1"),
    # a dual-stack socket's IPv4-mapped peer matches an IPv4 block
    ("::ffff:10.40.3.9", ["203.0.113.7"], ALB, "203.0.113.7"),
    # no peer known (a unix socket)
    (None, ["203.0.113.7"], ALB, None),
])
def test_the_client_is_the_right_most_hop_no_trusted_proxy_wrote(
        peer: str | None, forwarded: list[str], trusted: tuple, client: str | None) -> None:
    assert client_address(peer, forwarded, trusted) == client


def test_a_huge_chain_is_read_only_from_its_right_end() -> None:
    chain = ", ".join(["10.40.0.1"] * 100_000)
    # past MAX_HOPS trusted hops the left-most one looked at is the answer, without reading
    # the other 99,968
    assert client_address("10.40.3.9", [chain], ALB) == "10.40.0.1"
    spoofed = ", ".join(["203.0.113.7"] + ["10.40.0.1"] * MAX_HOPS)
    assert client_address("10.40.3.9", [spoofed], ALB) == "10.40.0.1"


def test_trusted_proxies_come_from_the_environment() -> None:
    settings = Settings.from_env({"TOREN_TRUSTED_PROXIES": " 10.0.0.0/8 ,192.168.1.7,, fd00::/8 "})
    assert [str(n) for n in settings.trusted_proxies] == ["10.0.0.0/8", "192.168.1.7/32",
                                                          "fd00::/8"]
    assert Settings.from_env({}).trusted_proxies == ()


@pytest.mark.parametrize("raw", ["10.0.0.0/33", "my-alb", "10.0.0.1 10.0.0.2", "*"])
def test_a_malformed_trusted_proxy_names_the_variable_and_the_entry(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"TOREN_TRUSTED_PROXIES: .* is not an IP address "
                                          r"or CIDR block"):
        Settings.from_env({"TOREN_TRUSTED_PROXIES": raw})
