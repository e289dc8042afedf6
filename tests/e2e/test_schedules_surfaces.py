"""Schedules over the CLI, the HTTP API and the client, against a real `toren dev`: list, show,
pause, resume, trigger, runs filtered by schedule, and hostile inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TorenCli, wait_until
from tests.e2e.test_http_api import TOOLS, call, conforms, finished
from toren.client import InvalidId, SyncTorenClient, TorenAPIError, TorenClient
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(180)
#: Fires on 1 January only: never during a test, so every fire here is a trigger.
YEARLY = {"name": "yearly", "cron": "0 0 1 1 *", "timezone": "Europe/Paris",
          "input": "the year in review"}


@pytest.fixture
def crews(tmp_path: Path) -> Path:
    write_agent_dir(tmp_path / "crews", "crew", tools_py=TOOLS, schedules=[YEARLY])
    write_agent_dir(tmp_path / "crews", "plain", tools_py=TOOLS)
    return tmp_path / "crews"


@pytest.fixture
def url(database_url: str, start_toren, crews: Path) -> str:
    dev = start_toren("dev", "--dir", str(crews), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url})
    return str(dev.next_json()["url"])


def test_schedules_over_http(url: str) -> None:
    status, listed, _ = call(f"{url}/schedules")
    assert status == 200, listed
    conforms("ScheduleList", listed)
    [yearly] = listed["schedules"]
    assert (yearly["agent"], yearly["name"], yearly["state"]) == ("crew", "yearly", "active")
    assert yearly["next_fire_at"].endswith("+00:00")  # 1 January, 00:00 in Paris, in UTC

    status, paused, _ = call(f"{url}/schedules/crew/yearly/pause", "POST")
    assert (status, paused["state"], paused["next_fire_at"]) == (200, "paused", None)
    conforms("Schedule", paused)
    status, fired, _ = call(f"{url}/schedules/crew/yearly/trigger", "POST", {})
    assert status == 201, fired
    conforms("ScheduleTriggered", fired)
    assert wait_until(lambda: finished(url, fired["run_id"]), 60)
    status, run, _ = call(f"{url}/runs/{fired['run_id']}")
    assert (run["status"], run["schedule"], run["input"]) == (
        "completed", "yearly", "the year in review")
    status, runs, _ = call(f"{url}/runs?schedule=yearly")
    assert [r["id"] for r in runs["runs"]] == [fired["run_id"]]
    assert call(f"{url}/runs?schedule=other")[1]["runs"] == []
    status, shown, _ = call(f"{url}/schedules/crew/yearly")
    conforms("Schedule", shown)
    assert shown["fires"][0]["run_id"] == fired["run_id"] and shown["state"] == "paused"
    status, resumed, _ = call(f"{url}/schedules/crew/yearly/resume", "POST")
    assert (status, resumed["state"]) == (200, "active")


HOSTILE = [
    ("GET", "/schedules?agent=ghost", None, 404, "agent_not_found"),
    ("GET", "/schedules/ghost/yearly", None, 404, "agent_not_found"),
    ("GET", "/schedules/crew/missing", None, 404, "schedule_not_found"),
    ("GET", "/schedules/crew/NOT%20A%20NAME", None, 404, "schedule_not_found"),
    ("GET", "/schedules/crew/" + "a" * 5000, None, 404, "schedule_not_found"),
    ("GET", "/schedules/plain/yearly", None, 404, "schedule_not_found"),
    ("POST", "/schedules/crew/missing/trigger", None, 404, "schedule_not_found"),
    ("POST", "/schedules/crew/missing/pause", None, 404, "schedule_not_found"),
    ("POST", "/schedules/crew/yearly/trigger", b"[1, 2]", 400, "invalid_body"),
    ("POST", "/schedules/crew/yearly/pause", b"{not json", 400, "invalid_json"),
    ("GET", "/runs?schedule=%00", None, 400, "invalid_schedule"),
    ("GET", "/runs?schedule=Yearly!", None, 400, "invalid_schedule"),
]


def test_hostile_schedule_requests_get_clear_errors_and_start_nothing(url: str) -> None:
    for method, path, body, status, code in HOSTILE:
        got, answer, _ = call(f"{url}{path}", method, raw=body)
        assert (got, answer["error"]["code"]) == (status, code), (path, answer)
        conforms("Error", answer)
    got, answer, _ = call(f"{url}/schedules/crew/yearly/trigger", "POST", raw=b"a=1",
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert (got, answer["error"]["code"]) == (415, "unsupported_media_type")
    assert call(f"{url}/runs?schedule=yearly")[1]["runs"] == []


async def test_the_async_client(url: str) -> None:
    async with TorenClient(url) as client:
        [listed] = await client.list_schedules(agent="crew")
        assert listed["name"] == "yearly"
        fired = await client.trigger_schedule("crew", "yearly")
        assert fired["trigger"] == "manual"
        assert (await client.pause_schedule("crew", "yearly"))["state"] == "paused"
        assert (await client.resume_schedule("crew", "yearly"))["state"] == "active"
        shown = await client.get_schedule("crew", "yearly")
        assert shown["fires"][0]["run_id"] == fired["run_id"]
        runs = await client.list_runs(schedule="yearly")
        assert [r["id"] for r in runs["runs"]] == [fired["run_id"]]
        with pytest.raises(TorenAPIError) as missing:
            await client.get_schedule("crew", "no-such")
        assert missing.value.status == 404
        with pytest.raises(InvalidId):  # no schedule's name: refused before anything is sent
            await client.get_schedule("crew", "no/such")


def test_the_sync_client_mirrors_it(url: str) -> None:
    sync = SyncTorenClient(url)
    assert sync.get_schedule("crew", "yearly")["state"] == "active"
    assert sync.pause_schedule("crew", "yearly")["state"] == "paused"
    assert sync.list_schedules()[0]["state"] == "paused"
    assert sync.resume_schedule("crew", "yearly")["state"] == "active"
    fired = sync.trigger_schedule("crew", "yearly")
    assert [r["id"] for r in sync.list_runs(schedule="yearly")["runs"]] == [fired["run_id"]]


def test_schedules_cli(toren_cli: TorenCli, database_url: str, crews: Path) -> None:
    env = {"DATABASE_URL": database_url}
    empty = toren_cli("schedules", "list", env=env)
    assert empty.returncode == 0 and "No schedules" in empty.stdout
    # trigger writes the directory's schedules first: no worker has to have run
    fired = toren_cli("schedules", "trigger", "crew", "yearly", "--dir", str(crews), "--json",
                      env=env)
    assert fired.returncode == 0, fired.stderr
    run_id = json.loads(fired.stdout)["run_id"]
    listed = json.loads(toren_cli("schedules", "list", "--json", env=env).stdout)
    assert [(s["agent"], s["name"], s["state"]) for s in listed["schedules"]] == [
        ("crew", "yearly", "active")]
    table = toren_cli("schedules", "list", env=env).stdout
    assert "yearly" in table and "0 0 1 1 *" in table and "Europe/Paris" in table
    paused = json.loads(toren_cli("schedules", "pause", "crew", "yearly", "--json",
                                  env=env).stdout)
    assert paused["state"] == "paused"
    shown = toren_cli("schedules", "show", "crew", "yearly", env=env)
    assert "paused" in shown.stdout and run_id in shown.stdout
    assert json.loads(toren_cli("schedules", "resume", "crew", "yearly", "--json",
                                env=env).stdout)["state"] == "active"
    jobs = json.loads(toren_cli("jobs", "list", "--schedule", "yearly", "--json",
                                env=env).stdout)
    assert [(r["id"], r["schedule"]) for r in jobs["runs"]] == [(run_id, "yearly")]
    assert "yearly" in toren_cli("jobs", "list", env=env).stdout

    missing = toren_cli("schedules", "show", "crew", "nightly", env=env)
    assert missing.returncode == 1 and "no schedule 'nightly'" in missing.stderr
    as_json = toren_cli("schedules", "pause", "crew", "nightly", "--json", env=env)
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout or as_json.stderr)["error"]["code"] == "schedule_not_found"
    ghost = toren_cli("schedules", "trigger", "ghost", "yearly", "--dir", str(crews), env=env)
    assert ghost.returncode == 1 and "agent 'ghost' is not served here" in ghost.stderr
