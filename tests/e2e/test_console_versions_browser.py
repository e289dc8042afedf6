"""The console's agent versions in a real browser against a real `toren dev`: the Agents page
lists each version of an agent's definition with its runs, a run's page names its version, and
**Upgrade** moves an unfinished run from an older version to the one served now.

Run with ``pytest -m browser`` (see tests/e2e/test_console_browser.py for the browser setup).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TorenProcess
from tests.e2e.test_console_browser import browser, click, find, find_all, post, text_of, wait

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]
__all__ = ["browser"]  # the fixture, shared with the console's other browser tests

StartToren = Callable[..., TorenProcess]


def write_version(directory: Path, number: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "agent.yaml").write_text(
        f'name: crew\nmodel: toren/scripted\nversion: "{number}.0"\n')
    (directory / "prompt.md").write_text(f"You are version {number}.\n")


def get(url: str, path: str) -> Any:
    with urllib.request.urlopen(url + path, timeout=30) as response:
        return json.loads(response.read())


def test_versions_are_listed_and_an_unfinished_run_is_upgraded(
        browser: Any, start_toren: StartToren, database_url: str, tmp_path: Path) -> None:
    directory = tmp_path / "crews" / "crew"
    env = {"DATABASE_URL": database_url}
    write_version(directory, 1)
    first = start_toren("dev", "--dir", str(directory.parent), "--port", "0", "--json", env=env)
    url = str(first.next_json()["url"])
    session = post(url, "/sessions", {"agent": "crew"})["id"]  # waits for input: unfinished
    assert first.stop() == 0
    write_version(directory, 2)
    second = start_toren("dev", "--dir", str(directory.parent), "--port", "0", "--json", env=env)
    url = str(second.next_json()["url"])
    versions = get(url, "/agents/crew/versions")["versions"]
    assert [v["human_version"] for v in versions] == ["2.0", "1.0"]
    old, new = versions[1]["hash"], versions[0]["hash"]

    browser.get(url + "/#/agents")
    section = '[data-agent="crew"]'
    wait(browser, lambda d: find_all(d, f'{section} tr[data-version="{old}"]'))
    served = text_of(browser, f'{section} tr[data-version="{new}"]')
    assert "2.0" in served and "served now" in served
    older = find(browser, f'{section} tr[data-version="{old}"]')
    assert "served now" not in older.text
    assert text_of(browser, f'{section} tr[data-version="{old}"] td.active') == "1"

    browser.get(url + "/#/runs/" + session)
    wait(browser, lambda d: "1.0" in find(d, "#run-version").text)
    assert "not the version served now" in text_of(browser, "#run-version")
    assert "2.0" in text_of(browser, "#upgrade-run")
    click(browser, "#upgrade-run")
    wait(browser, lambda d: "2.0" in find(d, "#run-version").text and not find_all(
        d, "#upgrade-run"))
    assert get(url, f"/runs/{session}")["agent_version"] == new

    browser.get(url + "/#/agents")
    wait(browser, lambda d: find(d, f'{section} tr[data-version="{new}"] td.active').text
         == "1")
    assert text_of(browser, f'{section} tr[data-version="{old}"] td.active') == "0"
