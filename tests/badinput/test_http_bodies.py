"""Hostile HTTP requests against a real `toren dev`: each gets a clear JSON 4xx, nothing
half-written, and the server goes on serving runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.test_http_api import TOOLS, call, conforms
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(180)
ZERO = "00000000-0000-0000-0000-000000000000"

# (method, path, raw body or None, expected status, expected error code)
CASES = [
    ("POST", "/runs", b'{"agent": "crew", "input": "a\\u0000b"}', 400, "unstorable_value"),
    ("POST", "/runs", b'{"agent": "crew", "input": {"k\\u0000": 1}}', 400, "unstorable_value"),
    ("POST", "/runs", b'{"agent": "crew", "input": ["\\ud800"]}', 400, "unstorable_value"),
    ("POST", "/runs", b'{"agent": "crew", "input": "x"', 400, "invalid_json"),
    ("POST", "/runs", b"\xff\xfe\x00garbage", 400, "invalid_json"),
    ("POST", "/runs", b"", 400, "invalid_json"),
    ("POST", "/runs", b"null", 400, "invalid_body"),
    ("POST", "/runs", b'"a string"', 400, "invalid_body"),
    ("POST", "/runs", b'{"agent": 7, "input": "x"}', 400, "invalid_body"),
    ("POST", "/runs", b'{"agent": ["crew"], "input": "x"}', 400, "invalid_body"),
    ("POST", "/runs", b'{"agent": "crew", "input": "x", "agent ": 1}', 400, "invalid_body"),
    ("POST", "/runs", b'{"agent": "../../etc/passwd", "input": "x"}', 404, "agent_not_found"),
    ("POST", "/runs", b'{"agent": "crew", "input": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400,
     "invalid_json"),
    ("POST", "/runs", b'{"agent": "crew", "input": "' + b"x" * (1024 * 1024) + b'"}', 413,
     "request_entity_too_large"),
    # nested deeper than the run log stores (the store's JSON encoder failed with a 500)
    ("POST", "/runs", b'{"agent": "crew", "input": ' + b"[" * 300 + b"]" * 300 + b"}", 400,
     "unstorable_value"),
    ("POST", "/runs", b'{"agent": "crew", "input": ' + b'{"a": ' * 252 + b"1" + b"}" * 253,
     400, "unstorable_value"),
    ("POST", "/sessions", b'{"agent": null}', 400, "invalid_body"),
    ("POST", f"/sessions/{ZERO}/messages", b'{"text": "hi"}', 404, "session_not_found"),
    ("GET", "/runs/' OR 1=1 --", None, 404, "run_not_found"),
    ("GET", "/runs/" + "9" * 5000, None, 404, "run_not_found"),
    ("GET", "/runs/%F0%9F%92%A5", None, 404, "run_not_found"),
    ("GET", f"/runs/{ZERO}", None, 404, "run_not_found"),
    ("GET", f"/runs/{ZERO}/events?after=%00", None, 404, "run_not_found"),
    ("POST", f"/runs/{ZERO}/cancel", b"{}", 404, "run_not_found"),
    ("GET", "/sessions/;DROP TABLE runs", None, 404, "session_not_found"),
    ("GET", "/sessions/%00", None, 404, "session_not_found"),
    ("POST", "/sessions/%00/messages", b'{"text": "hi"}', 404, "session_not_found"),
    ("GET", "/runs?limit=-1", None, 400, "invalid_limit"),
    ("GET", "/runs?limit=1e9", None, 400, "invalid_limit"),
    ("GET", "/runs?cursor=" + "A" * 4000, None, 400, "invalid_cursor"),
    ("GET", "/runs?kind=robot", None, 400, "invalid_kind"),
    ("GET", "/costs?since=%00", None, 400, "invalid_costs_query"),
    ("GET", "/costs?until=%27%20OR%201%3D1%20--", None, 400, "invalid_costs_query"),
    ("GET", "/costs?period=" + "9" * 5000, None, 400, "invalid_costs_query"),
    ("GET", "/costs?since=1970-01-01&until=2026-01-01", None, 400, "invalid_costs_window"),
    ("GET", "/costs?agent=..%2F..%2Fetc%2Fpasswd", None, 404, "agent_not_found"),
    # memory: (docs/guides/memory.md): a person's reads and erasures, and a run's subject
    ("POST", "/runs", b'{"agent": "crew", "input": "x", "subject": "a\\nb"}', 422,
     "invalid_memory"),
    ("POST", "/runs", b'{"agent": "crew", "input": "x", "subject": ""}', 422, "invalid_memory"),
    ("POST", "/sessions", b'{"agent": "crew", "subject": 7}', 422, "invalid_memory"),
    ("POST", "/sessions", b'{"agent": "crew", "subject": "' + b"x" * 201 + b'"}', 422,
     "invalid_memory"),
    ("GET", "/memories?scope=everyone", None, 422, "invalid_memory"),
    ("GET", "/memories?limit=0", None, 422, "invalid_memory"),
    ("GET", "/memories?limit=1e9", None, 422, "invalid_memory"),
    ("GET", "/memories?subject=%00", None, 422, "invalid_memory"),
    ("GET", "/memories?q=" + "x" * 1001, None, 422, "invalid_memory"),
    ("GET", "/memories?robot=1", None, 400, "invalid_query"),
    ("GET", "/memories/' OR 1=1 --", None, 404, "memory_not_found"),
    ("GET", "/memories/%00", None, 404, "memory_not_found"),
    ("GET", f"/memories/{ZERO}", None, 404, "memory_not_found"),
    ("PATCH", f"/memories/{ZERO}", b'{"content": "x"}', 404, "memory_not_found"),
    ("PATCH", f"/memories/{ZERO}", b"{}", 400, "invalid_body"),
    ("PATCH", f"/memories/{ZERO}", b'{"pinned": "yes"}', 400, "invalid_body"),
    ("PATCH", f"/memories/{ZERO}", b'{"content": ["x"]}', 400, "invalid_body"),
    ("PATCH", f"/memories/{ZERO}", b'{"content": "x", "agent": "crew"}', 400, "invalid_body"),
    ("PATCH", f"/memories/{ZERO}", b'{"content": "' + b"x" * 4001 + b'"}', 422,
     "invalid_memory"),
    ("PATCH", f"/memories/{ZERO}", b'{"content": "a\\u0000b"}', 400, "unstorable_value"),
    ("DELETE", f"/memories/{ZERO}", None, 404, "memory_not_found"),
    ("DELETE", "/memories", None, 400, "invalid_query"),
    ("DELETE", "/memories?subject=" + "x" * 201, None, 422, "invalid_memory"),
]


#: What a web page can make a browser send to a keyless `toren dev` on loopback (cross-site
#: request forgery, DNS rebinding): (method, path, body, headers, status, error code). The
#: port of the server is filled in for {port}.
JSON = {"Content-Type": "application/json"}
FROM_PAGES = [
    # a form or text/plain needs no CORS preflight: any page can send one to any address
    ("POST", "/runs", b'{"agent": "crew", "input": "x"}', {"Content-Type": "text/plain"},
     415, "unsupported_media_type"),
    ("POST", "/runs", b"agent=crew&input=x",
     {"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"),
    ("POST", "/sessions", b'{"agent": "crew"}', {"Content-Type": "multipart/form-data; b=x"},
     415, "unsupported_media_type"),
    # the request: text/plain, a foreign Origin and Host
    ("POST", "/runs", b'{"agent": "crew", "input": "x"}',
     {"Content-Type": "text/plain", "Origin": "https://attacker.example",
      "Host": "attacker.example"}, 403, "host_not_allowed"),
    ("POST", "/runs", b'{"agent": "crew", "input": "x"}',
     JSON | {"Origin": "https://attacker.example"}, 403, "cross_site_request"),
    ("POST", "/runs", b'{"agent": "crew", "input": "x"}', JSON | {"Origin": "null"}, 403,
     "cross_site_request"),
    ("POST", "/runs", b'{"agent": "crew", "input": "x"}',
     JSON | {"Origin": "http://127.0.0.1:1"}, 403, "cross_site_request"),
    ("POST", "/runs", b'{"agent": "crew", "input": "x"}',
     JSON | {"Sec-Fetch-Site": "cross-site"}, 403, "cross_site_request"),
    ("POST", "/runs", b'{"agent": "crew", "input": "x"}',
     JSON | {"Sec-Fetch-Site": "same-site"}, 403, "cross_site_request"),
    ("POST", "/sessions", b'{"agent": "crew"}', JSON | {"Origin": "https://attacker.example"},
     403, "cross_site_request"),
    # DNS rebinding: attacker.example now resolves to 127.0.0.1, so the page may read answers
    ("GET", "/runs", None, {"Host": "attacker.example"}, 403, "host_not_allowed"),
    ("GET", "/runs", None, {"Host": "attacker.example:{port}"}, 403, "host_not_allowed"),
    ("GET", "/agents", None, {"Host": "localhost.attacker.example:{port}"}, 403,
     "host_not_allowed"),
    ("GET", f"/runs/{ZERO}/events", None,
     {"Host": "attacker.example", "Accept": "text/event-stream"}, 403, "host_not_allowed"),
    ("GET", "/runs", None, {"Host": "127.0.0.1:{port}:1"}, 403, "host_not_allowed"),
]


@pytest.fixture
def url(database_url: str, start_toren, tmp_path: Path) -> str:
    write_agent_dir(tmp_path / "crews", "crew", tools_py=TOOLS)
    dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url})
    return str(dev.next_json()["url"])


def test_hostile_requests_get_clear_errors_and_the_server_keeps_serving(url: str) -> None:
    session = call(f"{url}/sessions", "POST", {"agent": "crew"})[1]["id"]
    messages = f"/sessions/{session}/messages"
    cases = [
        *CASES,
        ("POST", messages, b'{"text": "a\\u0000b"}', 400, "unstorable_value"),
        ("POST", messages, b'{"text": ["hi"]}', 400, "invalid_body"),
        ("POST", messages, b'{"text": "' + b"x" * 200_001 + b'"}', 400, "invalid_body"),
        ("POST", f"/runs/{session}/cancel", b'{"reason": ' + b"[" * 900 + b"]" * 900 + b"}",
         400, "unstorable_value"),
    ]
    port = url.rsplit(":", 1)[1]
    cases = [(method, path, raw, JSON, status, code)
             for method, path, raw, status, code in cases]
    cases += [(method, path, raw, {name: value.replace("{port}", port)
                                   for name, value in headers.items()}, status, code)
              for method, path, raw, headers, status, code in FROM_PAGES]
    cases.append(("POST", f"/runs/{session}/cancel", b"{}", {"Content-Type": "text/plain"}, 415,
                  "unsupported_media_type"))
    for method, path, raw, headers, status, code in cases:
        got, body, _ = call(url + path.replace(" ", "%20"), method,
                            raw=raw if raw is not None else None, headers=headers)
        assert (got, body["error"]["code"]) == (status, code), (path, raw and raw[:80], body,
                                                                headers)
        conforms("Error", body)
        assert len(body["error"]["message"]) > 10
    # nothing was half-written: no run, and the session took no message
    assert call(f"{url}/runs")[1]["runs"][0]["id"] == session
    assert call(f"{url}/sessions/{session}")[1]["transcript"] == []
    assert call(f"{url}/runs/{session}")[1]["status"] == "awaiting_input"  # not cancelled
    # a load balancer, or a rebound page, learns the status and nothing of the infrastructure
    status, health, _ = call(f"{url}/healthz", headers={"Host": "attacker.example"})
    assert (status, health) == (200, {"status": "ok", "version_skew": False})
    # and the server still serves: the CLI and clients, a page it serves itself, its names
    run = call(f"{url}/runs", "POST", {"agent": "crew", "input": "postgres"})[1]["id"]
    for headers in ({"Origin": url, "Sec-Fetch-Site": "same-origin"},
                    {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"},
                    {"Host": f"[::1]:{port}", "Sec-Fetch-Site": "none"}, {"Host": "localhost"}):
        status, listed, _ = call(f"{url}/runs", headers=headers)
        assert status == 200 and listed["runs"][0]["id"] == run, headers
    assert "workers" in call(f"{url}/healthz")[1]
    assert wait_until(lambda: call(f"{url}/runs/{run}")[1]["status"] == "completed", 60)
    assert json.dumps(call(f"{url}/runs/{run}")[1]["output"]).count("facts about postgres")
