"""``toren costs`` on this machine's database and through ``--url``: the same report as
``GET /costs``, a bar per day, the table per agent and model and the budgets in the CLI's
money format, and a malformed range refused in one line before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TorenCli
from tests.e2e.test_budget_surfaces import PRICING
from tests.e2e.test_http_api import TOOLS
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_toren_costs_locally_and_through_the_api(toren_cli: TorenCli, database_url: str,
                                                  start_toren, tmp_path: Path) -> None:
    parent = tmp_path / "crews"
    write_agent_dir(parent, "budgeted", tools_py=TOOLS, pricing=PRICING,
                    limits={"maxBudgetUsd": 1.0, "dailyBudgetUsd": 20.0})
    env = {"DATABASE_URL": database_url}
    done = toren_cli("run", "budgeted", "postgres", "--dir", str(parent), "--json", env=env)
    assert done.returncode == 0, done.stderr
    cost = json.loads(toren_cli("jobs", "receipt", json.loads(done.stdout)["id"], "--json",
                                env=env).stdout)["totals"]["cost_usd"]
    assert cost > 0

    local = toren_cli("costs", "--json", env=env)
    assert local.returncode == 0, local.stderr
    report = json.loads(local.stdout)
    assert report["totals"]["cost_usd"] == pytest.approx(cost)
    # no --dir here: the agent's limits are not known on this machine
    assert report["budgets"] == [{"agent": "budgeted", "run_budget_usd": None,
                                  "daily_budget_usd": None, "today": None}]
    text = toren_cli("costs", "--period", "week", env=env)
    assert text.returncode == 0, text.stderr
    assert f"${cost:.4f} for " in text.stdout and "week of " in text.stdout
    assert "toren/scripted" in text.stdout and "█" in text.stdout

    url = start_toren("dev", "--dir", str(parent), "--port", "0", "--json",
                      env=env).next_json()["url"]
    remote = json.loads(toren_cli("costs", "--json", "--url", url, env=env).stdout)
    assert remote["totals"] == report["totals"]
    (budget,) = remote["budgets"]
    assert (budget["run_budget_usd"], budget["daily_budget_usd"]) == (1.0, 20.0)
    shown = toren_cli("costs", "--agent", "budgeted", "--url", url, env=env).stdout
    assert "daily budget" in shown and "at most $1.0000 per run" in shown

    for args, message in ((["--period", "month"], "period must be day or week"),
                          (["--since", "2026-12-02", "--until", "2026-12-01"],
                           "until must be after since"),
                          (["--agent", "nobody"], "no agent named 'nobody'")):
        refused = toren_cli("costs", *args, env=env)
        assert refused.returncode != 0 and message in refused.stderr + refused.stdout, (
            refused.stderr)
