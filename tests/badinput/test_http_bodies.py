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
    ]
    for method, path, raw, status, code in cases:
        got, body, _ = call(url + path.replace(" ", "%20"), method,
                            raw=raw if raw is not None else None)
        assert (got, body["error"]["code"]) == (status, code), (path, raw and raw[:80], body)
        conforms("Error", body)
        assert len(body["error"]["message"]) > 10
    # nothing was half-written: no run, and the session took no message
    assert call(f"{url}/runs")[1]["runs"][0]["id"] == session
    assert call(f"{url}/sessions/{session}")[1]["transcript"] == []
    # and the server still serves
    run = call(f"{url}/runs", "POST", {"agent": "crew", "input": "postgres"})[1]["id"]
    assert wait_until(lambda: call(f"{url}/runs/{run}")[1]["status"] == "completed", 60)
    assert json.dumps(call(f"{url}/runs/{run}")[1]["output"]).count("facts about postgres")
