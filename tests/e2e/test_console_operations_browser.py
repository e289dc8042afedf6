"""The console's operations pages in a real browser against a real `toren dev`: approving and
denying a parked tool call (and a second decision showing the first), schedules on the fleet
(pause, resume) and the runs list (filter), a run's schedule, its budget and why a budget
stopped it, and a model call that fell back to another model.

Run with ``pytest -m browser`` (see tests/e2e/test_console_browser.py for the browser setup).
"""

from __future__ import annotations

import json
import shutil
import threading
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TorenProcess
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
DESK = Path(__file__).parents[2] / "contrib" / "examples" / "approval-desk"
PRICING = {"toren/scripted": {"inputPerMTok": 1.0, "outputPerMTok": 10.0}}
SCHEDULES = [{"name": "nightly-digest", "cron": "0 3 * * *", "input": "the night's news"}]


class NoSuchModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that knows no model: every call is a 404."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"error": {"message": "The model `gpt-nope` does not exist",
                                     "type": "invalid_request_error",
                                     "code": "model_not_found"}}).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def no_such_model() -> Iterator[str]:
    """The base URL of an OpenAI-compatible server where every model is missing."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), NoSuchModel)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def dev(start_toren: StartToren, database_url: str, tmp_path: Path, no_such_model: str) -> str:
    """``toren dev`` serving the approval desk, a budgeted agent, one with no room in its
    budget for a call, one with a schedule, and one whose model is missing (its fallback,
    the offline model, answers)."""
    parent = tmp_path / "crews"
    shutil.copytree(DESK, parent / "approval-desk")
    write_agent_dir(parent, "budgeted", pricing=PRICING,
                    limits={"maxBudgetUsd": 1.0, "dailyBudgetUsd": 20.0})
    write_agent_dir(parent, "broke", pricing=PRICING, limits={"maxBudgetUsd": 0.00001})
    write_agent_dir(parent, "digest", schedules=SCHEDULES)
    write_agent_dir(parent, "resilient", model="openai/gpt-nope", fallbacks=["toren/scripted"])
    process = start_toren("dev", "--dir", str(parent), "--port", "0", "--json",
                          env={"DATABASE_URL": database_url, "OPENAI_BASE_URL": no_such_model,
                               "OPENAI_API_KEY": "sk-test", "TOREN_SKIP_PREFLIGHT": "1",
                               "TOREN_LOAD_PLUGINS": "toren-openai",
                               "TOREN_WEBHOOK_SECRET": "console",
                               "REFUNDS_LEDGER": str(tmp_path / "refunds.log")})
    started = process.next_json()
    assert "url" in started, started
    return str(started["url"])


def get(url: str, path: str) -> Any:
    with urllib.request.urlopen(url + path, timeout=30) as response:
        return json.loads(response.read())


def approval_of(url: str, run_id: str) -> dict[str, Any]:
    """The run's pending approval, once it has parked on it."""
    found: list[dict[str, Any]] = []

    def parked(_: Any) -> bool:
        found[:] = get(url, f"/approvals?run={run_id}&status=pending")["approvals"]
        return bool(found)

    wait(None, parked, timeout=60)
    return found[0]


