"""The console's Costs page (issue 43 §5) in a real chromium against a real `toren dev`: the
stacked bar chart and the table per agent and model show GET /costs' figures in the CLI's money
format, the chart's figures are in a table too, the period, range, agent and stacking are in
the URL, the daily budget's use is a meter, the controls work from the keyboard, and a model's
hostile name is shown as text, never run.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.test_console_browser import (
    HOSTILE,
    TOOLS,
    StartToren,
    browser,
    find,
    find_all,
    post,
    shoot,
    text_of,
    wait,
)
from tests.e2e.test_console_fork_browser import finished, get
from toren.agents import schema_name_for
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]
__all__ = ["browser"]  # the fixture, shared with the console's other browser tests

#: The CLI's money format (toren jobs show): dollars to four decimals.
MONEY = re.compile(r"^\$\d+\.\d{4}$")


@pytest.fixture
def dev(start_toren: StartToren, database_url: str, tmp_path: Path) -> str:
    crews = tmp_path / "crews"
    write_agent_dir(crews, "researcher", tools_py=TOOLS,
                    limits={"maxBudgetUsd": 1.0, "dailyBudgetUsd": 0.01})
    write_agent_dir(crews, "echo")
    process = start_toren("dev", "--dir", str(crews), "--port", "0", "--json",
                          env={"DATABASE_URL": database_url,
                               "TOREN_SCRIPTED_COST_USD": "0.0012"})
    return str(process.next_json()["url"])


def money(value: float) -> str:
    return f"${value:.4f}"


def add_hostile_call(database_url: str, run_id: str) -> None:
    """A model call on a model named with HTML, appended to an echo run's log as a worker
    would record it (the model's id is whatever its provider said)."""
    data = {"step": 9, "epoch": 1, "model": HOSTILE, "text": "", "tool_calls": [],
            "stop_reason": "end_turn", "usage": {"input_tokens": 7, "output_tokens": 3},
            "cost_usd": 0.5, "latency_ms": 1.0, "repeated": False}
    schema = schema_name_for("echo")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{schema}".events (run_id, stream, seq, type, data) '
                     "VALUES (%s, 'task:main', 100, 'ModelCallCompleted', %s)",
                     (run_id, json.dumps(data)))
        record_costs(conn, "echo", run_id)


def record_costs(conn: psycopg.Connection, agent: str, run_id: str) -> None:
    """What Toren does when a call is appended to a finished run (append_one, agent
    migration 0029): its cost recorded for the report."""
    conn.execute(f'SELECT "{schema_name_for(agent)}".record_model_call_costs(%s)', (run_id,))


def add_history(database_url: str, researcher_run: str, echo_run: str) -> None:
    """Calls on earlier days (as if the runs had gone on for weeks), on two priced models: a
    chart worth looking at for the docs' screenshot."""
    rows = []
    for days_ago in range(1, 29):
        for agent, run_id, model, cost in (
                ("researcher", researcher_run, "anthropic/claude-sonnet-4-5",
                 0.02 + 0.004 * (days_ago % 5)),
                ("researcher", researcher_run, "openai/gpt-5-mini", 0.006 * (days_ago % 3)),
                ("echo", echo_run, "anthropic/claude-haiku-4-5", 0.004 + 0.002 * (days_ago % 4))):
            if cost:
                rows.append((agent, run_id, 200 + days_ago * 3 + len(rows) % 3, model, cost,
                             days_ago))
    with psycopg.connect(database_url, autocommit=True) as conn:
        for agent, run_id, seq, model, cost, days_ago in rows:
            data = {"step": seq, "epoch": 1, "model": model, "text": "", "tool_calls": [],
                    "stop_reason": "end_turn", "cost_usd": cost, "latency_ms": 900.0,
                    "usage": {"input_tokens": 2400, "output_tokens": 300}, "repeated": False}
            conn.execute(f'INSERT INTO "{schema_name_for(agent)}".events (run_id, stream, seq, '
                         "type, data, created_at) VALUES (%s, 'task:main', %s, "
                         "'ModelCallCompleted', %s, now() - %s * interval '1 day')",
                         (run_id, seq, json.dumps(data), days_ago))
        for agent, run_id in (("researcher", researcher_run), ("echo", echo_run)):
            record_costs(conn, agent, run_id)


