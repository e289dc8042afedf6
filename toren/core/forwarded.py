"""The client's address behind trusted proxies: which hop of ``X-Forwarded-For`` to believe.

A proxy or load balancer (an AWS ALB, nginx, Caddy) connects to Toren itself and says who its
client was by appending that address to ``X-Forwarded-For``. Anyone can send that header, so
it is read only when the connection comes from a proxy the operator names
(``TOREN_TRUSTED_PROXIES``), and only as far back as the chain of trusted proxies goes: the
first address from the right that is not a trusted proxy is the client. Everything to its left
was written by the client, and may be made up.

Pure functions: the HTTP server's audit middleware calls ``client_address`` per request with
the settings ``parse_trusted_proxies`` made at start.
"""

from __future__ import annotations

from collections.abc import Iterable
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

Network = IPv4Network | IPv6Network

#: Hops of ``X-Forwarded-For`` looked at, from the right: a longer chain is a made-up one
#: (a real path has a handful of proxies), and must not cost a parse per entry.
MAX_HOPS = 32


def parse_trusted_proxies(raw: str) -> tuple[Network, ...]:
    """The networks of a comma-separated list of addresses and CIDR blocks
    (``10.0.0.0/16, 192.168.1.7, fd00::/8``); ``ValueError`` naming the entry that is neither.
    An empty list trusts no proxy."""
    networks: list[Network] = []
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        try:
            networks.append(ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"{entry[:60]!r} is not an IP address or CIDR block (e.g. "
                             "10.0.0.0/16 or 192.168.1.7)") from None
    return tuple(networks)


def client_address(peer: str | None, forwarded_for: Iterable[str],
                   trusted: tuple[Network, ...]) -> str | None:
    """The client's address: ``peer`` (the connection's) unless it is a trusted proxy, then
    the right-most address of ``forwarded_for`` (each ``X-Forwarded-For`` header's value, in
    order) that is not a trusted proxy. If every hop is trusted, the left-most one; if a hop
    is not an address, the trusted proxy that passed it on (a hop that cannot be read ends
    the chain that can be believed)."""
    if not trusted or peer is None or not _is_trusted(peer, trusted):
        return peer
    hops = [hop.strip() for value in forwarded_for for hop in value.split(",")]
    believed = peer
    for hop in reversed(hops[-MAX_HOPS:]):
        address = _address(hop)
        if address is None:
            return believed
        if not _is_trusted(address, trusted):
            return address
        believed = address
    return believed


def _address(hop: str) -> str | None:
    """The address a hop names (``[::1]:8080`` and ``1.2.3.4:5678`` forms included), in its
    canonical form, or ``None``."""
    text = hop
    if text.startswith("["):  # [IPv6]:port
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:  # IPv4:port
        text = text.partition(":")[0]
    try:
        return str(_unmapped(ip_address(text)))
    except ValueError:
        return None


def _is_trusted(address: str, trusted: tuple[Network, ...]) -> bool:
    try:
        parsed = _unmapped(ip_address(address))
    except ValueError:
        return False
    return any(parsed in network for network in trusted)


def _unmapped(address: IPv4Address | IPv6Address) -> IPv4Address | IPv6Address:
    """An IPv4 address for an IPv4-mapped IPv6 one (``::ffff:10.0.0.7``, as a dual-stack
    socket reports an IPv4 peer), so that IPv4 blocks match it."""
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