def test_a_parked_call_is_approved_or_denied_in_the_browser(browser: Any, dev: str) -> None:
    approved = post(dev, "/runs", {"agent": "approval-desk", "input": "A7"})
    request = approval_of(dev, approved["id"])
    browser.get(dev + "/#/approvals")
    card = f'[data-approval="{request["id"]}"]'
    wait(browser, lambda d: "issue_refund" in find(d, card + " .approval-tool").text)
    assert '"order_id": "A7"' in text_of(browser, card + " .args")
    shoot(browser, "console-approvals.png")
    find(browser, card + " .approval-reason").send_keys("customer called <b>twice</b>")
    click(browser, card + " .decide-approve")
    wait(browser, lambda d: "approved by anonymous: customer called <b>twice</b>"
         in find(d, "#approvals-decided " + card).text)
    assert not find_all(browser, "#approvals-decided b")  # the reason is text, not markup
    browser.get(dev + "/#/runs/" + approved["id"])
    wait(browser, lambda d: "completed" in find(d, "#run-status").text, timeout=60)
    wait(browser, lambda d: "approved by anonymous" in find(d, ".approval-state").text)
    assert "Refunded" in text_of(browser, f'[data-approval="{request["id"]}"] .tool-result')

    denied = post(dev, "/runs", {"agent": "approval-desk", "input": "C3"})
    request = approval_of(dev, denied["id"])
    browser.get(dev + "/#/approvals")
    card = f'[data-approval="{request["id"]}"]'
    find_reason = wait(browser, lambda d: find(d, card + " .approval-reason"))
    find_reason.send_keys("over the limit")
    click(browser, card + " .decide-deny")
    wait(browser, lambda d: "denied by anonymous: over the limit"
         in find(d, "#approvals-decided " + card).text)
    browser.get(dev + "/#/runs/" + denied["id"])
    wait(browser, lambda d: find(d, "#run-status").text in ("completed", "stopped"), timeout=60)
    wait(browser, lambda d: "denied by anonymous: over the limit"
         in find(d, f'[data-approval="{request["id"]}"] .approval-state').text)
    assert "over the limit" in text_of(browser, f'[data-approval="{request["id"]}"] '
                                             ".tool-result")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})",
                           find(browser, f'[data-approval="{request["id"]}"]'))
    shoot(browser, "console-approval-denied.png")

    # someone else decides first: the page says who, and what they decided
    raced = post(dev, "/runs", {"agent": "approval-desk", "input": "B12"})
    request = approval_of(dev, raced["id"])
    browser.get(dev + "/#/approvals")
    card = f'[data-approval="{request["id"]}"]'
    wait(browser, lambda d: find(d, card + " .decide-deny"))
    browser.execute_async_script(
        "const [id, css, done] = arguments;"
        "fetch('/approvals/' + id + '/approve', {method: 'POST', headers:"
        " {'Content-Type': 'application/json'}, body: JSON.stringify({reason: 'first'})})"
        ".then(() => { document.querySelector(css).click(); done(); });",
        request["id"], card + " .decide-deny")
    wait(browser, lambda d: "Already decided: approved by anonymous: first"
         in find(d, card + " .already-decided").text)


def test_a_call_is_edited_answered_or_approved_always_in_the_browser(browser: Any,
                                                                     dev: str) -> None:
    edited = post(dev, "/runs", {"agent": "approval-desk", "input": "A7"})
    request = approval_of(dev, edited["id"])
    browser.get(dev + "/#/approvals")
    card = f'[data-approval="{request["id"]}"]'
    wait(browser, lambda d: request["digest"][:12] in find(d, card + " .approval-digest").text)
    click(browser, card + " .approval-more summary")
    arguments = find(browser, card + " .approval-edit-args")
    for text, words in (("{nope", "the arguments are not JSON"),
                        ('{"order_id": "A7", "amount_eur": "lots"}', "(field amount_eur)")):
        arguments.clear()
        arguments.send_keys(text)
        click(browser, card + " .decide-edit")
        wait(browser, lambda d, words=words: words in find(d, card + " .approval-result").text)
    arguments.clear()
    arguments.send_keys('{"order_id": "A7", "amount_eur": 2}')
    shoot(browser, "console-approval-edit.png")
    click(browser, card + " .decide-edit")
    wait(browser, lambda d: "edited by anonymous" in find(d, "#approvals-decided " + card).text)
    wait(browser, lambda _: get(dev, f"/runs/{edited['id']}")["status"] == "completed",
         timeout=60)
    browser.get(dev + "/#/runs/" + edited["id"])
    wait(browser, lambda d: "edited by anonymous" in find(d, ".approval-state").text)
    assert "Refunded 2 EUR" in text_of(browser, f'[data-approval="{request["id"]}"] '
                                             ".tool-result")

    answered = post(dev, "/runs", {"agent": "approval-desk", "input": "B12"})
    request = approval_of(dev, answered["id"])
    browser.get(dev + "/#/approvals")
    card = f'[data-approval="{request["id"]}"]'
    click(browser, card + " .approval-more summary")
    find(browser, card + " .approval-answer-text").send_keys("Refunded by phone already.")
    click(browser, card + " .decide-answer")
    wait(browser, lambda d: "answered by anonymous" in find(d, "#approvals-decided " + card).text)
    assert get(dev, f"/approvals/{request['id']}")["answer"] == "Refunded by phone already."

    always = post(dev, "/runs", {"agent": "approval-desk", "input": "C3"})
    request = approval_of(dev, always["id"])
    card = f'[data-approval="{request["id"]}"]'
    wait(browser, lambda d: find_all(d, card + " .decide-always"))
    click(browser, card + " .decide-always")
    wait(browser, lambda d: "approved always by anonymous" in find(
        d, "#approvals-decided " + card).text)
    record = get(dev, f"/approvals/{request['id']}")
    assert (record["status"], record["scope"]) == ("approved", "run")


