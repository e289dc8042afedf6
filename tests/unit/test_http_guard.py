"""The browser checks of the HTTP API (``toren.server.guard``): parsing ``Host`` and deciding
what a keyless server refuses."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from toren.server.guard import allowed_host_names, refusal, split_host

ALLOWED = allowed_host_names("127.0.0.1", ["toren.test"])


@pytest.mark.parametrize(("value", "parsed"), [
    ("localhost", ("localhost", None)), ("LocalHost.:8420", ("localhost", 8420)),
    ("127.0.0.1:8420", ("127.0.0.1", 8420)), ("[::1]:8420", ("::1", 8420)),
    ("[::1]", ("::1", None)),
    ("", None), (":8420", None), ("[::1", None), ("[::1]x", None), ("::1", None),
    ("localhost:http", None), ("localhost:99999", None), ("localhost:\uff18\uff14", None),
])
def test_host_headers_are_parsed_strictly(value: str, parsed: tuple[str, int | None] | None
                                          ) -> None:
    assert split_host(value) == parsed


@pytest.mark.parametrize(("headers", "code"), [
    ({"Host": "127.0.0.1:8420"}, None),
    ({"Host": "localhost:8420", "Origin": "http://localhost:8420"}, None),
    ({"Host": "localhost", "Origin": "http://localhost"}, None),
    ({"Host": "localhost", "Origin": "http://localhost:80"}, None),
    ({"Host": "localhost", "Origin": "https://localhost"}, None),  # a local TLS proxy
    ({"Host": "toren.test:8420", "Sec-Fetch-Site": "same-origin"}, None),
    ({"Host": "127.0.0.5:8420", "Sec-Fetch-Site": "none"}, None),  # any loopback address
    ({"Host": "[::1]:8420", "Origin": "http://[::1]:8420"}, None),
    ({"Host": "attacker.example:8420"}, "host_not_allowed"),
    ({"Host": "toren.test.attacker.example"}, "host_not_allowed"),
    ({"Host": "10.0.0.5:8420"}, "host_not_allowed"),
    ({"Host": "localhost:8420", "Origin": "http://localhost:3000"}, "cross_site_request"),
    ({"Host": "localhost", "Origin": "https://localhost:8443"}, "cross_site_request"),
    ({"Host": "localhost:8420", "Origin": "http://127.0.0.1:8420"}, "cross_site_request"),
    ({"Host": "localhost:8420", "Origin": "null"}, "cross_site_request"),
    ({"Host": "localhost:8420", "Origin": "http://localhost:8420/path"}, "cross_site_request"),
    ({"Host": "localhost:8420", "Sec-Fetch-Site": "same-site"}, "cross_site_request"),
    ({"Host": "localhost:8420", "Sec-Fetch-Site": "Cross-Site"}, "cross_site_request"),
])
def test_what_a_keyless_server_refuses(headers: dict[str, str], code: str | None) -> None:
    found = refusal(make_mocked_request("POST", "/runs", headers=headers),
                    keys_required=False, allowed_hosts=ALLOWED)
    assert (found and found[0]) == code
    if found:
        assert len(found[1]) > 40  # a message that says what to do


def test_with_keys_only_a_cross_site_fetch_is_refused() -> None:
    def check(**headers: str) -> str | None:
        found = refusal(make_mocked_request("GET", "/runs", headers=headers),
                        keys_required=True, allowed_hosts=ALLOWED)
        return found and found[0]

    # behind a proxy the Host and Origin are the deployment's: a key is what authorizes
    assert check(Host="toren.example.com", Origin="https://console.example.com") is None
    assert check(**{"Sec-Fetch-Site": "cross-site"}) == "cross_site_request"
