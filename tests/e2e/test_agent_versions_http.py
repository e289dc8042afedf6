"""Agent versions over HTTP and the Python client, against a real `toren dev`: the versions of
an agent, upgrading a run, and hostile requests (unknown, malformed, oversized, unauthenticated,
a finished run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TorenCli, wait_until
from tests.e2e.test_http_api import TOOLS, call, conforms, finished
from toren.client import SyncTorenClient, TorenAPIError
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def api(database_url: str, start_toren, toren_cli: TorenCli, tmp_path: Path) -> dict[str, str]:
    """``toren dev`` serving ``crew`` (version 1.0) with API keys required; ``url`` and the
    ``key``."""
    created = toren_cli("keys", "create", "versions", "--json",
                        env={"DATABASE_URL": database_url})
    assert created.returncode == 0, created.stderr
    write_agent_dir(tmp_path / "crews", "crew", tools_py=TOOLS, version="1.0")
    dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.2",
                           "TOREN_REQUIRE_KEYS": "1"})
    return {"url": str(dev.next_json()["url"]), "key": json.loads(created.stdout)["key"]}


def test_versions_and_upgrade_over_http(api: dict[str, str]) -> None:
    url, auth = api["url"], {"Authorization": f"Bearer {api['key']}"}
    status, created, _ = call(f"{url}/runs", "POST", {"agent": "crew", "input": "postgres"},
                              auth)
    assert status == 201, created
    run_id = created["id"]
    assert wait_until(lambda: finished(url, run_id, auth), 60)

    status, listed, _ = call(f"{url}/agents/crew/versions", headers=auth)
    assert status == 200, listed
    conforms("AgentVersionList", listed)
    [version] = listed["versions"]
    assert (version["human_version"], version["runs"], version["active_runs"]) == ("1.0", 1, 0)
    assert version["current"] and listed["current"] == version["hash"]
    assert set(version["files"]) == {"agent.yaml", "prompt.md", "tools.py"}

    status, run, _ = call(f"{url}/runs/{run_id}", headers=auth)
    conforms("RunDetail", run)
    assert (run["agent_version"], run["agent_human_version"]) == (version["hash"], "1.0")
    status, agent, _ = call(f"{url}/agents/crew", headers=auth)
    assert (agent["version"], agent["humanVersion"], agent["onChange"]) == (
        version["hash"], "1.0", "continue")

    # a finished run cannot move
    status, body, _ = call(f"{url}/runs/{run_id}/upgrade", "POST", {}, auth)
    assert (status, body["error"]["code"]) == (409, "run_not_upgradable"), body
    assert "has ended" in body["error"]["message"]

    client = SyncTorenClient(url, api_key=api["key"])
    versions = client.agent_versions("crew")
    assert versions["versions"][0]["hash"] == version["hash"]
    # a session waits for input: it has not ended, so it can be upgraded (a no-op here)
    session = client.create_session("crew")["id"]
    moved = client.upgrade_run(session)
    assert (moved["upgraded"], moved["version"]) == (False, version["hash"])
    conforms("RunUpgrade", dict(moved))
    with pytest.raises(TorenAPIError) as refused:
        client.upgrade_run(run_id)
    assert refused.value.status == 409


def test_hostile_requests_to_the_version_routes(api: dict[str, str]) -> None:
    url, auth = api["url"], {"Authorization": f"Bearer {api['key']}"}
    session = call(f"{url}/sessions", "POST", {"agent": "crew"}, auth)[1]["id"]
    # no key, a wrong key
    for headers in ({}, {"Authorization": "Bearer nope"}):
        assert call(f"{url}/agents/crew/versions", headers=headers)[0] == 401
        assert call(f"{url}/runs/{session}/upgrade", "POST", {}, headers)[0] == 401
    # unknown agents and runs, and names that are no name at all
    for name in ("nobody", "%2e%2e", "x" * 5000):
        status, body, _ = call(f"{url}/agents/{name}/versions", headers=auth)
        assert status in (404, 414), body
    for run_id in ("00000000-0000-4000-8000-000000000000", "not-a-uuid", "%00"):
        status, body, _ = call(f"{url}/runs/{run_id}/upgrade", "POST", {}, auth)
        assert (status, body["error"]["code"]) == (404, "run_not_found"), body
    # bodies: not JSON, not an object, unknown fields, oversized
    status, body, _ = call(f"{url}/runs/{session}/upgrade", "POST", raw=b"{", headers=auth)
    assert status == 400, body
    status, body, _ = call(f"{url}/runs/{session}/upgrade", "POST", [1, 2], auth)
    assert status == 400, body
    status, body, _ = call(f"{url}/runs/{session}/upgrade", "POST", {"version": "abc"}, auth)
    assert (status, body["error"]["code"]) == (400, "invalid_body"), body
    status, body, _ = call(f"{url}/runs/{session}/upgrade", "POST",
                           raw=b'{"a": "' + b"x" * (2 * 1024 * 1024) + b'"}', headers=auth)
    assert status == 413, body
    status, body, _ = call(f"{url}/runs/{session}/upgrade", "POST", raw=b"{}",
                           headers=auth | {"Content-Type": "text/plain"})
    assert status == 415, body
    # none of that changed the session's version
    status, run, _ = call(f"{url}/runs/{session}", headers=auth)
    assert run["agent_version"] == call(f"{url}/agents/crew/versions",
                                        headers=auth)[1]["current"]
