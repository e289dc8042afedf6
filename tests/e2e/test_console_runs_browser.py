"""The runs list in a real chromium (issue 43 §1, in part): each run's agent version and
duration (so far, while it works), a page at a time with the page and the filters in the URL,
so a view can be shared and reloaded."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.test_console_browser import (
    browser,
    click,
    dev,
    find,
    find_all,
    post,
    shoot,
    text_of,
    wait,
)
from tests.e2e.test_console_fork_browser import finished

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]
__all__ = ["browser", "dev"]  # the fixtures, shared with the console's other browser tests


def shown_runs(driver: Any) -> list[str]:
    return [row.get_attribute("data-run") for row in find_all(driver, "#runs-body tr[data-run]")]


def test_runs_are_paged_with_their_version_and_duration(browser: Any, dev: str) -> None:
    done = [post(dev, "/runs", {"agent": "echo", "input": f"run {n}"}) for n in range(3)]
    for run in done:
        finished(dev, run["id"])
    newest_first = [run["id"] for run in reversed(done)]

    browser.get(f"{dev}/#/runs?agent=echo&limit=2")
    wait(browser, lambda d: shown_runs(d) == newest_first[:2])
    row = f'#runs-body tr[data-run="{newest_first[0]}"]'
    assert re.fullmatch(r"\d+ ms|\d+\.\d s", text_of(browser, row + " td.duration")), text_of(
        browser, row + " td.duration")
    assert re.fullmatch(r"[0-9a-f]{12}", text_of(browser, row + " td.version"))
    assert not find_all(browser, "#newest-runs")
    click(browser, "#older-runs")
    wait(browser, lambda d: shown_runs(d) == newest_first[2:])
    assert "agent=echo" in browser.current_url and "cursor=" in browser.current_url
    assert not find_all(browser, "#older-runs")

    # the URL is the view: reloaded, the same page; "Newest runs" goes back to the first
    browser.refresh()
    wait(browser, lambda d: shown_runs(d) == newest_first[2:])
    click(browser, "#newest-runs")
    wait(browser, lambda d: shown_runs(d) == newest_first[:2])
    assert "cursor=" not in browser.current_url and "limit=2" in browser.current_url

    # a run still working shows how long it has taken so far (the scripted model waits 2 s)
    slow = post(dev, "/runs", {"agent": "researcher", "input": "a slow one"})
    browser.get(f"{dev}/#/runs")
    wait(browser, lambda d: "so far" in text_of(
        d, f'#runs-body tr[data-run="{slow["id"]}"] td.duration'))
    shoot(browser, "console-runs-live.png")


def test_runs_are_found_by_words_and_dates_and_sorted_by_cost(browser: Any, dev: str) -> None:
    from selenium.webdriver.common.keys import Keys

    apple = post(dev, "/runs", {"agent": "echo", "input": "apple pie"})["id"]
    banana = post(dev, "/runs", {"agent": "researcher", "input": "banana split"})["id"]
    cherry = post(dev, "/runs", {"agent": "echo", "input": "cherry <b>tart</b>"})["id"]
    for run_id in (apple, banana, cherry):
        finished(dev, run_id)

    # each run's model calls, steps and cost (the scripted model: $0.0012 a call)
    browser.get(f"{dev}/#/runs")
    wait(browser, lambda d: len(shown_runs(d)) == 3)
    row = f'#runs-body tr[data-run="{banana}"]'
    assert (text_of(browser, row + " td.model-calls"), text_of(browser, row + " td.steps"),
            text_of(browser, row + " td.cost")) == ("2", "2", "$0.0024")
    assert text_of(browser, f'#runs-body tr[data-run="{apple}"] td.cost') == "$0.0012"

    # words, typed and sent with Enter: the URL holds them
    find(browser, "#filter-q").send_keys("banana", Keys.ENTER)
    wait(browser, lambda d: shown_runs(d) == [banana])
    assert "q=banana" in browser.current_url
    browser.refresh()
    wait(browser, lambda d: shown_runs(d) == [banana])
    assert find(browser, "#filter-q").get_attribute("value") == "banana"
    click(browser, "#clear-filters")
    wait(browser, lambda d: len(shown_runs(d)) == 3)

    # sorted by cost, largest first, then (clicked again) smallest first; ties newest first
    click(browser, 'a[data-sort="cost"]')
    wait(browser, lambda d: shown_runs(d) == [banana, cherry, apple])
    assert find(browser, "th[aria-sort]").get_attribute("aria-sort") == "descending"
    shoot(browser, "console-runs-sorted.png")
    click(browser, 'a[data-sort="cost"]')
    wait(browser, lambda d: shown_runs(d) == [cherry, apple, banana])
    assert "sort=cost" in browser.current_url
    # sorted pages: one run a page, every run once
    browser.get(f"{dev}/#/runs?sort=-cost&limit=1")
    for expected in ([banana], [cherry], [apple]):
        wait(browser, lambda d, e=expected: shown_runs(d) == e)
        if expected != [apple]:
            click(browser, "#older-runs")
    assert not find_all(browser, "#older-runs")
    assert text_of(browser, "#newest-runs") == "\u2190 First page"

    # a date range: runs from tomorrow on are none; a version of another agent, none
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    browser.get(f"{dev}/#/runs?since={tomorrow}")
    wait(browser, lambda d: text_of(d, "#runs-body") == "No runs match.")
    browser.get(f"{dev}/#/runs?agent=echo&version=2.0.0")
    wait(browser, lambda d: text_of(d, "#runs-body") == "No runs match.")
    # markup in an input is text, found by its words
    browser.get(f"{dev}/#/runs?q=tart")
    wait(browser, lambda d: shown_runs(d) == [cherry])
    assert not find_all(browser, "#runs-body b")
