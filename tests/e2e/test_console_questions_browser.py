"""The console's run page in a real browser against a real `toren dev`: a question the agent
asks (ask_user) shows with its choices as buttons, or a text box, and answering it there lets
the run go on; a second answer from elsewhere shows as already answered.

Run with ``pytest -m browser`` (see tests/e2e/test_console_browser.py for the browser setup).
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pytest

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

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]
__all__ = ["browser"]  # the fixture, shared with the console's other browser tests
EXAMPLE = Path(__file__).parents[2] / "contrib" / "examples" / "question-desk"


def get(url: str, path: str) -> Any:
    with urllib.request.urlopen(url + path, timeout=30) as response:
        return json.loads(response.read())


def asking(url: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A run of question-desk that asks with ``arguments``, and its question once asked."""
    run = post(url, "/runs", {"agent": "question-desk", "input": json.dumps(
        {"toolCalls": [{"name": "ask_user", "arguments": arguments}]})})
    found: list[dict[str, Any]] = []

    def parked(_: Any) -> bool:
        found[:] = get(url, f"/runs/{run['id']}/questions?status=pending")["questions"]
        return bool(found)

    wait(None, parked, timeout=60)
    return run["id"], found[0]


def test_a_question_is_answered_on_the_run_page(browser: Any, start_toren, database_url: str,
                                                tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "crews" / "question-desk")
    process = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                          env={"DATABASE_URL": database_url})
    url = str(process.next_json()["url"])

    run_id, question = asking(url, {"question": "Which colour?", "choices": ["red", "blue"]})
    browser.get(f"{url}/#/runs/{run_id}")
    card = f'[data-question="{question["id"]}"]'
    wait(browser, lambda d: "Which colour?" in find(d, card + " .question-text").text)
    shoot(browser, "console-question.png")
    click(browser, card + " .answer-choice:nth-of-type(2)")
    wait(browser, lambda d: "Answered: blue" in find(d, card + " .question-result").text)
    wait(browser, lambda d: "completed" in find(d, "#run-status").text, timeout=60)
    assert "blue" in text_of(browser, "#run-output")

    # free text, and a person who answered elsewhere while this page watched: the card says
    # who was first instead of vanishing under the person typing
    run_id, question = asking(url, {"question": "Your name, <b>please</b>?"})
    browser.get(f"{url}/#/runs/{run_id}")
    card = f'[data-question="{question["id"]}"]'
    wait(browser, lambda d: "<b>please</b>" in find(d, card + " .question-text").text)
    find(browser, card + " .answer-text").send_keys("Gra")
    post(url, f"/runs/{run_id}/questions/{question['id']}/answer", {"answer": "Ada"})
    wait(browser, lambda d: "Already answered: Ada" in find(d, card + " .question-result").text)
    assert not find_all(browser, card + " .answer-submit")
    wait(browser, lambda d: "completed" in find(d, "#run-status").text, timeout=60)
    assert "Ada" in text_of(browser, "#run-output")

    # the click that loses the race: the page has not heard of the other answer yet (its
    # event stream is blocked), so its POST gets the 409 and the card shows the first answer
    run_id, question = asking(url, {"question": "Your city?"})
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": [f"*/runs/{run_id}/events*"]})
    try:
        browser.get(f"{url}/#/runs/{run_id}")
        card = f'[data-question="{question["id"]}"]'
        wait(browser, lambda d: "Your city?" in find(d, card + " .question-text").text)
        post(url, f"/runs/{run_id}/questions/{question['id']}/answer", {"answer": "Oslo"})
        find(browser, card + " .answer-text").send_keys("Lima")
        click(browser, card + " .answer-submit")
        wait(browser, lambda d: "Already answered: Oslo" in find(
            d, card + " .question-result").text)
    finally:
        browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})

    # a session: the question shows in the conversation and the next message answers it
    session = post(url, "/sessions", {"agent": "question-desk"})
    browser.get(f"{url}/#/sessions/{session['id']}")
    # the session page renders after its fetch: wait for the composer, not just the URL
    wait(browser, lambda d: find(d, "#send").is_enabled())
    find(browser, "#message").send_keys("Which size?")
    click(browser, "#send")
    wait(browser, lambda d: "The agent asks: Which size?" in find(d, ".bubble.question").text)
    wait(browser, lambda d: find(d, "#send").is_enabled())  # the user's turn to answer
    find(browser, "#message").send_keys("large")
    click(browser, "#send")
    wait(browser, lambda d: "ask_user: large" in find(d, "#chat").text, timeout=60)
    found = get(url, f"/sessions/{session['id']}")
    assert found["pending_questions"] == [] and found["turns"] == 1
