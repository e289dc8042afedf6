"""A run's waterfall in the console (issue 43 §2), in a real chromium against a real `toren dev`:
bars for a finished run's waves, tasks, model and tool calls with durations, tokens and cost;
bars that appear and grow while a run works; a model call that failed, its backoff gap and the
retry; a model that failed over to its fallback; the critical path; a bar's details (prompt,
response, arguments, result) as text, by click and by keyboard; hostile model output and tool
arguments shown as text; and the time to render a 500-step run (reported, see
docs/channels/console.md, with only a loose bound).

Run with ``pytest -m browser`` (see tests/e2e/test_console_browser.py for the browser setup).
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_console_browser import (
    HOSTILE,
    TOOLS,
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

PLANNER = Path(__file__).parents[2] / "contrib" / "examples" / "planner-crew"
QUESTION = "durable execution with postgres and event sourcing"
STEPS = 500


class FlakyModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible server whose first chat call is a 503 (retryable): Toren backs
    off and retries, and the second call answers; ``gpt-nope`` is always a 404."""

    calls = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        asked = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if asked.get("model") == "gpt-nope":  # a model it does not know: no retry helps
            return self.answer(404, {"error": {"message": "The model `gpt-nope` does not exist",
                                               "type": "invalid_request_error", "param": None,
                                               "code": "model_not_found"}})
        with FlakyModel.lock:
            FlakyModel.calls += 1
            first = FlakyModel.calls == 1
        if first:
            status, body = 503, {"error": {"message": "The server is overloaded " + HOSTILE, "type":
                                           "server_error", "param": None, "code": None}}
        else:
            status, body = 200, {
                "id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                "model": "gpt-flaky", "choices": [{"index": 0, "finish_reason": "stop",
                                                   "message": {"role": "assistant",
                                                               "content": "done at last"}}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}
        self.answer(status, body)

    def answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def flaky_model() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FlakyModel)
    FlakyModel.calls = 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def start_dev(start_toren: StartToren, database_url: str, tmp_path: Path, delay: str,
              flaky_url: str | None = None) -> str:
    crews = tmp_path / "crews"
    shutil.copytree(PLANNER, crews / "planner-crew")
    write_agent_dir(crews, "researcher", tools_py=TOOLS, limits={"maxSteps": STEPS + 5})
    write_agent_dir(crews, "hostile", tools_py=TOOLS, prompt=HOSTILE)  # its system prompt
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": delay,
           "TOREN_SCRIPTED_COST_USD": "0.0012"}
    if flaky_url:
        write_agent_dir(crews, "flaky", model="openai/gpt-flaky")
        write_agent_dir(crews, "resilient", model="openai/gpt-nope", fallbacks=["toren/scripted"])
        env |= {"OPENAI_BASE_URL": flaky_url, "OPENAI_API_KEY": "sk-test",
                "TOREN_SKIP_PREFLIGHT": "1", "TOREN_RETRY_BASE": "1.5",
                "TOREN_LOAD_PLUGINS": "toren-openai"}
    process = start_toren("dev", "--dir", str(crews), "--port", "0", "--json", env=env)
    started = process.next_json()
    assert "url" in started, started
    return str(started["url"])


@pytest.fixture
def dev(start_toren: StartToren, database_url: str, tmp_path: Path, flaky_model: str) -> str:
    """``toren dev`` with the planner crew (three waves, the second of three tasks), the
    researcher (a tool per step), an agent whose first model call fails and one whose model
    is missing (the offline model takes over); each scripted call takes 0.6 s, so a run is
    seen working."""
    return start_dev(start_toren, database_url, tmp_path, "0.6", flaky_model)


@pytest.fixture
def fast_dev(start_toren: StartToren, database_url: str, tmp_path: Path) -> str:
    """The same crews with a model that answers at once (for a long run)."""
    return start_dev(start_toren, database_url, tmp_path, "0")


