"""Every operator command against a remote deployment: `toren jobs`, `toren approvals` and
`toren schedules` with TOREN_URL and TOREN_API_KEY against a real `toren serve` with keys print
what the same command prints on the database itself, and fail clearly on a bad key, an
unreachable URL and an unknown run."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TorenCli, wait_until
from tests.e2e.test_http_api import TOOLS, call, conforms
from toren.client import SyncTorenClient, TorenAPIError
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
DESK = Path(__file__).parents[2] / "contrib" / "examples" / "approval-desk"
YEARLY = {"name": "yearly", "cron": "0 0 1 1 *", "timezone": "Europe/Paris",
          "input": "the year in review"}
NOWHERE = "postgresql://nobody@127.0.0.1:1/none"


class Deployment:
    """`toren serve --workers` with API keys, and the two ways of running a command on it."""

    def __init__(self, toren_cli: TorenCli, database_url: str, url: str, key: str,
                 cwd: Path) -> None:
        self.toren_cli = toren_cli
        self.local_env = {"DATABASE_URL": database_url, "TOREN_URL": None,
                          "TOREN_API_KEY": None}
        # no database here: everything goes through the API
        self.remote_env = {"DATABASE_URL": NOWHERE, "TOREN_URL": url, "TOREN_API_KEY": key}
        self.url = url
        self.key = key
        self.cwd = cwd
        self.crews = cwd

    def local(self, *args: str) -> Any:
        done = self.toren_cli(*args, "--json", env=self.local_env)
        assert done.returncode == 0, (args, done.stderr)
        return json.loads(done.stdout)

    def remote(self, *args: str, env: dict[str, str | None] | None = None) -> Any:
        done = self.toren_cli(*args, "--json", env=self.remote_env | (env or {}), cwd=self.cwd)
        assert done.returncode == 0, (args, done.stderr)
        return json.loads(done.stdout)

    def same(self, *args: str) -> Any:
        """The command's --json, the same locally and remotely."""
        remote = self.remote(*args)
        assert remote == self.local(*args), args
        return remote

    def api(self, path: str, method: str = "GET", body: Any = None) -> Any:
        status, answer, _ = call(self.url + path, method, body,
                                 headers={"Authorization": f"Bearer {self.key}"})
        assert status < 300, (path, answer)
        return answer


