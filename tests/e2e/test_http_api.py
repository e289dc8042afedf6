"""The HTTP API over real HTTP against a real `toren dev` process; every response is checked
against schemas/openapi.json."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import psycopg
import pytest
import referencing
import referencing.jsonschema

from tests.conftest import wait_until
from toren.schemas import load_schema
from toren.server.cursors import encode_event_cursor, encode_page_cursor
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(180)
OPENAPI = load_schema("openapi.json")
TOOLS = '''
from toren import tool

@tool(idempotent=True)
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"
'''


def conforms(name: str, body: Any) -> None:
    """``body`` matches components.schemas[name] of the OpenAPI document."""
    resource = referencing.Resource.from_contents(OPENAPI, referencing.jsonschema.DRAFT202012)
    registry = referencing.Registry().with_resource("urn:openapi", resource)
    schema = {"$ref": f"urn:openapi#/components/schemas/{name}"}
    jsonschema.Draft202012Validator(schema, registry=registry).validate(body)


def call(url: str, method: str = "GET", body: Any = None, headers: dict[str, str] | None = None,
         raw: bytes | None = None, timeout_s: float = 30) -> tuple[int, Any, dict[str, str]]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, json.loads(response.read() or b"null"), dict(response.headers)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read() or b"null"), dict(exc.headers)


def start_server(start_toren, database_url: str, tmp_path: Path, **env: str) -> dict[str, str]:
    """``toren dev`` serving the agents ``crew`` and ``slow`` (scripted) on a free port."""
    write_agent_dir(tmp_path / "crews", "crew", tools_py=TOOLS)
    write_agent_dir(tmp_path / "crews", "slow", tools_py=TOOLS)
    dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.2", **env})
    ready = dev.next_json()
    return {"url": ready["url"], "database_url": database_url}


@pytest.fixture
def server(database_url: str, start_toren, tmp_path: Path) -> dict[str, str]:
    # database_url first: fixtures tear down in reverse, so the server stops before the
    # database is dropped
    return start_server(start_toren, database_url, tmp_path)


def finished(url: str, run_id: str, headers: dict[str, str] | None = None) -> bool:
    return call(f"{url}/runs/{run_id}", headers=headers)[1]["status"] in (
        "completed", "failed", "stopped", "cancelled")


def test_runs_lifecycle_over_http(server: dict[str, str]) -> None:
    url = server["url"]
    status, created, _ = call(f"{url}/runs", "POST", {"agent": "crew", "input": "postgres"})
    assert status == 201
    conforms("Created", created)
    run_id = created["id"]
    assert wait_until(lambda: finished(url, run_id), 60)
    status, run, _ = call(f"{url}/runs/{run_id}")
    assert status == 200
    conforms("RunDetail", run)
    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    assert "facts about postgres" in run["output"]
    assert run["totals"]["model_calls"] == 2 and run["totals"]["input_tokens"] > 0
    status, events, _ = call(f"{url}/runs/{run_id}/events")
    conforms("EventList", events)
    assert events["events"][0]["type"] == "RunCreated"
    assert [e["type"] for e in events["events"]].count("ModelCallCompleted") == 2
    # ?after= a cursor returns only what came after it
    middle = events["events"][3]["cursor"]
    _, rest, _ = call(f"{url}/runs/{run_id}/events?after={middle}")
    seen = {(e["stream"], e["seq"]) for e in events["events"][:4]}
    assert {(e["stream"], e["seq"]) for e in rest["events"]}.isdisjoint(seen)
    assert len(rest["events"]) == len(events["events"]) - 4


def test_idempotency_key_gives_the_same_run(server: dict[str, str]) -> None:
    url = server["url"]
    headers = {"Idempotency-Key": "order-7"}
    first = call(f"{url}/runs", "POST", {"agent": "crew", "input": "x"}, headers)[1]
    second = call(f"{url}/runs", "POST", {"agent": "crew", "input": "x"}, headers)[1]
    other = call(f"{url}/runs", "POST", {"agent": "crew", "input": "x"})[1]
    assert first["id"] == second["id"] != other["id"]


def test_list_runs_filters_and_paginates(server: dict[str, str]) -> None:
    url = server["url"]
    ids = {call(f"{url}/runs", "POST", {"agent": "crew", "input": str(i)})[1]["id"]
           for i in range(5)}
    collected: list[str] = []
    cursor = None
    while True:
        query = "agent=crew&limit=2" + (f"&cursor={cursor}" if cursor else "")
        status, page, _ = call(f"{url}/runs?{query}")
        assert status == 200
        conforms("RunList", page)
        collected += [run["id"] for run in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert set(collected) == ids and len(collected) == 5
    assert call(f"{url}/runs?status=bogus")[0] == 400
    assert call(f"{url}/runs?limit=0")[0] == 400
    assert call(f"{url}/runs?cursor=%%%")[0] == 400
    assert call(f"{url}/runs?agent=nobody")[0] == 404


def test_bad_requests_get_clear_json_errors(server: dict[str, str]) -> None:
    url = server["url"]
    cases = [
        (call(f"{url}/runs", "POST", raw=b"{not json"), 400, "invalid_json"),
        (call(f"{url}/runs", "POST", [1, 2]), 400, "invalid_body"),
        (call(f"{url}/runs", "POST", {"input": "x"}), 400, "invalid_body"),
        (call(f"{url}/runs", "POST", {"agent": "crew"}), 400, "invalid_body"),
        (call(f"{url}/runs", "POST", {"agent": "crew", "input": 1, "x": 2}), 400,
         "invalid_body"),
        (call(f"{url}/runs", "POST", {"agent": "ghost", "input": "x"}), 404, "agent_not_found"),
        (call(f"{url}/runs/not-a-uuid"), 404, "run_not_found"),
        (call(f"{url}/runs/00000000-0000-0000-0000-000000000000/events"), 404, "run_not_found"),
        (call(f"{url}/runs", "POST", raw=b'{"agent": "crew", "input": "' + b"x" * 2_000_000
              + b'"}'), 413, None),
    ]
    for (status, body, _headers), expected_status, code in cases:
        assert status == expected_status, body
        conforms("Error", body)
        if code:
            assert body["error"]["code"] == code


def test_values_the_run_log_cannot_take_get_a_4xx_not_a_500(server: dict[str, str]) -> None:
    # each was a 500 until tests/e2e/test_openapi_fuzz.py found it (or one like it)
    url = server["url"]
    run_id = call(f"{url}/runs", "POST", {"agent": "crew", "input": "x"})[1]["id"]
    session_id = call(f"{url}/sessions", "POST", {"agent": "crew"})[1]["id"]
    create = f"{url}/runs"
    cases = [
        (call(create, "POST", raw=b'\x80{"agent": "crew"}'), 400, "invalid_json"),  # not UTF-8
        (call(create, "POST", raw=b'{"agent": "crew", "input": NaN}'), 400, "invalid_json"),
        (call(create, "POST", raw=b"[" * 100_000), 400, "invalid_json"),
        (call(create, "POST", {"agent": "crew", "input": {"a": "\u0000"}}), 400,
         "unstorable_value"),
        (call(create, "POST", {"agent": "crew", "input": 2**64}), 400, "unstorable_value"),
        (call(create, "POST", raw=b'{"agent": "crew", "input": "\\ud800"}'), 400,
         "unstorable_value"),
        (call(create, "POST", raw=b'{"agent": "crew", "input": 1e999}'), 400, "unstorable_value"),
        (call(f"{url}/runs/{run_id}/cancel", "POST", {"reason": 7}), 400, "invalid_body"),
        (call(f"{url}/runs/{run_id}/cancel", "POST", {"reason": "\u0000"}), 400,
         "unstorable_value"),
        (call(f"{url}/sessions/{session_id}/messages", "POST", {"text": "hi \u0000"}), 400,
         "unstorable_value"),
        (call(f"{url}/runs/%00"), 404, "run_not_found"),
        (call(f"{url}/runs?cursor={encode_page_cursor(datetime.now(UTC), 'x')}"), 400,
         "invalid_cursor"),
        (call(f"{url}/runs/{run_id}/events?after={encode_event_cursor({'run': 2**40})}"), 400,
         "invalid_cursor"),
    ]
    for (status, body, _headers), expected_status, code in cases:
        assert (status, body["error"]["code"]) == (expected_status, code), body
        conforms("Error", body)
    # an Idempotency-Key that is not UTF-8 is read as ISO-8859-1
    latin1 = [call(create, "POST", {"agent": "crew", "input": "x"}, {"Idempotency-Key": "caf\xe9"})
              for _ in range(2)]
    assert [status for status, _, _ in latin1] == [201, 201]
    assert latin1[0][1]["id"] == latin1[1][1]["id"]
    assert call(f"{url}/runs/{latin1[0][1]['id']}")[1]["idempotency_key"] == "caf\xe9"
    status, body, headers = call(f"{url}/runs", "PUT")
    assert status == 405 and headers["Allow"] == "GET,HEAD,POST"
    conforms("Error", body)


def test_cancel_over_http(server: dict[str, str]) -> None:
    url = server["url"]
    run_id = call(f"{url}/runs", "POST", {"agent": "slow", "input": "x"})[1]["id"]
    status, run, _ = call(f"{url}/runs/{run_id}/cancel", "POST", {"reason": "changed my mind"})
    assert status == 200
    conforms("Run", run)
    assert run["status"] == "cancelled"
    _, events, _ = call(f"{url}/runs/{run_id}/events")
    cancelled = [e for e in events["events"] if e["type"] == "RunCancelled"]
    assert cancelled[0]["data"]["reason"] == "changed my mind"


def read_sse(url: str, last_event_id: str | None = None, stop_after: int | None = None
             ) -> list[dict[str, str]]:
    """Read SSE frames (id, event, data) until the stream ends or ``stop_after`` events."""
    headers = {"Accept": "text/event-stream"}
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    frames: list[dict[str, str]] = []
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        frame: dict[str, str] = {}
        for raw in response:
            line = raw.decode().rstrip("\n")
            if not line:
                if frame:
                    frames.append(frame)
                    frame = {}
                    if stop_after is not None and len(frames) >= stop_after:
                        return frames  # disconnect mid-run
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(": ")
            frame[field] = value
    return frames


def test_sse_reconnect_with_last_event_id_gets_every_event_exactly_once(
        server: dict[str, str]) -> None:
    url = server["url"]
    run_id = call(f"{url}/runs", "POST", {"agent": "slow", "input": "x"})[1]["id"]
    first = read_sse(f"{url}/runs/{run_id}/events", stop_after=3)
    assert len(first) == 3 and all("id" in f for f in first)  # no model text yet
    rest = read_sse(f"{url}/runs/{run_id}/events", last_event_id=first[-1]["id"])
    assert rest[-1]["event"] == "end"
    # pieces of model text come in between: no id (never replayed), not events
    pieces = [f for f in rest if f["event"] == "text_delta"]
    assert pieces and all("id" not in f for f in pieces)
    for piece in pieces:
        conforms("TextDelta", json.loads(piece["data"]))
    streamed = [json.loads(f["data"]) for f in first + rest[:-1] if f["event"] != "text_delta"]
    for event in streamed:
        conforms("Event", event)
    keys = [(e["stream"], e["seq"]) for e in streamed]
    assert len(keys) == len(set(keys))  # nothing twice
    _, listed, _ = call(f"{url}/runs/{run_id}/events")
    assert sorted(keys) == sorted((e["stream"], e["seq"]) for e in listed["events"])  # nothing lost
    assert json.loads(rest[-1]["data"])["status"] == "completed"


def test_healthz_lists_workers_and_shows_version_skew(server: dict[str, str]) -> None:
    url = server["url"]
    status, health, _ = call(f"{url}/healthz")
    assert status == 200
    conforms("Health", health)
    assert len(health["workers"]) == 1 and health["version_skew"] is False
    assert sorted(health["workers"][0]["agents"]) == ["crew", "slow"]
    with psycopg.connect(server["database_url"], autocommit=True) as conn:
        conn.execute("INSERT INTO toren_control.workers (id, version, agents) "
                     "VALUES ('old-worker', '0.0.9', '{crew}')")
    _, health, _ = call(f"{url}/healthz")
    assert health["version_skew"] is True and health["versions"] == ["0.0.9", "0.1.0"]
    with psycopg.connect(server["database_url"], autocommit=True) as conn:
        conn.execute("UPDATE toren_control.workers SET heartbeat_at = now() - interval '1 hour' "
                     "WHERE id = 'old-worker'")
    _, health, _ = call(f"{url}/healthz")
    assert health["version_skew"] is False  # clears by itself when the old worker goes


def test_the_root_points_to_the_api_document(server: dict[str, str]) -> None:
    status, index, _ = call(f"{server['url']}/")
    assert status == 200 and index["api"] == "/openapi.json" and index["health"] == "/healthz"
    status, document, _ = call(f"{server['url']}{index['api']}")
    assert status == 200 and document == OPENAPI


def test_openapi_document_is_served_and_valid(server: dict[str, str]) -> None:
    status, document, _ = call(f"{server['url']}/openapi.json")
    assert status == 200 and document == OPENAPI
    for name in OPENAPI["components"]["schemas"]:
        jsonschema.Draft202012Validator.check_schema(OPENAPI["components"]["schemas"][name])
