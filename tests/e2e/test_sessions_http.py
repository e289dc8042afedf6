"""Sessions over real HTTP against real `toren dev` processes: turns, 409 turn-taking, close,
and a session that outlives a SIGKILLed server. Every response is checked against the
OpenAPI document."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.test_http_api import TOOLS, call, conforms
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(240)


def start_dev(start_toren, crews: Path, database_url: str, delay: str = "0.2"):
    dev = start_toren("dev", "--dir", str(crews), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": delay,
                           "TOREN_LEASE_TTL": "2"})
    return dev, dev.next_json()["url"]


def session_status(url: str, session_id: str) -> str:
    return call(f"{url}/sessions/{session_id}")[1]["status"]


def calls_started(url: str, session_id: str) -> int:
    events = call(f"{url}/runs/{session_id}/events")[1]["events"]
    return [e["type"] for e in events].count("ModelCallStarted")


def test_a_session_over_http_takes_turns_one_at_a_time(database_url: str, start_toren,
                                                       tmp_path: Path) -> None:
    crews = tmp_path / "crews"
    write_agent_dir(crews, "chat", tools_py=TOOLS)
    (write_agent_dir(crews, "flow") / "workflow.py").write_text(
        "async def workflow(ctx):\n    return 'done'\n")
    _dev, url = start_dev(start_toren, crews, database_url)

    status, created, _ = call(f"{url}/sessions", "POST", {"agent": "chat"})
    assert status == 201 and created["status"] == "awaiting_input"
    conforms("Created", created)
    session = created["id"]
    messages = f"{url}/sessions/{session}/messages"

    status, accepted, _ = call(messages, "POST", {"text": "postgres"})
    assert (status, accepted["turn"]) == (202, 1)
    conforms("TurnAccepted", accepted)
    # mid-turn: refused with 409 and nothing recorded
    status, busy, _ = call(messages, "POST", {"text": "are you there?"})
    assert status == 409 and busy["error"]["code"] == "session_busy"
    assert "awaiting_input" in busy["error"]["message"]
    conforms("Error", busy)
    assert wait_until(lambda: session_status(url, session) == "awaiting_input", 60)

    status, second, _ = call(messages, "POST", {"text": "and sqlite?"})
    assert (status, second["turn"]) == (202, 2)
    assert wait_until(lambda: session_status(url, session) == "awaiting_input", 60)
    status, body, _ = call(f"{url}/sessions/{session}")
    assert status == 200
    conforms("Session", body)
    users = [e["text"] for e in body["transcript"] if e["role"] == "user"]
    assert users == ["postgres", "and sqlite?"]  # the refused message is not there
    assert body["turns"] == body["turns_ended"] == 2
    assert "sqlite" in body["transcript"][-1]["text"]
    assert body["totals"]["input_tokens"] > 0

    # a session is a run: listed by kind, its events readable as a run's
    _, listed, _ = call(f"{url}/runs?kind=session")
    conforms("RunList", listed)
    assert [run["id"] for run in listed["runs"]] == [session]
    assert listed["runs"][0]["kind"] == "session"
    _, events, _ = call(f"{url}/runs/{session}/events")
    assert [e["type"] for e in events["events"]].count("TurnEnded") == 2

    status, closing, _ = call(messages, "POST", {"close": True})
    assert status == 202 and closing["closing"] is True
    conforms("TurnAccepted", closing)
    assert wait_until(lambda: session_status(url, session) == "completed", 60)
    status, ended, _ = call(messages, "POST", {"text": "hello?"})
    assert status == 409 and ended["error"]["code"] == "session_ended"

    run_id = call(f"{url}/runs", "POST", {"agent": "chat", "input": "x"})[1]["id"]
    cases = [
        (call(f"{url}/sessions", "POST", {}), 400, "invalid_body"),
        (call(f"{url}/sessions", "POST", {"agent": "chat", "input": 1}), 400, "invalid_body"),
        (call(f"{url}/sessions", "POST", {"agent": "ghost"}), 404, "agent_not_found"),
        (call(f"{url}/sessions", "POST", {"agent": "flow"}), 400, "config_error"),
        (call(f"{url}/sessions/not-a-uuid"), 404, "session_not_found"),
        (call(f"{url}/sessions/{run_id}"), 404, "session_not_found"),
        (call(f"{url}/sessions/{run_id}/messages", "POST", {"text": "x"}), 404,
         "session_not_found"),
        (call(messages, "POST", {"text": ""}), 400, "invalid_body"),
        (call(messages, "POST", {"text": 5}), 400, "invalid_body"),
        (call(messages, "POST", {"text": "x", "close": True}), 400, "invalid_body"),
        (call(messages, "POST", {"close": False}), 400, "invalid_body"),
        (call(messages, "POST", raw=b"[1]"), 400, "invalid_body"),
    ]
    for (status, body, _), expected_status, code in cases:
        assert (status, body["error"]["code"]) == (expected_status, code), body
        conforms("Error", body)


def test_a_session_survives_its_server_being_killed_mid_turn(database_url: str, start_toren,
                                                             tmp_path: Path) -> None:
    crews = tmp_path / "crews"
    write_agent_dir(crews, "chat", tools_py=TOOLS)
    first, url = start_dev(start_toren, crews, database_url, delay="0.2")
    session = call(f"{url}/sessions", "POST", {"agent": "chat"})[1]["id"]
    call(f"{url}/sessions/{session}/messages", "POST", {"text": "postgres"})
    assert wait_until(lambda: session_status(url, session) == "awaiting_input", 60)
    before = call(f"{url}/sessions/{session}")[1]

    # the next turn is slow: kill the server (and its workers) in the middle of it
    first.stop(signal.SIGKILL)
    slow, url = start_dev(start_toren, crews, database_url, delay="1.0")
    call(f"{url}/sessions/{session}/messages", "POST", {"text": "and sqlite?"})
    assert wait_until(lambda: calls_started(url, session) == 3, 20)  # turn 2's first call
    slow.stop(signal.SIGKILL)

    _third, url = start_dev(start_toren, crews, database_url, delay="0.05")
    status, resumed, _ = call(f"{url}/sessions/{session}")
    assert status == 200 and resumed["transcript"][:4] == before["transcript"]
    # the interrupted turn finishes on the new server, then the session takes another
    assert wait_until(lambda: session_status(url, session) == "awaiting_input", 60)
    assert call(f"{url}/sessions/{session}/messages", "POST", {"text": "thanks"})[0] == 202
    assert wait_until(lambda: session_status(url, session) == "awaiting_input", 60)
    final = call(f"{url}/sessions/{session}")[1]
    conforms("Session", final)
    assert [e["text"] for e in final["transcript"] if e["role"] == "user"] == [
        "postgres", "and sqlite?", "thanks"]
    assert final["turns_ended"] == 3
    # the call in flight at the kill was made again, and is marked so in the log
    events = call(f"{url}/runs/{session}/events")[1]["events"]
    assert any(e["type"] == "ModelCallCompleted" and e["data"]["repeated"] for e in events)
