"""``GET /costs`` over real HTTP on real Postgres: what runs' model calls cost per day, agent
and model (a fork's copied calls not counted again: the figures add up to the runs' receipts;
archived and restored runs count once), the budgets and the day's use, the client, a key
limited to one agent, hostile parameters, and 501 from a store that does not add up costs."""

from __future__ import annotations

import types
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import psycopg
import pytest

from tests.e2e.test_http_api import conforms
from tests.integration.test_fork_replay import PLAN, TOOLS
from toren.client import TorenClient
from toren.core.costs import costs_window
from toren.host.runtime import Runtime
from toren.seams.store.reader import RunReader
from toren.server.app import create_app
from toren.testing import ScriptedModel, serve_on_free_port, write_agent_dir

STEP_COST = 0.01


@pytest.fixture
async def served(make_runtime: Any, tmp_path: Path
                 ) -> AsyncIterator[tuple[str, Runtime, dict[str, str]]]:
    """``calc`` (on ``test/paid``, $0.01 a step; budgets of $1 a run and $5 a day), ``desk``
    (on ``test/cheap``, $0.001 a step, no budget), keys required; an admin key's header."""
    models = {"paid": ScriptedModel(cost_usd=STEP_COST), "cheap": ScriptedModel(cost_usd=0.001)}
    dirs = [write_agent_dir(tmp_path, "calc", tools_py=TOOLS, model="test/paid",
                            limits={"maxBudgetUsd": 1.0, "dailyBudgetUsd": 5.0}),
            write_agent_dir(tmp_path, "desk", model="test/cheap")]
    runtime = await make_runtime(dirs=dirs, models=models)
    _, token = await runtime.keys.create("ops")
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=True))
    yield url, runtime, {"Authorization": f"Bearer {token}"}
    await runner.cleanup()


