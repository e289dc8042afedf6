"""Spend against budgets as a user reads it: ``toren run``/``toren jobs show`` (text and
``--json``, with and without the agent's directory), ``GET /runs/{id}`` and the client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TorenCli, wait_until
from tests.e2e.test_http_api import TOOLS, call, conforms, finished
from toren.client import SyncTorenClient
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
PRICING = {"toren/scripted": {"inputPerMTok": 1.0, "outputPerMTok": 10.0}}


def crews(tmp_path: Path) -> Path:
    """``budgeted`` (room for many calls), ``broke`` (no room for one) and ``free``."""
    parent = tmp_path / "crews"
    write_agent_dir(parent, "budgeted", tools_py=TOOLS, pricing=PRICING,
                    limits={"maxBudgetUsd": 1.0, "dailyBudgetUsd": 20.0})
    write_agent_dir(parent, "broke", tools_py=TOOLS, pricing=PRICING,
                    limits={"maxBudgetUsd": 0.01})
    write_agent_dir(parent, "free", tools_py=TOOLS)
    return parent


def test_the_cli_shows_spend_against_the_budget_and_why_a_call_was_not_made(
        toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    parent = crews(tmp_path)
    env = {"DATABASE_URL": database_url}
    done = toren_cli("run", "budgeted", "postgres", "--dir", str(parent), "--json", env=env)
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["status"] == "completed"
    # jobs show loads no agent directory: the budgets come from the run's own events
    shown = json.loads(toren_cli("jobs", "show", run["id"], "--json", env=env).stdout)
    budget = shown["budget"]
    assert budget["run"]["budget_usd"] == 1.0 and budget["daily"]["budget_usd"] == 20.0
    assert budget["run"]["spent_usd"] == pytest.approx(shown["totals"]["cost_usd"])
    assert 0 < budget["run"]["spent_usd"] < 0.01 and budget["held_usd"] == 0
    text = toren_cli("jobs", "show", run["id"], env=env).stdout
    assert "budget" in text and "of $1 (" in text and "daily budget" in text

    stopped = toren_cli("run", "broke", "postgres", "--dir", str(parent), "--json", env=env)
    run = json.loads(stopped.stdout)
    assert (run["status"], run["stop_reason"]) == ("stopped", "budget_exhausted")
    assert run["error"]["code"] == "budget_exhausted" and run["error"]["scope"] == "run"
    text = toren_cli("jobs", "show", run["id"], env=env).stdout
    assert "had no room for the next model call" in text and "was not made" in text


def test_get_run_and_the_client_return_the_budget(database_url: str, start_toren,
                                                  tmp_path: Path) -> None:
    parent = crews(tmp_path)
    dev = start_toren("dev", "--dir", str(parent), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url})
    url = dev.next_json()["url"]
    ids = {}
    for agent in ("budgeted", "broke", "free"):
        status, created, _ = call(f"{url}/runs", "POST", {"agent": agent, "input": "postgres"})
        assert status == 201
        ids[agent] = created["id"]
    for run_id in ids.values():
        assert wait_until(lambda run_id=run_id: finished(url, run_id), 60)
    runs = {agent: call(f"{url}/runs/{run_id}")[1] for agent, run_id in ids.items()}
    for body in runs.values():
        conforms("RunDetail", body)
    assert runs["free"]["budget"] is None
    assert runs["budgeted"]["budget"]["run"]["remaining_usd"] == pytest.approx(
        1.0 - runs["budgeted"]["totals"]["cost_usd"])
    assert runs["broke"]["budget"]["run"] == {
        "scope": "run", "spent_usd": 0.0, "budget_usd": 0.01, "remaining_usd": 0.01}
    assert runs["broke"]["budget"]["daily"]["budget_usd"] is None
    client = SyncTorenClient(url)
    assert client.get_run(ids["budgeted"])["budget"] == runs["budgeted"]["budget"]