def finished(url: str, run_id: str, timeout: float = 60) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def done(_: Any) -> bool:
        found.update(get(url, f"/runs/{run_id}"))
        return found["status"] in ("completed", "failed", "stopped", "cancelled")

    wait(None, done, timeout=timeout)
    return found


def open_waterfall(driver: Any, url: str, run_id: str) -> None:
    driver.get(f"{url}/#/runs/{run_id}?view=waterfall")
    wait(driver, lambda d: find_all(d, "#run-waterfall .wf-bar[data-kind]"))


def test_a_finished_runs_waterfall_its_critical_path_and_details(browser: Any,
                                                                 dev: str) -> None:
    run = post(dev, "/runs", {"agent": "planner-crew", "input": QUESTION})
    assert finished(dev, run["id"], timeout=120)["status"] == "completed"
    open_waterfall(browser, dev, run["id"])
    wait(browser, lambda d: d.execute_script(
        "return document.querySelector('#run-waterfall').classList.contains('wf-ended')"))

    # three waves: the planner, three researchers side by side, the writer
    waves = [w.get_attribute("data-wave") for w in find_all(browser, ".wf-wave")]
    assert waves == ["1", "2", "3"]
    assert len(find_all(browser, '.wf-wave[data-wave="2"] .wf-task')) == 3
    assert find(browser, "#view-waterfall").get_attribute("aria-pressed") == "true"
    assert find(browser, "#run-tree").get_attribute("hidden") is not None
    # a bar per model call and per tool call, with duration, tokens and cost beside it
    assert len(find_all(browser, ".wf-bar.wf-model")) >= 8
    assert len(find_all(browser, ".wf-bar.wf-tool")) >= 4
    figures = text_of(browser, '.wf-wave[data-wave="1"] .wf-step[data-step="1"] .wf-figures')
    # the planner crew prices toren/scripted per token (its agent.yaml)
    assert re.fullmatch(r"0\.\d\d s · 46→\d+ tok · \$0\.\d{4} · suggest_topics \d+\.\d ms",
                        figures), figures
    label = find(browser, ".wf-bar.wf-model").get_attribute("aria-label")
    assert re.fullmatch(r"Step 1 model call toren/scripted: 0\.\d\d s, 46 tokens in, \d+ out, "
                        r"\$0\.\d{4} \(critical path\)", label), label
    assert not find_all(browser, ".wf-bar.wf-running")  # nothing still going

    # the critical path: each wave's task that ended last, and its calls
    assert len(find_all(browser, ".wf-task.wf-critical-task")) == 3
    assert len(find_all(browser, '.wf-wave[data-wave="2"] .wf-task.wf-critical-task')) == 1
    critical = find(browser, '.wf-wave[data-wave="2"] .wf-task.wf-critical-task')
    task_id = critical.get_attribute("data-task")
    on_path = find_all(browser, f'.wf-step[data-task="{task_id}"] .wf-bar.wf-critical')
    assert on_path and all("(critical path)" in b.get_attribute("aria-label") for b in on_path)
    others = [t.get_attribute("data-task") for t in
              find_all(browser, '.wf-wave[data-wave="2"] .wf-task:not(.wf-critical-task)')]
    for other in others:
        assert not find_all(browser, f'.wf-step[data-task="{other}"] .wf-bar.wf-critical')
    browser.execute_script("document.querySelector('.timeline-head').scrollIntoView()")
    shoot(browser, "console-timeline.png")

    # a tool bar clicked: its arguments and result
    click(browser, '.wf-wave[data-wave="1"] .wf-bar.wf-tool')
    wait(browser, lambda d: not find(d, "#waterfall-detail").get_attribute("hidden") is not None)
    shown = text_of(browser, "#waterfall-detail")
    assert "tool suggest_topics" in shown and "Arguments" in shown and QUESTION in shown
    assert '"topics"' in shown and "postgres" in shown
    # a model bar: its prompt (the system prompt, the task's input) and its response
    click(browser, '.wf-wave[data-wave="1"] .wf-step[data-step="1"] .wf-bar.wf-model')
    wait(browser, lambda d: "You plan research" in find(d, "#waterfall-detail").text)
    shown = text_of(browser, "#waterfall-detail")
    assert "step 1 · model call" in shown and "Tool calls asked for" in shown
    assert "The task's input" in shown and QUESTION in shown

    # the tree is a click away, and the choice is in the URL
    click(browser, "#view-tree")
    assert "view=" not in browser.current_url
    assert find(browser, "#run-waterfall").get_attribute("hidden") is not None
    click(browser, "#view-waterfall")
    assert browser.current_url.endswith("?view=waterfall")