async def get(url: str, path: str, headers: dict[str, str]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.get(f"{url}{path}",
                                                         headers=headers) as answer:
        return answer.status, await answer.json()


async def finished(runtime: Runtime, agent: str, input: str) -> str:
    run_id = await runtime.start_run(agent, input)
    record = await runtime.wait_for_run(run_id, timeout_s=60)
    assert record.status == "completed", record.error
    return run_id


async def test_costs_per_day_agent_and_model_add_up_to_the_receipts(
        served: tuple[str, Runtime, dict[str, str]]) -> None:
    url, runtime, headers = served
    source = await finished(runtime, "calc", PLAN)  # four steps
    fork = await runtime.forks.fork(source, 2)  # two copied, two live
    await runtime.wait_for_run(fork.id, timeout_s=60)
    cheap = await finished(runtime, "desk", "hello")
    status, report = await get(url, "/costs", headers)
    assert status == 200, report
    conforms("CostsReport", report)
    receipts = [await runtime.receipt(run_id) for run_id in (source, fork.id, cheap)]
    assert report["totals"]["cost_usd"] == pytest.approx(
        sum(r["totals"]["cost_usd"] for r in receipts))
    assert report["totals"]["calls"] == 4 + 2 + 1
    assert report["totals"]["cost_usd"] == pytest.approx(0.061)
    today = datetime.now(UTC).date().isoformat()
    assert report["period"] == "day" and len(report["buckets"]) == 30
    last = report["buckets"][-1]
    assert last["start"] == f"{today}T00:00:00Z" and last["calls"] == 7
    assert [(c["agent"], c["model"], c["calls"]) for c in last["costs"]] == [
        ("calc", "test/paid", 6), ("desk", "test/cheap", 1)]
    assert all(bucket["calls"] == 0 for bucket in report["buckets"][:-1])
    assert [(a["agent"], a["cost_usd"]) for a in report["agents"]] == [
        ("calc", pytest.approx(0.06)), ("desk", pytest.approx(0.001))]
    budgets = {b["agent"]: b for b in report["budgets"]}
    assert budgets["desk"] == {"agent": "desk", "run_budget_usd": None,
                               "daily_budget_usd": None, "today": None}
    calc = budgets["calc"]
    assert (calc["run_budget_usd"], calc["daily_budget_usd"]) == (1.0, 5.0)
    assert calc["today"]["day"] == today
    assert calc["today"]["spent_usd"] == pytest.approx(0.06)  # the ledger's count
    assert calc["today"]["remaining_usd"] == pytest.approx(5.0 - 0.06)

    status, weekly = await get(url, "/costs?period=week&agent=calc", headers)
    assert status == 200 and weekly["period"] == "week" and len(weekly["buckets"]) == 12
    assert [a["agent"] for a in weekly["agents"]] == ["calc"]
    assert weekly["totals"]["calls"] == 6
    async with TorenClient(url, api_key=headers["Authorization"].split()[1]) as client:
        assert (await client.costs(period="week", agent="calc"))["totals"] == weekly["totals"]
    # a window without the calls
    long_ago = (datetime.now(UTC) - timedelta(days=100)).date().isoformat()
    status, empty = await get(url, f"/costs?since={long_ago}&until={long_ago}T01:00", headers)
    assert status == 200 and empty["totals"]["calls"] == 0 and len(empty["buckets"]) == 1


async def test_a_key_limited_to_an_agent_sees_only_its_costs(
        served: tuple[str, Runtime, dict[str, str]]) -> None:
    url, runtime, _ = served
    await finished(runtime, "desk", "hello")
    _, token = await runtime.keys.create("desk-only", role="viewer", agents=["desk"])
    limited = {"Authorization": f"Bearer {token}"}
    status, report = await get(url, "/costs", limited)
    assert status == 200
    assert [a["agent"] for a in report["agents"]] == ["desk"]
    assert [b["agent"] for b in report["budgets"]] == ["desk"]
    status, refused = await get(url, "/costs?agent=calc", limited)
    assert status == 404 and refused["error"]["code"] == "not_found"


@pytest.mark.parametrize(("query", "status", "code"), [
    ("period=month", 400, "invalid_costs_query"),
    ("period=day&period=week", 400, "invalid_costs_query"),
    ("since=yesterday", 400, "invalid_costs_query"),
    ("since=2026-12-01%00", 400, "invalid_costs_query"),
    (f"since={quote(chr(39) + '; DROP TABLE runs; --')}", 400, "invalid_costs_query"),
    (f"until={'9' * 5000}", 400, "invalid_costs_query"),
    ("since=2026-12-02&until=2026-12-01", 400, "invalid_costs_window"),
    ("since=2020-01-01&until=2026-01-01", 400, "invalid_costs_window"),
    ("since=9999-12-31&until=9999-12-31T12:00", 400, "invalid_costs_window"),
    ("limit=5", 400, "invalid_costs_query"),
    ("agent=nobody", 404, "agent_not_found"),
    (f"agent={quote('<img src=x onerror=alert(1)>')}", 404, "agent_not_found"),
    ("agent=%00", 404, "agent_not_found"),
])
async def test_hostile_parameters_get_a_clear_4xx(
        served: tuple[str, Runtime, dict[str, str]], query: str, status: int,
        code: str) -> None:
    url, _, headers = served
    got, body = await get(url, f"/costs?{query}", headers)
    assert (got, body["error"]["code"]) == (status, code), body
    assert len(body["error"]["message"]) < 400


async def test_a_store_that_does_not_add_up_costs_answers_501(
        served: tuple[str, Runtime, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    url, runtime, headers = served
    monkeypatch.setattr(runtime.store, "costs", types.MethodType(RunReader.costs,
                                                                 runtime.store))
    status, body = await get(url, "/costs", headers)
    assert status == 501 and body["error"]["code"] == "not_supported"
    assert "does not add up costs" in body["error"]["message"]


async def test_archived_and_restored_runs_count_once(make_runtime: Any, tmp_path: Path,
                                                     database_url: str) -> None:
    models = {"paid": ScriptedModel(cost_usd=STEP_COST)}
    runtime = await make_runtime(
        dirs=[write_agent_dir(tmp_path, "calc", tools_py=TOOLS, model="test/paid",
                              retention="30d")],
        models=models, archive_url=(tmp_path / "archive").as_uri())
    source = await finished(runtime, "calc", PLAN)
    fork = await runtime.forks.fork(source, 3)  # three copied steps, one live
    await runtime.wait_for_run(fork.id, timeout_s=60)
    window = costs_window("day", None, None)

    async def totals() -> tuple[int, float]:
        report = await runtime.costs.report(*window, ["calc"])
        return report["totals"]["calls"], round(report["totals"]["cost_usd"], 10)

    assert await totals() == (5, 0.05)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE agent_calc.runs SET finished_at = now() - interval '40 days'")
    assert (await runtime.archive_runs())["agents"]["calc"]["archived"] == 2
    assert await totals() == (5, 0.05)  # the cost history outlives the hot tables
    await runtime.archive.restore(fork.id)
    await runtime.archive.restore(source)
    assert await totals() == (5, 0.05)


async def test_a_store_without_the_optional_reads_answers_501_or_adds_up_events(
        served: tuple[str, Runtime, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Plugin API 1.5/1.6's optional reads, as a store that leaves them out has them: searching
    runs and listing forks answer 501 and say so; a page's totals come from the events (the
    default ``run_totals``), the same figures as the store's own."""
    url, runtime, headers = served
    source = await finished(runtime, "calc", PLAN)
    fork = await runtime.forks.fork(source, 2)
    await runtime.wait_for_run(fork.id, timeout_s=60)
    status, stored = await get(url, "/runs?agent=calc", headers)
    assert status == 200 and stored["runs"][0]["totals"]["model_calls"] == 4
    for name in ("search_runs", "fork_runs", "run_totals"):
        monkeypatch.setattr(runtime.store, name,
                            types.MethodType(getattr(RunReader, name), runtime.store))
    status, added_up = await get(url, "/runs?agent=calc", headers)
    assert status == 200 and added_up["runs"] == stored["runs"]
    assert [run["totals"]["cost_usd"] for run in added_up["runs"]] == [
        pytest.approx(2 * STEP_COST), pytest.approx(4 * STEP_COST)]
    for path, what in ((f"/runs?q={quote('zebra')}", "does not search runs"),
                       ("/runs?sort=-cost", "does not search runs"),
                       (f"/runs/{source}/forks", "does not list a run's forks")):
        status, body = await get(url, path, headers)
        assert status == 501 and body["error"]["code"] == "not_supported", (path, body)
        assert what in body["error"]["message"]
