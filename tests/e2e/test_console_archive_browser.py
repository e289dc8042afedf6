"""The console's archived runs in a real browser against a real `toren dev`: the runs
retention archived are listed with their summary, read through their link as before, and
**Restore** puts one back into the hot tables.

Run with ``pytest -m browser`` (see tests/e2e/test_console_browser.py for the browser setup).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import TorenProcess, wait_until
from tests.e2e.test_console_browser import (
    browser,
    click,
    find,
    find_all,
    post,
    shoot,
    text_of,
    wait,
)
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]
__all__ = ["browser"]  # the fixture, shared with the console's other browser tests

StartToren = Callable[..., TorenProcess]


def get(url: str, path: str) -> Any:
    with urllib.request.urlopen(url + path, timeout=30) as response:
        return json.loads(response.read())


def test_archived_runs_are_listed_read_and_restored(browser: Any, start_toren: StartToren,
                                                    database_url: str, tmp_path: Path) -> None:
    parent = tmp_path / "crews"
    write_agent_dir(parent, "keeper", retention="30d")
    write_agent_dir(parent, "other", retention="30d")
    process = start_toren("dev", "--dir", str(parent), "--port", "0", "--json",
                          env={"DATABASE_URL": database_url,
                               "TOREN_SCRIPTED_COST_USD": "0.0012",
                               "TOREN_ARCHIVE": (tmp_path / "archive").as_uri()})
    url = str(process.next_json()["url"])
    runs = [post(url, "/runs", {"agent": agent, "input": "hello"})["id"]
            for agent in ("keeper", "other")]
    assert wait_until(lambda: all(get(url, f"/runs/{run_id}")["status"] == "completed"
                                  for run_id in runs), 60)
    with psycopg.connect(database_url, autocommit=True) as conn:
        for schema in ("agent_keeper", "agent_other"):
            conn.execute(f"UPDATE {schema}.runs SET finished_at = now() - interval '40 days'")
    assert post(url, "/archive", {})["agents"]["keeper"]["archived"] == 1

    browser.get(url + "/#/archived")
    kept, other = (f'#archived-body tr[data-run="{run_id}"]' for run_id in runs)
    wait(browser, lambda d: find_all(d, kept) and find_all(d, other))
    row = text_of(browser, kept)
    assert "keeper" in row and "completed" in row and "$0.0012" in row
    shoot(browser, "console-archived.png")
    # the agent filter
    find(browser, '#archived-agent option[value="other"]').click()
    wait(browser, lambda d: not find_all(d, kept) and find_all(d, other))
    browser.get(url + "/#/archived")
    wait(browser, lambda d: find_all(d, kept))

    # its link reads the archived run as before
    click(browser, kept + " a")
    wait(browser, lambda d: runs[0][:8] in d.current_url and "completed" in find(d, "main").text)

    browser.get(url + "/#/archived")
    click(browser, kept + " button.restore")
    wait(browser, lambda d: "is back in the hot tables" in find(d, "#archived-notes").text)
    wait(browser, lambda d: not find_all(d, kept) and find_all(d, other))
    assert [run["id"] for run in get(url, "/archived-runs")["runs"]] == [runs[1]]
    assert runs[0] in [run["id"] for run in get(url, "/runs")["runs"]]
