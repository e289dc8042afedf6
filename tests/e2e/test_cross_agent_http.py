"""Cross-agent calls and background runs over HTTP and through toren.client, against a real
``toren dev`` serving a caller, a peer and a chatty session agent: child runs, the session's
background runs and its notice, and hostile requests to the new route."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.test_http_api import call, conforms
from toren.client import InvalidId, SyncTorenClient, TorenAPIError
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def url(database_url: str, start_toren, tmp_path: Path) -> str:
    crews = tmp_path / "crews"
    write_agent_dir(crews, "desk", peers=["writer"])
    write_agent_dir(crews, "chat", background=["writer"])
    write_agent_dir(crews, "writer", acceptsFrom=["desk", "chat"])
    dev = start_toren("dev", "--dir", str(crews), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url})
    return str(dev.next_json()["url"])


def test_child_runs_and_background_runs_over_http_and_the_client(url: str) -> None:
    client = SyncTorenClient(url)
    created = client.create_run("desk", "tides")
    run = client.wait_for_run(created["id"], timeout_s=60)
    conforms("RunDetail", run)
    assert run["status"] == "completed" and run["parent"] is None and run["depth"] == 0
    assert run["totals"]["peer_cost_usd"] == 0
    (child,) = client.children(created["id"])
    conforms("Run", child)
    assert child["agent"] == "writer" and child["depth"] == 1
    assert child["parent"] == {"agent": "desk", "run_id": created["id"], "task_id": "main",
                               "kind": "peer"}
    status, body, _headers = call(f"{url}/runs/{created['id']}/children")
    assert status == 200
    conforms("ChildRunList", body)
    assert client.children(child["id"]) == []

    session = client.create_session("chat")
    client.send_message(session["id"], "tides")
    deadline = time.monotonic() + 60
    while True:
        state = client.get_session(session["id"])
        if state["background_runs"] and state["background_runs"][0]["reported"]:
            break
        assert time.monotonic() < deadline, state
        time.sleep(0.2)
    conforms("Session", state)
    notice = next(e for e in state["transcript"] if e["role"] == "background")
    assert notice["agent"] == "writer" and notice["status"] == "completed"
    assert state["background_runs"][0]["status"] == "completed"


def test_children_of_what_is_no_run_is_a_404(url: str) -> None:
    client = SyncTorenClient(url)
    with pytest.raises(TorenAPIError) as missing:
        client.children("00000000-0000-0000-0000-000000000000")
    assert (missing.value.status, missing.value.code) == (404, "run_not_found")
    # what is no run id at all the client refuses before sending (tests/badinput/test_client_ids)
    for run_id in ("not-a-uuid", "%00", "%27%20OR%201%3D1%20--", "a" * 3000):
        with pytest.raises(InvalidId):
            client.children(run_id)
        status, body, _ = call(f"{url}/runs/{run_id}/children")
        assert (status, body["error"]["code"]) == (404, "run_not_found"), run_id
