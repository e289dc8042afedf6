"""The console's Memory page in a real browser against a real `toren dev`: what the agent
remembered is listed with whom it is about, filtered by subject, and a person erases one memory
or everything kept about someone; the API then finds none of it.

Run with ``pytest -m browser`` (see tests/e2e/test_console_browser.py for the browser setup).
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TorenProcess, wait_until
from tests.e2e.test_console_browser import browser, click, find, find_all, post, shoot, wait
from tests.e2e.test_memory_e2e import EXAMPLE, calls

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]
__all__ = ["browser"]  # the fixture, shared with the console's other browser tests

StartToren = Callable[..., TorenProcess]


def get(url: str, path: str) -> Any:
    with urllib.request.urlopen(url + path, timeout=30) as response:
        return json.loads(response.read())


def test_memories_are_listed_by_subject_and_erased_by_a_person(
        browser: Any, start_toren: StartToren, database_url: str, tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "crews" / "support-memory")
    process = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                          env={"DATABASE_URL": database_url})
    url = str(process.next_json()["url"])
    runs = [post(url, "/runs", {"agent": "support-memory", "subject": subject, "input": calls(
        *(("remember", {"content": fact}) for fact in facts))})["id"]
        for subject, facts in (("ann", ["Ann is on the Team plan", "Ann prefers e-mail"]),
                               ("bob", ["Bob runs the Linux build"]))]
    assert wait_until(lambda: all(get(url, f"/runs/{run_id}")["status"] == "completed"
                                  for run_id in runs), 60)
    kept = {m["content"]: m["id"] for m in get(url, "/memories")["memories"]}
    assert len(kept) == 3

    browser.get(url + "/#/memory")
    rows = {content: f'#memory-body tr[data-memory="{memory_id}"]'
            for content, memory_id in kept.items()}
    wait(browser, lambda d: all(find_all(d, row) for row in rows.values()))
    assert "ann" in find(browser, rows["Ann is on the Team plan"]).text
    shoot(browser, "console-memory.png")
    # whom a memory is about: the subject filter
    find(browser, "#memory-subject").send_keys("ann")
    click(browser, "#memory-filters button")
    wait(browser, lambda d: not find_all(d, rows["Bob runs the Linux build"])
         and find_all(d, rows["Ann prefers e-mail"]))

    click(browser, rows["Ann prefers e-mail"] + " button.erase")
    wait(browser, lambda d: "Erased memory" in find(d, "#memory-notes").text
         and not find_all(d, rows["Ann prefers e-mail"]))
    click(browser, "#memory-erase-subject")
    wait(browser, lambda d: "Erased 1 memories about ann" in find(d, "#memory-notes").text)
    wait(browser, lambda d: not find_all(d, rows["Ann is on the Team plan"]))
    assert [m["content"] for m in get(url, "/memories")["memories"]] == [
        "Bob runs the Linux build"]
