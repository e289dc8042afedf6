"""The console's eval pages in a real chromium against a real `toren dev`: the list where two
evals are picked to compare, an eval's report (pass rate, cost and latency, tags, each case
with its verdict and its runs linked) and the comparison (pass rates side by side, the cases
fixed, the datasets told apart); a tag or a failure's text that holds HTML is shown as text,
never run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_console_browser import (
    HOSTILE,
    StartToren,
    browser,
    click,
    find,
    find_all,
    post,
    shoot,
    text_of,
    wait,
)
from tests.e2e.test_console_fork_browser import get
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]
__all__ = ["browser"]  # the fixture, shared with the console's other browser tests


@pytest.fixture
def dev(start_toren: StartToren, database_url: str, tmp_path: Path) -> str:
    write_agent_dir(tmp_path / "crews", "echo")
    process = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                          env={"DATABASE_URL": database_url,
                               "TOREN_SCRIPTED_COST_USD": "0.0012"})
    return str(process.next_json()["url"])


def dataset(strict: bool) -> dict[str, Any]:
    return {"name": "console", "cases": [
        {"id": "said", "input": "tides", "graders": [{"contains": "You said: tides"}],
         "tags": ["core", HOSTILE]},
        {"id": "strict", "input": "moon",
         "graders": [{"contains": HOSTILE if strict else "moon"}]}]}


def finished_eval(url: str, eval_id: str) -> dict[str, Any]:
    return wait(None, lambda _: (found := get(url, f"/evals/{eval_id}"))["eval"]["status"]
                == "finished" and found, timeout=60)


def test_the_eval_pages_report_and_compare(browser: Any, dev: str) -> None:
    first = post(dev, "/evals", {"agent": "echo", "dataset": dataset(strict=True),
                                 "repeat": 2})["id"]
    report = finished_eval(dev, first)
    second = post(dev, "/evals", {"agent": "echo", "dataset": dataset(strict=False)})["id"]
    finished_eval(dev, second)

    browser.get(f"{dev}/#/evals")
    wait(browser, lambda d: len(find_all(d, "#evals-list tbody tr")) == 2)
    assert text_of(browser, "#nav a[data-page=evals]") == "Evals"
    assert find(browser, "#compare-evals").get_attribute("aria-disabled") == "true"
    for eval_id in (first, second):
        find(browser, f"input[value='{eval_id}']").click()
    wait(browser, lambda d: find(d, "#compare-evals").get_attribute("href"))
    click(browser, "#compare-evals")
    wait(browser, lambda d: find_all(d, "#compare-cases tbody tr"))
    shoot(browser, "console-eval-compare.png")
    assert text_of(browser, "#compare-pass-rate") == "50.0% \u2192 100.0% (+50.0%)"
    assert "fixed 1" in text_of(browser, "#compare-changes")
    assert text_of(browser, "#datasets-differ").startswith("The datasets differ")
    fixed = find(browser, 'tr[data-case="strict"]')
    assert fixed.get_attribute("class") == "change-fixed"
    assert fixed.find_element("css selector", "td").text == "fixed"

    find(browser, "#eval-a a").click()
    wait(browser, lambda d: find_all(d, "#eval-cases tbody tr"))
    shoot(browser, "console-eval-report.png")
    assert text_of(browser, "#eval-pass-rate").startswith("50.0% (2 of 4 case runs; 0 flaky)")
    assert f"total ${report['cost_usd']['total']:.4f}" in text_of(browser, "#eval-cost")
    strict = find(browser, 'tr[data-case="strict"]')
    cells = [c.text for c in strict.find_elements("css selector", "td")]
    assert cells[0] == "failed 0 / 2"
    assert cells[-1].startswith("contains: missing '<script>window.pwned = 1</script>")
    runs = strict.find_elements("css selector", "td a")
    assert len(runs) == 2
    tags = [r.find_element("css selector", "td").text
            for r in find_all(browser, "#eval-tags tbody tr")]
    assert sorted(tags) == sorted(["core", HOSTILE.strip()])
    assert browser.execute_script("return window.pwned") is None
    assert not find_all(browser, "#eval-report img, #eval-report script")
    runs[0].click()
    wait(browser, lambda d: "#/runs/" in d.current_url)
