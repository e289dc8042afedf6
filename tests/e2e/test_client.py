"""toren.client against a real `toren dev` process: async and sync, SSE, errors."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.e2e.test_http_api import TOOLS, conforms
from toren.client import SyncTorenClient, TorenAPIError, TorenClient
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def url(database_url: str, start_toren, tmp_path: Path) -> str:
    write_agent_dir(tmp_path / "crews", "crew", tools_py=TOOLS)
    dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.1"})
    return str(dev.next_json()["url"])


async def test_async_client_runs_streams_and_cancels(url: str) -> None:
    async with aiohttp.ClientSession() as session, TorenClient(url, session=session) as client:
        health = await client.healthz()
        conforms("Health", health)
        assert [a["name"] for a in await client.agents()] == ["crew"]
        created = await client.create_run("crew", "postgres", idempotency_key="k-1")
        again = await client.create_run("crew", "postgres", idempotency_key="k-1")
        assert created["id"] == again["id"]
        streamed = [event async for event in client.stream_events(created["id"])]
        for event in streamed:
            conforms("Event", event)
        assert streamed[0]["type"] == "RunCreated" and streamed[-1]["stream"] == "run"
        run = await client.wait_for_run(created["id"], timeout_s=30)
        conforms("RunDetail", run)
        assert run["status"] == "completed" and "facts about postgres" in run["output"]
        listed = await client.list_runs(agent="crew")
        assert [r["id"] for r in listed["runs"]] == [created["id"]]
        events = await client.events(created["id"])
        assert len(events["events"]) == len(streamed)
        with pytest.raises(TorenAPIError) as missing:
            await client.get_run("00000000-0000-0000-0000-000000000000")
        assert (missing.value.status, missing.value.code) == (404, "run_not_found")
        with pytest.raises(TorenAPIError) as unknown:
            await client.create_run("ghost", "x")
        assert unknown.value.code == "agent_not_found" and not unknown.value.retryable


def test_sync_client_mirrors_the_async_one(url: str) -> None:
    client = SyncTorenClient(url)
    created = client.create_run("crew", "sync")
    cancelled = client.cancel_run(created["id"], "not needed")
    assert cancelled["status"] == "cancelled"
    assert client.get_run(created["id"])["stop_reason"] == "cancelled"
    assert client.healthz()["status"] == "ok"