def test_the_keyboard_opens_a_bars_details(browser: Any, dev: str) -> None:
    from selenium.webdriver.common.keys import Keys

    run = post(dev, "/runs", {"agent": "researcher", "input": "leases"})
    assert finished(dev, run["id"], timeout=60)["status"] == "completed"
    # the tree first (the default), then the waterfall, built when it is first shown
    browser.get(f"{dev}/#/runs/{run['id']}")
    wait(browser, lambda d: "three notes about leases" in find(d, "#run-tree").text)
    assert find(browser, "#view-tree").get_attribute("aria-pressed") == "true"
    assert not find_all(browser, "#run-waterfall .wf-bar[data-kind]")
    click(browser, "#view-waterfall")
    wait(browser, lambda d: find_all(d, ".wf-bar.wf-tool:not(.wf-running)"))
    # Tab from the view switch reaches the first bar (one tab stop for all of them), the
    # arrow keys move between bars, Enter opens one and focus moves to its details
    for _ in range(20):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        if "wf-bar" in (browser.switch_to.active_element.get_attribute("class") or ""):
            break
    active = browser.switch_to.active_element
    assert "wf-model" in active.get_attribute("class")
    assert len(find_all(browser, 'button.wf-bar[tabindex="0"]')) == 1
    active.send_keys(Keys.ARROW_RIGHT)
    assert "wf-tool" in browser.switch_to.active_element.get_attribute("class")
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    wait(browser, lambda d: "tool lookup" in find(d, "#waterfall-detail").text)
    assert browser.switch_to.active_element.get_attribute("id") == "waterfall-detail"
    assert "three notes about leases" in text_of(browser, "#waterfall-detail")
    # Escape closes them, back to the bar; End reaches the last bar (the answer)
    browser.switch_to.active_element.send_keys(Keys.ESCAPE)
    assert find(browser, "#waterfall-detail").get_attribute("hidden") is not None
    assert "wf-tool" in browser.switch_to.active_element.get_attribute("class")
    browser.switch_to.active_element.send_keys(Keys.END)
    browser.switch_to.active_element.send_keys(Keys.SPACE)
    wait(browser, lambda d: "step 2 · model call" in find(d, "#waterfall-detail").text)
    assert "Result of lookup" in text_of(browser, "#waterfall-detail")  # what step 2 read


def test_a_working_runs_bars_appear_and_grow(browser: Any, dev: str) -> None:
    run = post(dev, "/runs", {"agent": "planner-crew", "input": QUESTION})
    open_waterfall(browser, dev, run["id"])
    wait(browser, lambda d: find_all(d, ".wf-bar.wf-model.wf-running"))
    count = len(find_all(browser, "button.wf-bar"))

    def grows(driver: Any) -> bool:
        """A call in flight: its bar, measured twice 300 ms apart while it is still going,
        is wider the second time (it reaches to now)."""
        return bool(driver.execute_async_script("""
            const done = arguments[arguments.length - 1];
            const bar = document.querySelector("#run-waterfall .wf-bar.wf-running");
            if (!bar) return done(false);
            const before = bar.getBoundingClientRect().width;
            setTimeout(() => done(bar.classList.contains("wf-running") &&
              bar.getBoundingClientRect().width > before + 1), 300);"""))

    wait(browser, grows, timeout=20)
    # later calls add bars while the run works
    wait(browser, lambda d: len(find_all(d, "button.wf-bar")) > count, timeout=30)
    assert get(dev, f"/runs/{run['id']}")["status"] == "running"
    browser.execute_script("document.querySelector('.timeline-head').scrollIntoView()")
    shoot(browser, "console-timeline-live.png")
    assert finished(dev, run["id"], timeout=120)["status"] == "completed"
    wait(browser, lambda d: not find_all(d, ".wf-bar.wf-running"), timeout=30)
    wait(browser, lambda d: len(find_all(d, ".wf-wave")) == 3)


