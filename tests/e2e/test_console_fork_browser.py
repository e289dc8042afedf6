"""Fork and compare in the console (issue 43 §4), in a real chromium against a real `toren dev`:
a run forked at a step with another model and system prompt from its page, the fork's page
linking back to its source, and the two compared side by side with the first difference
highlighted and each step's cost and model time beside the other's; content from the runs
(tool arguments and results holding HTML) shown as text, never run.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_console_browser import (
    HOSTILE,
    StartToren,
    browser,
    click,
    crews,
    find,
    find_all,
    post,
    shoot,
    text_of,
    wait,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]
__all__ = ["browser"]  # the fixture, shared with the console's other browser tests


def get(url: str, path: str) -> Any:
    with urllib.request.urlopen(url + path, timeout=30) as response:
        return json.loads(response.read())


def finished(url: str, run_id: str) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def done(_: Any) -> bool:
        found.update(get(url, f"/runs/{run_id}"))
        return found["status"] in ("completed", "failed", "stopped", "cancelled")

    wait(None, done, timeout=60)
    return found


@pytest.fixture
def dev(start_toren: StartToren, database_url: str, tmp_path: Path) -> str:
    process = start_toren("dev", "--dir", str(crews(tmp_path)), "--port", "0", "--json",
                          env={"DATABASE_URL": database_url,
                               "TOREN_SCRIPTED_COST_USD": "0.0012",
                               "TOREN_SCRIPTED_DELAY": "0.3"})
    return str(process.next_json()["url"])


def test_a_run_is_forked_and_compared_with_its_source(browser: Any, dev: str) -> None:
    source = post(dev, "/runs", {"agent": "researcher", "input": "receipts"})
    assert finished(dev, source["id"])["status"] == "completed"

    browser.get(f"{dev}/#/runs/{source['id']}")
    wait(browser, lambda d: "completed" in find(d, "#run-status").text)
    assert not find_all(browser, "#run-fork")  # not a fork itself
    click(browser, "#fork-panel summary")
    step = find(browser, "#fork-step")
    step.clear()
    step.send_keys("1")
    find(browser, "#fork-model").send_keys("toren/scripted-careful")
    find(browser, "#fork-prompt").send_keys("Answer carefully.")
    shoot(browser, "console-fork.png")
    click(browser, "#fork-run")

    # the fork's own page: it names its source and how it was made, and runs to its end
    wait(browser, lambda d: "#/runs/" in d.current_url and source["id"] not in d.current_url)
    fork_id = browser.current_url.rsplit("/", 1)[1]
    wait(browser, lambda d: source["id"] in find(d, "#run-fork").text)
    fork_facts = text_of(browser, "#run-fork")
    assert "at step 1" in fork_facts and "model toren/scripted-careful" in fork_facts
    assert "another system prompt" in fork_facts
    wait(browser, lambda d: "completed" in find(d, "#run-status").text, timeout=60)
    assert get(dev, f"/runs/{fork_id}")["fork"]["source_run_id"] == source["id"]

    # and the source lists it among its forks, with its comparison
    assert get(dev, f"/runs/{source['id']}/forks")["forks"][0]["id"] == fork_id
    click(browser, "#run-fork a")
    forked = f'#run-forks .fork-run[data-run="{fork_id}"]'
    wait(browser, lambda d: source["id"] in d.current_url and find_all(d, forked))
    assert "completed" in text_of(browser, forked)
    click(browser, forked + " a.compare-fork")
    wait(browser, lambda d: "First difference" in find(d, "#diff-summary").text)
    assert "task main, step 2: the same output from another model" in text_of(
        browser, "#diff-summary")
    first = find(browser, "#first-difference")
    assert first.get_attribute("data-step") == "2" and "differs" in first.get_attribute("class")
    rows = find_all(browser, "tr.diff-step")
    assert [row.get_attribute("data-step") for row in rows] == ["1", "2"]
    # step 1 was copied: the fork paid nothing for it; step 2 it paid for live
    assert "copied from the source, at no cost" in rows[0].find_element(
        "css selector", "td.side-b").text
    assert "\u00b1$0.0000" in rows[1].find_element("css selector", ".delta-cost").text
    assert "\u2212$0.0012" in rows[0].find_element("css selector", ".delta-cost").text
    assert "toren/scripted-careful" in rows[1].find_element("css selector", "td.side-b").text
    totals = text_of(browser, "#diff-totals")
    assert "A $0.0024 \u00b7 B $0.0012 (\u2212$0.0012)" in totals
    # model time: A waited for two calls of 0.3 s, B for one (its first step was copied)
    waited = {run: int(ms) for run, ms in re.findall(r"([AB]) (\d+) ms", totals)}
    a_ms, b_ms = waited["A"], waited["B"]
    assert a_ms >= 2 * 280 and 280 <= b_ms < a_ms, totals
    assert "null" not in text_of(browser, "#main")
    shoot(browser, "console-diff.png")


def test_runs_compared_show_their_content_as_text_and_identical_runs_say_so(
        browser: Any, dev: str) -> None:
    a = post(dev, "/runs", {"agent": "researcher", "input": HOSTILE})
    b = post(dev, "/runs", {"agent": "researcher", "input": "leases"})
    finished(dev, a["id"])
    finished(dev, b["id"])

    browser.get(f"{dev}/#/diff/{a['id']}/{b['id']}")
    wait(browser, lambda d: "First difference" in find(d, "#diff-summary").text)
    assert "task main, step 1: the model's output differs" in text_of(browser, "#diff-summary")
    assert "<script>window.pwned = 1</script>" in text_of(browser, "table.diff")
    assert browser.execute_script("return window.pwned") is None
    assert not find_all(browser, "#main script") and not find_all(browser, "#main img")

    # a run compared with itself: identical
    browser.get(f"{dev}/#/diff/{b['id']}/{b['id']}")
    wait(browser, lambda d: "Identical" in find(d, "#diff-summary").text)
    assert not find_all(browser, "#first-difference")

    # the compare form: a run id it cannot be is refused on the page; a real one opens the diff
    browser.get(f"{dev}/#/runs/{a['id']}")
    click(browser, "#fork-panel summary")
    find(browser, "#compare-with").send_keys("not-a-run")
    click(browser, "#compare-run")
    wait(browser, lambda d: "A run id is 36 characters" in find(d, "#fork-status").text)
    box = find(browser, "#compare-with")
    box.clear()
    box.send_keys(b["id"])
    click(browser, "#compare-run")
    wait(browser, lambda d: f"#/diff/{a['id']}/{b['id']}" in d.current_url)
    wait(browser, lambda d: find_all(d, "#diff-summary"))

    # a fork the API refuses (a step past the run's end) says why, and nothing is made
    browser.get(f"{dev}/#/runs/{b['id']}")
    click(browser, "#fork-panel summary")
    step = find(browser, "#fork-step")
    step.clear()
    step.send_keys("99")
    click(browser, "#fork-run")
    wait(browser, lambda d: "invalid_fork_step" in find(d, "#fork-status").text)
    assert find(browser, "#fork-run").is_enabled()
