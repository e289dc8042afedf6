"""The console in a real browser (Debian's chromium and chromium-driver, driven by selenium)
against a real `toren dev`: a session whose text streams in before the turn ends, a second
turn, closing it and the transcript on reload; a run's steps and cost; cancelling a run; a
model's HTML shown as text, never run; the fleet; the API key asked for once.

Run with ``pytest -m browser`` (``.ci/run`` installs chromium, chromium-driver and selenium).
Set ``TOREN_CONSOLE_SCREENSHOTS`` to a directory to keep the screenshots (the docs' ones are
in docs/channels/img/).
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TorenCli, TorenProcess
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]

StartToren = Callable[..., TorenProcess]
TOOLS = '''
from toren import tool

@tool(idempotent=True)
def lookup(topic: str) -> str:
    """Look a topic up in the team's notes."""
    return f"three notes about {topic}: durable logs, leases, and receipts"
'''
HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2"> hi'


def chromium_paths() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        pytest.fail("the browser tests need chromium and chromium-driver "
                    "(apt-get install -y chromium chromium-driver)")
    return browser, driver


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver  # only the browser step installs selenium
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1280,900", "--disable-gpu"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def crews(tmp_path: Path) -> Path:
    root = tmp_path / "crews"
    write_agent_dir(root, "researcher", tools_py=TOOLS)
    write_agent_dir(root, "echo")
    return root


@pytest.fixture
def dev(start_toren: StartToren, database_url: str, tmp_path: Path) -> str:
    process = start_toren("dev", "--dir", str(crews(tmp_path)), "--port", "0", "--json",
                          env={"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "2",
                               "TOREN_SCRIPTED_COST_USD": "0.0012"})
    return str(process.next_json()["url"])


def post(url: str, path: str, body: Any, key: str | None = None) -> Any:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url + path, json.dumps(body).encode(), headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def shoot(driver: Any, name: str) -> None:
    """Keep a screenshot if TOREN_CONSOLE_SCREENSHOTS names a directory (the docs' images)."""
    directory = os.environ.get("TOREN_CONSOLE_SCREENSHOTS")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(directory) / name))


def wait(driver: Any, predicate: Callable[[Any], Any], timeout: float = 30.0) -> Any:
    """``predicate``'s first truthy answer; the pages re-render (lists refresh, a run's
    header after its events), so an element gone meanwhile just means "look again"."""
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
    )
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05, ignored_exceptions=(
        StaleElementReferenceException, NoSuchElementException)).until(predicate)


def click(driver: Any, css: str, timeout: float = 30.0) -> None:
    """Click the element ``css`` names once it is there and enabled (found afresh each try)."""

    def clicked(d: Any) -> bool:
        element = find(d, css)
        if not element.is_enabled():
            return False
        element.click()
        return True

    wait(driver, clicked, timeout)


def find(driver: Any, css: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css)


def text_of(driver: Any, css: str, timeout: float = 30.0) -> str:
    """The text of the element ``css`` names, read afresh: a page that re-renders between
    the find and the read (a live run page does) makes the read look again, not fail."""
    return str(wait(driver, lambda d: find(d, css).text + "\u0000", timeout))[:-1]


def find_all(driver: Any, css: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, css))


def status_of(driver: Any) -> str:
    return str(find(driver, "#session-status").text.strip())


def send(driver: Any, text: str) -> None:
    wait(driver, lambda d: find(d, "#send").is_enabled())
    box = find(driver, "#message")
    box.clear()
    box.send_keys(text)
    find(driver, "#send").click()
    wait(driver, lambda d: status_of(d) != "awaiting_input")  # the turn was taken


def test_a_session_streams_text_before_the_turn_ends(browser: Any, dev: str) -> None:
    browser.get(dev + "/#/sessions")
    wait(browser, lambda d: find_all(d, "#session-agent option"))
    from selenium.webdriver.support.ui import Select

    Select(find(browser, "#session-agent")).select_by_value("researcher")
    click(browser, "#start-session")
    wait(browser, lambda d: "#/sessions/" in d.current_url and find_all(d, "#composer"))
    session_id = browser.current_url.rsplit("/", 1)[1]
    send(browser, "event sourcing")

    # the answer's text appears piece by piece while the turn is still running
    streaming = wait(browser, lambda d: [b for b in find_all(d, ".bubble.agent.streaming")
                                         if b.text.startswith("Here is")])
    partial = streaming[0].text.strip()
    assert status_of(browser) == "running"
    shoot(browser, "console-session-streaming.png")
    wait(browser, lambda d: status_of(d) == "awaiting_input", timeout=60)
    answer = next(b.text for b in find_all(browser, ".bubble.agent")
                  if b.text.startswith("Here is"))
    assert answer.startswith(partial) and len(answer) > len(partial)
    assert "three notes about event sourcing" in text_of(browser, "#chat")

    send(browser, "leases")
    wait(browser, lambda d: len(find_all(d, ".bubble.user")) == 2)
    wait(browser, lambda d: status_of(d) == "awaiting_input", timeout=60)
    shoot(browser, "console-session.png")
    click(browser, "#close-session")
    wait(browser, lambda d: status_of(d) in ("completed", "stopped"), timeout=60)

    # a reload shows the whole transcript again, from the log
    browser.get(dev + "/#/sessions/" + session_id)
    browser.refresh()
    wait(browser, lambda d: len(find_all(d, ".bubble.user")) == 2)
    text = text_of(browser, "#chat")
    assert "event sourcing" in text and "leases" in text
    assert "three notes about leases" in text


def test_a_run_shows_its_steps_and_cost_and_can_be_cancelled(browser: Any, dev: str) -> None:
    done = post(dev, "/runs", {"agent": "researcher", "input": "receipts"})
    browser.get(dev + "/#/runs")
    wait(browser, lambda d: find_all(d, f'tr[data-run="{done["id"]}"] a'))
    shoot(browser, "console-runs.png")
    click(browser, f'tr[data-run="{done["id"]}"] a')
    wait(browser, lambda d: "completed" in find(d, "#run-status").text, timeout=60)
    wait(browser, lambda d: len(find_all(d, ".step .cost")) == 2)
    steps = find_all(browser, ".step-meta")
    # the CLI's money format: dollars to four decimals
    assert all("tokens" in step.text and "$0.0012 " in step.text and " ms" in step.text
               for step in steps)
    assert "lookup" in text_of(browser, ".tool-call")
    assert "three notes about receipts" in text_of(browser, ".tool-result")
    wait(browser, lambda d: "$0.0024" in find(d, "#run-cost").text)
    wait(browser, lambda d: not find(d, "#cancel-run").is_enabled())
    assert "null" not in text_of(browser, "#run-header")  # no missing element as text
    shoot(browser, "console-run.png")

    slow = post(dev, "/runs", {"agent": "researcher", "input": "a long job", "priority": 7})
    browser.get(dev + "/#/runs/" + slow["id"])
    wait(browser, lambda d: "priority 7" in find(d, "#run-queue").text)  # its own priority
    click(browser, "#cancel-run")
    wait(browser, lambda d: "cancelled" in find(d, "#run-status").text, timeout=30)


def test_html_from_a_model_is_shown_as_text_never_run(browser: Any, dev: str) -> None:
    session = post(dev, "/sessions", {"agent": "echo"})
    browser.get(dev + "/#/sessions/" + session["id"])
    send(browser, HOSTILE)
    wait(browser, lambda d: status_of(d) == "awaiting_input", timeout=60)
    answer = wait(browser, lambda d: [b for b in find_all(d, ".bubble.agent:not(.streaming)")
                                      if "<script>" in b.text])
    assert "You said: " + HOSTILE in answer[0].text
    assert browser.execute_script("return window.pwned") is None
    assert not find_all(browser, "#chat script") and not find_all(browser, "#chat img")


def test_the_fleet_shows_workers_versions_and_queue(browser: Any, dev: str) -> None:
    browser.get(dev + "/#/fleet")
    row = wait(browser, lambda d: find_all(d, "#workers-body tr td.version"))
    assert row[0].text.strip()
    assert text_of(browser, "#workers-body tr td.lane") == "all"  # toren dev: every lane
    assert not find_all(browser, "#fleet-unserved p")  # nothing waits unserved
    wait(browser, lambda d: find_all(d, "#queue-body tr"))
    assert {r.text.split()[0] for r in find_all(browser, "#queue-body tr")} == {"echo",
                                                                                "researcher"}
    assert "null" not in text_of(browser, "#fleet-summary")  # no missing element as text
    # toren dev serves without keys: there is no key to forget
    wait(browser, lambda d: find(d, "#fleet-summary").text)
    assert not find(browser, "#forget-key").is_displayed()
    icon = browser.execute_script("return document.querySelector('link[rel=icon]').href")
    assert icon.endswith("/console/favicon.svg")
    shoot(browser, "console-fleet.png")


def test_the_api_key_is_asked_once_and_kept_out_of_urls(
        browser: Any, start_toren: StartToren, toren_cli: TorenCli, database_url: str,
        tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url}
    created = toren_cli("keys", "create", "console", "--json", env=env)
    assert created.returncode == 0, created.stderr
    key = json.loads(created.stdout)["key"]
    process = start_toren("dev", "--dir", str(crews(tmp_path)), "--port", "0", "--json",
                          env={**env, "TOREN_REQUIRE_KEYS": "1"})
    url = str(process.next_json()["url"])
    run = post(url, "/runs", {"agent": "echo", "input": "with a key"}, key=key)

    browser.get(url + "/#/runs")
    dialog = wait(browser, lambda d: find(d, "#key-dialog").get_attribute("open") is not None
                  and find(d, "#key-dialog"))
    assert "API key" in dialog.text
    find(browser, "#key-input").send_keys(key)
    find(browser, "#key-form button").click()
    wait(browser, lambda d: find_all(d, f'tr[data-run="{run["id"]}"]'))
    # kept for this tab's session, never in a URL; a key there is a key to forget
    assert browser.execute_script("return sessionStorage.getItem('toren.apiKey')") == key
    wait(browser, lambda d: find(d, "#forget-key").is_displayed())
    browser.get(url + "/#/fleet")
    wait(browser, lambda d: find_all(d, "#workers-body tr td.version"))
    entries = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    assert entries and not any(key in entry for entry in entries)
    assert key not in browser.current_url


def test_a_run_shows_what_its_policies_decided(browser: Any, start_toren: StartToren,
                                               database_url: str, tmp_path: Path) -> None:
    root = tmp_path / "guarded-crews"
    write_agent_dir(root, "guarded", tools_py=TOOLS, policies=[
        {"name": "testplugin", "settings": {"deny": {"lookup": "notes are private today"}}}])
    process = start_toren("dev", "--dir", str(root), "--port", "0", "--json",
                          env={"DATABASE_URL": database_url,
                               "TOREN_LOAD_PLUGINS": "toren-testplugin"})
    url = str(process.next_json()["url"])
    run = post(url, "/runs", {"agent": "guarded", "input": "receipts"})
    browser.get(url + "/#/runs/" + run["id"])
    wait(browser, lambda d: "completed" in find(d, "#run-status").text, timeout=60)
    note = wait(browser, lambda d: find(d, ".note.policy"))
    assert note.text == "policy testplugin: deny lookup call: notes are private today"
    assert "policy_denied" in text_of(browser, ".tool-result.error")


def test_a_viewer_key_sees_the_controls_it_may_not_use_disabled(
        browser: Any, start_toren: StartToren, toren_cli: TorenCli, database_url: str,
        tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url}
    created = toren_cli("keys", "create", "watcher", "--role", "viewer", "--json", env=env)
    assert created.returncode == 0, created.stderr
    key = json.loads(created.stdout)["key"]
    process = start_toren("dev", "--dir", str(crews(tmp_path)), "--port", "0", "--json",
                          env={**env, "TOREN_REQUIRE_KEYS": "1"})
    url = str(process.next_json()["url"])
    browser.get(url + "/#/runs")
    wait(browser, lambda d: find(d, "#key-dialog").get_attribute("open") is not None)
    find(browser, "#key-input").send_keys(key)
    find(browser, "#key-form button").click()
    start = wait(browser, lambda d: find(d, "#start-run[data-needs-scope]"))
    assert start.get_attribute("disabled") is not None
    assert "runs:write" in start.get_attribute("title")
    # the API refuses anyway, with the message naming the scope
    refused = browser.execute_script(
        "return Toren.api('POST', '/runs', {agent: 'echo', input: 'x'})"
        ".then(() => 'allowed', (e) => e.code + ': ' + e.message)")
    assert refused.startswith("forbidden: POST /runs needs the scope runs:write")