def test_a_retry_and_its_backoff_are_visible(browser: Any, dev: str) -> None:
    run = post(dev, "/runs", {"agent": "flaky", "input": "try"})
    assert finished(dev, run["id"], timeout=60)["status"] == "completed"
    open_waterfall(browser, dev, run["id"])
    wait(browser, lambda d: find_all(d, ".wf-bar.wf-backoff"))
    row = '.wf-step[data-step="1"]'
    failed = find(browser, row + " .wf-bar.wf-failed")
    gap = find(browser, row + " .wf-bar.wf-backoff")
    answered = find(browser, row + " .wf-bar.wf-model")
    # in order on the axis, the gap as wide as the backoff (seconds, not a sliver)
    assert failed.rect["x"] <= gap.rect["x"] < answered.rect["x"]
    assert gap.rect["width"] > 20
    assert "backoff" in gap.get_attribute("aria-label")
    assert "1 retry" in text_of(browser, row + " .wf-figures")
    gap.click()
    shown = text_of(browser, "#waterfall-detail")
    assert "backoff before retry 1" in shown and "overloaded <script>window.pwned" in shown
    assert browser.execute_script("return window.pwned") is None
    click(browser, row + " .wf-bar.wf-model")
    wait(browser, lambda d: "done at last" in find(d, "#waterfall-detail").text)
    assert "Retries" in text_of(browser, "#waterfall-detail")
    shoot(browser, "console-timeline-retry.png")


def test_a_model_that_failed_over_to_its_fallback(browser: Any, dev: str) -> None:
    run = post(dev, "/runs", {"agent": "resilient", "input": "fallbacks"})
    assert finished(dev, run["id"], timeout=60)["status"] == "completed"
    open_waterfall(browser, dev, run["id"])
    row = '.wf-step[data-step="1"]'
    failed = wait(browser, lambda d: find_all(d, row + " .wf-bar.wf-failed"))[0]
    label = failed.get_attribute("aria-label")
    assert "openai/gpt-nope (model_not_found), fell back to toren/scripted" in label
    assert "model call toren/scripted" in find(browser, row + " .wf-bar.wf-model").get_attribute(
        "aria-label")
    failed.click()
    shown = text_of(browser, "#waterfall-detail")
    assert "failed attempt" in shown and "does not exist" in shown
    assert "Took over\ntoren/scripted" in shown


def test_hostile_output_and_arguments_are_shown_as_text(browser: Any, dev: str) -> None:
    # HTML in the task's input, the tool's arguments and result, the model's answer and the
    # agent's system prompt (a retry's error: test_a_retry_and_its_backoff_are_visible)
    calls = [{"name": "lookup", "arguments": {"topic": HOSTILE}}]
    run = post(dev, "/runs", {"agent": "hostile", "input": json.dumps({"toolCalls": calls})})
    assert finished(dev, run["id"], timeout=60)["status"] == "completed"
    open_waterfall(browser, dev, run["id"])
    wait(browser, lambda d: find_all(d, ".wf-bar.wf-tool:not(.wf-running)"))
    script = "<script>window.pwned = 1</script>"

    def detail(d: Any) -> str:
        return str(find(d, "#waterfall-detail").get_attribute("textContent"))

    click(browser, ".wf-bar.wf-tool")
    assert detail(browser).count(script) == 2  # the arguments and the result
    click(browser, '.wf-step[data-step="1"] .wf-bar.wf-model')
    wait(browser, lambda d: HOSTILE in find(d, ".wf-system-prompt").get_attribute("textContent"))
    assert "The task's input" in detail(browser) and script in detail(browser)
    click(browser, '.wf-step[data-step="2"] .wf-bar.wf-model')
    wait(browser, lambda d: HOSTILE in find(d, ".wf-system-prompt").get_attribute("textContent"))
    assert detail(browser).count(script) >= 3  # the prompt, the result read, the answer
    assert "onerror" in detail(browser)
    assert browser.execute_script("return window.pwned") is None
    assert not find_all(browser, "#main script, #main img")