@pytest.fixture
def deployment(toren_cli: TorenCli, start_toren, database_url: str,
               tmp_path: Path) -> Deployment:
    crews = tmp_path / "crews"
    shutil.copytree(DESK, crews / "approval-desk")
    write_agent_dir(crews, "crew", tools_py=TOOLS, schedules=[YEARLY])
    env = {"DATABASE_URL": database_url, "REFUNDS_LEDGER": str(tmp_path / "refunds.log")}
    made = toren_cli("keys", "create", "ops", "--json", env=env)
    assert made.returncode == 0, made.stderr
    server = start_toren("serve", "--dir", str(crews), "--port", "0", "--workers", "--json",
                         env=env)
    url = str(server.next_json()["url"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    deployment = Deployment(toren_cli, database_url, url, json.loads(made.stdout)["key"],
                            elsewhere)
    deployment.crews = crews
    return deployment


def test_every_operator_command_prints_the_same_json_remotely(deployment: Deployment) -> None:
    d = deployment
    run_id = d.api("/runs", "POST", {"agent": "approval-desk", "input": "A7"})["id"]
    assert wait_until(lambda: d.api(f"/runs/{run_id}")["status"] == "awaiting_approval", 60)

    # approvals: list, show (by a prefix), then approve remotely, as the API key
    [pending] = d.same("approvals", "list")["approvals"]
    assert pending["run_id"] == run_id
    assert d.same("approvals", "show", pending["id"][:8]) == pending
    assert d.same("approvals", "list", "--all", "--agent", "approval-desk") == {
        "approvals": [pending]}
    decided = d.remote("approvals", "approve", pending["id"][:8], "--reason", "called")
    assert (decided["status"], decided["reason"]) == ("approved", "called")
    assert re.fullmatch(r"ops \(key [0-9a-f-]{36}\)", decided["decided_by"])  # name and id
    assert wait_until(lambda: d.api(f"/runs/{run_id}")["status"] == "completed", 60)

    # jobs: list, show (by a prefix), receipt, and the receipt over HTTP
    listed = d.same("jobs", "list")
    assert [run["id"] for run in listed["runs"]] == [run_id]
    assert d.same("jobs", "list", "--agent", "approval-desk", "--status", "completed",
                  "--limit", "500") == listed
    shown = d.same("jobs", "show", run_id[:6])
    assert shown["status"] == "completed" and "Refunded 1 EUR" in shown["output"]
    receipt = d.same("jobs", "receipt", run_id)
    assert receipt == d.api(f"/runs/{run_id}/receipt")
    conforms("Receipt", receipt)
    calls = [call for task in receipt["tasks"] for call in task["model_calls"]]
    assert calls and all(c["latency_ms"] is not None for c in calls)
    assert receipt["totals"]["tool_calls"] >= 2 and receipt["why"]
    assert SyncTorenClient(d.url, d.key).receipt(run_id) == receipt

    # schedules: list, show, pause, resume, trigger, and the runs it started
    assert d.same("schedules", "list")["schedules"][0]["name"] == "yearly"
    assert d.remote("schedules", "pause", "crew", "yearly")["state"] == "paused"
    assert d.same("schedules", "show", "crew", "yearly")["state"] == "paused"
    assert d.remote("schedules", "resume", "crew", "yearly")["state"] == "active"
    fired = d.remote("schedules", "trigger", "crew", "yearly")
    assert (fired["agent"], fired["schedule"], fired["trigger"]) == ("crew", "yearly", "manual")
    assert wait_until(lambda: d.api(f"/runs/{fired['run_id']}")["status"] == "completed", 60)
    assert d.same("schedules", "show", "crew", "yearly")["fires"][0]["run_id"] == fired["run_id"]
    assert [run["id"] for run in d.same("jobs", "list", "--schedule", "yearly")["runs"]] == [
        fired["run_id"]]

    # cancel remotely: the run is cancelled with the reason given
    other = d.api("/runs", "POST", {"agent": "approval-desk", "input": "B12"})["id"]
    assert wait_until(lambda: d.api(f"/runs/{other}")["status"] == "awaiting_approval", 60)
    cancelled = d.remote("jobs", "cancel", other, "--reason", "duplicate order")
    assert (cancelled["id"], cancelled["status"]) == (other, "cancelled")
    assert d.same("jobs", "show", other)["status"] == "cancelled"

    # the text forms work remotely too
    for args in (("jobs", "list"), ("jobs", "show", run_id), ("jobs", "receipt", run_id),
                 ("approvals", "list", "--all"), ("schedules", "list"),
                 ("schedules", "show", "crew", "yearly")):
        done = d.toren_cli(*args, env=d.remote_env, cwd=d.cwd)
        assert done.returncode == 0, (args, done.stderr)
        local = d.toren_cli(*args, env=d.local_env)
        assert done.stdout == local.stdout, args


def test_chat_prints_the_same_json_remotely_modulo_ids(deployment: Deployment) -> None:
    d = deployment

    def chat(env: dict[str, str | None], *args: str) -> list[Any]:
        done = d.toren_cli("chat", "crew", "--json", *args, env=env, cwd=d.cwd,
                           input="postgres\n/close\n")
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    def shape(lines: list[Any]) -> list[Any]:
        """What the lines say, without ids, times, cursors and latencies."""
        kept = []
        for line in lines:
            if "type" in line:
                data = {k: v for k, v in line["data"].items()
                        if k in ("text", "name", "output", "status", "stop_reason", "step")}
                kept.append((line["type"], line["stream"], line["seq"], data))
            else:
                kept.append({k: v for k, v in line.items() if k not in ("session", "resume")})
        return kept

    local = chat(d.local_env, "--dir", str(d.crews))
    remote = chat(d.remote_env)
    assert shape(remote) == shape(local)
    assert remote[-1]["status"] == "completed"
    assert any(line.get("type") == "ToolCallCompleted" for line in remote)


def test_remote_errors_are_clear(deployment: Deployment, toren_cli: TorenCli) -> None:
    d = deployment

    def fails(*args: str, env: dict[str, str | None] | None = None) -> tuple[str, Any]:
        done = toren_cli(*args, "--json", env=d.remote_env | (env or {}), cwd=d.cwd)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        return " ".join(done.stderr.split()), json.loads(done.stdout)["error"]

    message, error = fails("jobs", "list", env={"TOREN_API_KEY": "toren_wrong"})
    assert error["code"] == "unauthorized" and "HTTP 401" in message
    message, error = fails("approvals", "list", env={"TOREN_API_KEY": None})
    assert error["code"] == "unauthorized" and "Authorization: Bearer <key>" in message
    message, error = fails("schedules", "list", env={"TOREN_URL": "http://127.0.0.1:9"})
    assert error["code"] == "api_unreachable"
    assert "cannot connect to the Toren API at http://127.0.0.1:9" in message

    for bad in ("notaurl", "ftp://x", "http://", "http://[::1", "http://h:port"):
        message, error = fails("jobs", "list", env={"TOREN_URL": bad})
        assert error["code"] == "config_error" and "is not the URL of a Toren API" in message
    message, error = fails("chat", "crew", env={"TOREN_URL": "ftp://x"})
    assert error["code"] == "config_error"

    unknown = "00000000-0000-0000-0000-000000000000"
    for args in (("jobs", "show", unknown), ("jobs", "receipt", unknown),
                 ("jobs", "cancel", unknown)):
        message, error = fails(*args)
        assert error["code"] == "run_not_found" and unknown in message, args
    message, error = fails("jobs", "show", "abc123")
    assert error["code"] == "run_not_found"
    assert "no run id starts with 'abc123' in the runs served at" in message
    message, error = fails("jobs", "show", "not/an id")
    assert error["code"] == "run_not_found" and "is not a run id" in message
    message, error = fails("approvals", "approve", "ffff")
    assert error["code"] == "approval_not_found"
    message, error = fails("schedules", "show", "crew", "missing")
    assert error["code"] == "schedule_not_found"
    message, error = fails("schedules", "pause", "ghost", "yearly")
    assert error["code"] == "agent_not_found"
    # the server is fine afterwards
    assert d.remote("jobs", "list") == {"runs": []}


def test_receipt_route_hostile_inputs(deployment: Deployment) -> None:
    d = deployment
    for path in ("/runs/nope/receipt", "/runs/00000000-0000-0000-0000-000000000000/receipt",
                 "/runs/" + "a" * 5000 + "/receipt"):
        status, body, _ = call(d.url + path, headers={"Authorization": f"Bearer {d.key}"})
        assert status == 404 and body["error"]["code"] == "run_not_found", path
        conforms("Error", body)
    status, body, _ = call(d.url + "/runs/nope/receipt")
    assert status == 401
    with pytest.raises(TorenAPIError) as raised:
        SyncTorenClient(d.url, d.key).receipt("00000000-0000-0000-0000-000000000000")
    assert raised.value.status == 404
