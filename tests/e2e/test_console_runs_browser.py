"""The runs list in a real chromium (issue 43 §1, in part): each run's agent version and
duration (so far, while it works), a page at a time with the page and the filters in the URL,
so a view can be shared and reloaded."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.test_console_browser import (
    browser,
    click,
    dev,
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