def test_the_costs_page_charts_and_tables_the_costs_with_the_budgets(
        browser: Any, dev: str, database_url: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    runs = [post(dev, "/runs", {"agent": agent, "input": "tides"})["id"]
            for agent in ("researcher", "researcher", "echo")]
    for run_id in runs:
        assert finished(dev, run_id)["status"] == "completed"
    add_history(database_url, runs[0], runs[-1])
    browser.set_window_size(1280, 1150)
    browser.get(f"{dev}/#/costs")
    wait(browser, lambda d: find_all(d, "#costs-budgets meter"))
    shoot(browser, "console-costs.png")
    browser.set_window_size(1280, 900)

    add_hostile_call(database_url, runs[-1])
    report = get(dev, "/costs")
    models = {(a["agent"], m["model"]): m for a in report["agents"] for m in a["models"]}
    scripted = models[("researcher", "toren/scripted")]
    assert scripted["calls"] >= 2 and models[("echo", HOSTILE)]["cost_usd"] == 0.5

    browser.refresh()
    wait(browser, lambda d: find_all(d, "#costs-chart rect.segment"))
    assert text_of(browser, "#nav a[data-page=costs]") == "Costs"
    summary = text_of(browser, "#costs-summary")
    assert summary.startswith(money(report["totals"]["cost_usd"]) + " for "
                              f"{report['totals']['calls']} model calls")
    # the chart: today's bar, a segment per agent whose titles give the figures
    segments = find_all(browser, "#costs-chart g.bar:last-of-type rect.segment")
    titles = [s.find_element("css selector", "title").get_attribute("textContent")
              for s in segments]
    assert {s.get_attribute("data-series") for s in segments} == {"researcher", "echo"}
    echo_today = sum(c["cost_usd"] for c in report["buckets"][-1]["costs"]
                     if c["agent"] == "echo")
    assert any(t.endswith(f"echo: {money(echo_today)} (2 calls)") for t in titles), titles
    assert sorted(li.text for li in find_all(browser, "#costs-legend li")) == [
        "echo", "researcher"]
    assert len(find_all(browser, "#costs-chart g.bar")) == 30
    chart_label = find(browser, "#costs-chart").get_attribute("aria-labelledby")
    assert chart_label == "costs-chart-title costs-chart-desc"
    assert money(report["totals"]["cost_usd"]) in find(
        browser, "#costs-chart-desc").get_attribute("textContent")
    # the table per agent and model, every cost in the CLI's format
    row = '#costs-models tr[data-agent="researcher"][data-model="toren/scripted"]'
    cells = [c.text for c in find_all(browser, row + " td")]
    assert cells == ["toren/scripted", str(scripted["calls"]), f"{scripted['input_tokens']:,}",
                     f"{scripted['output_tokens']:,}", money(scripted["cost_usd"])]
    costs = [c.text for c in find_all(browser, "#costs-models td.cost")]
    assert costs and all(MONEY.match(text) for text in costs), costs
    # a model's HTML is its name, shown as text
    hostile = [r for r in find_all(browser, '#costs-models tr[data-agent="echo"]')
               if r.get_attribute("data-model") == HOSTILE]
    assert hostile and hostile[0].find_element("css selector", "td").text == HOSTILE.strip()
    assert browser.execute_script("return window.pwned") is None
    assert not find_all(browser, "#costs-models img, #costs-models script")
    # the daily budget's use, a meter; the limit per run beside it
    budget = '#costs-budgets li[data-agent="researcher"]'
    meter = find(browser, budget + " meter")
    spent = report["budgets"][1]["today"]["spent_usd"]
    assert float(meter.get_attribute("value")) == pytest.approx(min(spent, 0.01))
    assert float(meter.get_attribute("max")) == 0.01
    label = text_of(browser, budget + " label")
    assert f"{money(spent)} of $0.0100 daily budget" in label
    assert "at most $1.0000 per run" in text_of(browser, budget)
    assert "no budget" in text_of(browser, '#costs-budgets li[data-agent="echo"]')

    # the chart's figures as a table, opened from the keyboard
    summary_toggle = find(browser, "#costs-figures summary")
    summary_toggle.send_keys(Keys.ENTER)
    wait(browser, lambda d: find(d, "#costs-periods").is_displayed())
    today = report["buckets"][-1]
    last = [c.text for c in find_all(browser, "#costs-periods tbody tr:last-child td")]
    assert last[-2:] == [str(today["calls"]), money(today["cost_usd"])]

    # the filters: the keyboard reaches the period, and each change goes into the URL
    body = find(browser, "body")
    body.click()
    for _ in range(40):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        if browser.switch_to.active_element.get_attribute("id") == "costs-period":
            break
    assert browser.switch_to.active_element.get_attribute("id") == "costs-period"
    ActionChains(browser).send_keys(Keys.ARROW_DOWN).perform()
    wait(browser, lambda d: "period=week" in d.current_url)
    wait(browser, lambda d: find_all(d, "#costs-chart rect.segment"))
    assert "Week" in find(browser, "#costs-periods thead").get_attribute("textContent")
    Select(find(browser, "#costs-by")).select_by_value("model")
    wait(browser, lambda d: "by=model" in d.current_url and find_all(
        d, '#costs-legend li[data-series="toren/scripted"]'))
    legend = [li.text for li in find_all(browser, "#costs-legend li")]
    assert HOSTILE.strip() in legend and "toren/scripted" in legend
    # one agent and a range: a shared URL opens the same view
    view = "#/costs?" + urllib.parse.urlencode({"period": "day", "since": "2026-01-01",
                                                "until": "2026-01-31", "agent": "echo",
                                                "by": "model"})
    browser.get(f"{dev}/{view}")
    wait(browser, lambda d: find_all(d, "#costs-summary"))
    assert find(browser, "#costs-agent").get_attribute("value") == "echo"
    assert find(browser, "#costs-since").get_attribute("value") == "2026-01-01"
    assert find(browser, "#costs-by").get_attribute("value") == "model"
    assert text_of(browser, "#costs-summary").startswith("$0.0000 for 0 model calls")
    assert len(find_all(browser, "#costs-periods tbody tr")) == 31
    assert "No model calls in this range." in text_of(browser, "#costs-models")