def test_schedules_on_the_fleet_and_runs_pages(browser: Any, dev: str) -> None:
    fired = post(dev, "/schedules/digest/nightly-digest/trigger", {})
    other = post(dev, "/runs", {"agent": "digest", "input": "by hand"})
    browser.get(dev + "/#/fleet")
    row = '[data-schedule="digest/nightly-digest"]'
    wait(browser, lambda d: "active" in find(d, row + " .schedule-state").text)
    assert text_of(browser, row + " .next-slot").strip() not in ("", "—")
    assert text_of(browser, row + " .last-fired").strip()
    shoot(browser, "console-schedules.png")
    click(browser, row + " .schedule-pause")
    wait(browser, lambda d: "paused" in find(d, row + " .schedule-state").text)
    assert text_of(browser, row + " .next-slot").strip() == "—"
    assert get(dev, "/schedules/digest/nightly-digest")["state"] == "paused"
    click(browser, row + " .schedule-resume")
    wait(browser, lambda d: "active" in find(d, row + " .schedule-state").text)
    assert get(dev, "/schedules/digest/nightly-digest")["state"] == "active"

    from selenium.webdriver.support.ui import Select

    browser.get(dev + "/#/runs")
    wait(browser, lambda d: find_all(d, f'tr[data-run="{other["id"]}"]'))
    Select(find(browser, "#filter-schedule")).select_by_value("nightly-digest")
    wait(browser, lambda d: "schedule=nightly-digest" in d.current_url
         and not find_all(d, f'tr[data-run="{other["id"]}"]')
         and find_all(d, f'tr[data-run="{fired["run_id"]}"]'))
    assert text_of(browser, f'tr[data-run="{fired["run_id"]}"] .schedule') == "nightly-digest"
    click(browser, f'tr[data-run="{fired["run_id"]}"] a')
    wait(browser, lambda d: "nightly-digest" in find(d, "#run-schedule").text)


def test_a_run_shows_its_budget_and_that_the_budget_stopped_it(browser: Any,
                                                                dev: str) -> None:
    spent = post(dev, "/runs", {"agent": "budgeted", "input": "postgres"})
    browser.get(dev + "/#/runs/" + spent["id"])
    wait(browser, lambda d: "completed" in find(d, "#run-status").text, timeout=60)
    wait(browser, lambda d: " of $1.0000 (" in find(d, "#budget-run").text)
    # the run's page re-renders as its last events arrive: read each figure as it settles
    wait(browser, lambda d: " of $20.0000 (" in find(d, "#budget-daily").text)
    wait(browser, lambda d: "$0.0000 reserved" in find(d, "#budget-held").text)
    shoot(browser, "console-run-budget.png")

    broke = post(dev, "/runs", {"agent": "broke", "input": "postgres"})
    browser.get(dev + "/#/runs/" + broke["id"])
    wait(browser, lambda d: "stopped" in find(d, "#run-status").text, timeout=60)
    wait(browser, lambda d: find_all(d, "#budget-exhausted"))
    wait(browser, lambda d: "had no room for the next model call" in find(d, "#run-why").text)


def test_a_run_shows_its_webhook_deliveries(browser: Any, dev: str) -> None:
    # a receiver that cannot be reached here (no network): the attempt and its error show
    told = post(dev, "/runs", {"agent": "budgeted", "input": "postgres",
                               "webhook": "https://hooks.example.invalid/toren"})
    browser.get(dev + "/#/runs/" + told["id"])
    wait(browser, lambda d: "completed" in find(d, "#run-status").text, timeout=60)
    wait(browser, lambda d: "finished \u2192 https://hooks.example.invalid/toren: "
         in find(d, "#run-webhooks").text, timeout=30)


def test_a_model_call_that_fell_back_names_the_model_it_replaced(browser: Any,
                                                                  dev: str) -> None:
    run = post(dev, "/runs", {"agent": "resilient", "input": "fallbacks"})
    browser.get(dev + "/#/runs/" + run["id"])
    wait(browser, lambda d: "completed" in find(d, "#run-status").text, timeout=60)
    wait(browser, lambda d: find_all(d, ".fell-back"))
    assert "fell back from openai/gpt-nope (model_not_found)" in text_of(browser, ".fell-back")
    assert text_of(browser, ".step .model") == "toren/scripted"
    assert "openai/gpt-nope failed (model_not_found)" in text_of(browser, ".fallback")
    shoot(browser, "console-run-fallback.png")
