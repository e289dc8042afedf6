"""A run's family in the console (issue 43 §3), in a real chromium against a real `toren dev`:
a run that called another agent lists the run it started, and that run names the call that
started it, each a link to the other; a fork links to its source (tests/e2e/
test_console_fork_browser.py), and a scheduled run to its schedule
(tests/e2e/test_console_operations_browser.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_console_browser import (
    StartToren,
    browser,
    click,
    find_all,
    post,
    shoot,
    text_of,
    wait,
)
from tests.e2e.test_console_fork_browser import finished, get
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]
__all__ = ["browser"]  # the fixture, shared with the console's other browser tests


@pytest.fixture
def dev(start_toren: StartToren, database_url: str, tmp_path: Path) -> str:
    crews = tmp_path / "crews"
    write_agent_dir(crews, "desk", peers=["writer"])
    write_agent_dir(crews, "writer", acceptsFrom=["desk"])
    process = start_toren("dev", "--dir", str(crews), "--port", "0", "--json",
                          env={"DATABASE_URL": database_url})
    return str(process.next_json()["url"])


def test_a_run_and_the_run_it_called_link_to_each_other(browser: Any, dev: str) -> None:
    caller = post(dev, "/runs", {"agent": "desk", "input": "tides"})
    assert finished(dev, caller["id"])["status"] == "completed"

    (child,) = get(dev, f"/runs/{caller['id']}/children")["children"]
    child_id = child["id"]

    browser.get(f"{dev}/#/runs/{caller['id']}")
    row = f'#run-children .child-run[data-run="{child_id}"]'
    wait(browser, lambda d: find_all(d, row))
    assert len(find_all(browser, "#run-children .child-run")) == 1
    shown = text_of(browser, row)
    assert "writer" in shown and "call" in shown and "completed" in shown
    assert not find_all(browser, "#run-parent")  # started by a person
    shoot(browser, "console-run-family.png")

    click(browser, row + " a")
    wait(browser, lambda d: child_id in d.current_url and find_all(d, "#run-parent"))
    parent = text_of(browser, "#run-parent")
    assert f"a call from desk, run {caller['id']} (task main)" in parent
    assert not find_all(browser, "#run-children")  # the writer started nothing
    click(browser, "#run-parent a")
    wait(browser, lambda d: caller["id"] in d.current_url and find_all(d, "#run-children"))
    assert text_of(browser, "#run-status").strip() == "completed"