def test_a_500_step_run_renders_in_time(browser: Any, fast_dev: str) -> None:
    calls = [{"name": "lookup", "arguments": {"topic": f"topic {n}"}} for n in range(STEPS)]
    run = post(fast_dev, "/runs", {"agent": "researcher",
                                   "input": json.dumps({"toolCalls": calls})})
    assert finished(fast_dev, run["id"], timeout=240)["status"] == "completed"
    browser.get(f"{fast_dev}/#/runs/{run['id']}?view=waterfall")
    wait(browser, lambda d: d.execute_script(
        "const w = document.querySelector('#run-waterfall');"
        "return w && w.classList.contains('wf-ended') && Number(w.dataset.bars) > 1000"),
        timeout=60)
    # a waterfall built from scratch from the run's events (fetched first, not timed): each
    # event taken in, one layout, and the browser's own style and layout pass (a read of the
    # height forces it), timed in the page; ten times, in the page shown
    figures = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        Toren.api("GET", "/runs/" + arguments[0] + "/events").then((found) => {
          const runs = [];
          for (let i = 0; i < 10; i++) {
            const node = document.createElement("div");
            document.getElementById("main").append(node);
            const began = performance.now();
            const waterfall = Toren.waterfall(node, {});
            for (const event of found.events) waterfall.event(event);
            waterfall.visible(true);
            waterfall.layout();
            const built = performance.now();
            void node.offsetHeight;
            const ended = performance.now();
            runs.push({ build: built - began, browser: ended - built, total: ended - began,
                        bars: Number(node.dataset.bars) });
            waterfall.stop();
            node.remove();
          }
          // as if the run still worked (its end left out): a tick of the clock moves every
          // bar (the axis reaches to now), so each layout then rewrites them all
          const node = document.createElement("div");
          document.getElementById("main").append(node);
          const waterfall = Toren.waterfall(node, {});
          for (const event of found.events) {
            if (event.type !== "RunFinished") waterfall.event(event);
          }
          waterfall.visible(true);
          waterfall.layout();
          void node.offsetHeight;
          const ticks = [];
          const tick = () => {
            const began = performance.now();
            waterfall.layout();
            void node.offsetHeight;
            ticks.push(performance.now() - began);
            if (ticks.length < 10) return setTimeout(tick, 20);
            waterfall.stop();
            node.remove();
            const shown = document.querySelector("#run-waterfall").dataset;
            done({ events: found.events.length, runs, ticks,
                   page: { build: Number(shown.buildMs), layout: Number(shown.layoutMs) } });
          };
          setTimeout(tick, 20);
        }, (error) => done({ error: String(error) }));""", run["id"])
    assert "error" not in figures, figures
    spread = {part: statistics.median(r[part] for r in figures["runs"])
              for part in ("build", "browser", "total")}
    print(f"\n{STEPS}-step waterfall, {figures['events']} events, median ms {spread}, "
          f"total min {min(r['total'] for r in figures['runs']):.0f} max "
          f"{max(r['total'] for r in figures['runs']):.0f}; a live tick, median "
          f"{statistics.median(figures['ticks']):.1f} max {max(figures['ticks']):.1f}; "
          f"the page's own {figures['page']}")
    assert all(r["bars"] >= 2 * STEPS for r in figures["runs"])
    assert min(r["total"] for r in figures["runs"]) < 2000  # a loose guard, not a benchmark
