"""Files in the console, in a real browser against a real `toren dev` that requires API keys:
a PNG and a PDF attached on the start-run form are uploaded, the run's page shows the image's
thumbnail (its bytes fetched with the key from GET /files/{id}/content, shown from a blob: URL)
and a link to the PDF, and the step says what the images cost; a file attached in a session's
chat box shows in the user's bubble.

Run with ``pytest -m browser`` (see tests/e2e/test_console_browser.py for the browser setup).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TorenCli, TorenProcess
from tests.e2e.test_console_browser import browser, click, find, find_all, shoot, text_of, wait
from toren.testing import pdf_bytes, png_bytes, write_agent_dir

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]
__all__ = ["browser"]  # the fixture, shared with the console's other browser tests

StartToren = Callable[..., TorenProcess]


def loaded_size(driver: Any, css: str) -> tuple[int, int] | None:
    """The natural size of the image ``css`` names once it has loaded, else ``None``."""
    size = driver.execute_script(
        "const i = document.querySelector(arguments[0]);"
        "return i && i.complete && i.naturalWidth ? [i.naturalWidth, i.naturalHeight] : null;",
        css)
    return (int(size[0]), int(size[1])) if size else None


def test_files_attached_on_the_start_run_form_show_in_the_run_view(
        browser: Any, start_toren: StartToren, toren_cli: TorenCli, database_url: str,
        tmp_path: Path) -> None:
    from selenium.webdriver.support.ui import Select

    created = toren_cli("keys", "create", "console", "--json",
                        env={"DATABASE_URL": database_url})
    assert created.returncode == 0, created.stderr
    key = json.loads(created.stdout)["key"]
    write_agent_dir(tmp_path / "crews", "looker")
    dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, "TOREN_REQUIRE_KEYS": "1"})
    url = str(dev.next_json()["url"])
    chart, report = tmp_path / "chart.png", tmp_path / "report.pdf"
    chart.write_bytes(png_bytes(64, 48, (200, 30, 30)))
    report.write_bytes(pdf_bytes("Revenue grew 12%."))

    browser.get(url + "/#/runs")
    wait(browser, lambda d: find(d, "#key-dialog").get_attribute("open") is not None)
    find(browser, "#key-input").send_keys(key)
    find(browser, "#key-form button").click()
    wait(browser, lambda d: find_all(d, '#run-agent option[value="looker"]'))
    Select(find(browser, "#run-agent")).select_by_value("looker")
    find(browser, "#run-input").send_keys("What does the chart show?")
    find(browser, "#run-files").send_keys(f"{chart}\n{report}")
    click(browser, "#start-run")

    wait(browser, lambda d: "#/runs/" in d.current_url and find_all(d, "#run-status"))
    wait(browser, lambda d: "completed" in find(d, "#run-status").text, timeout=60)
    thumb = '.task-files figure[data-file] img.thumb'
    assert wait(browser, lambda d: loaded_size(d, thumb)) == (64, 48)
    # the bytes came with the key in a header: the image is shown from a blob: URL
    assert find(browser, thumb).get_attribute("src").startswith("blob:")
    assert "chart.png (64x48 px)" in text_of(browser, ".task-files figure figcaption")
    assert "report.pdf (1 page)" in text_of(browser, ".task-files a.attachment.pdf")
    # the model was shown both, and the step says what they cost
    assert "I was shown:" in text_of(browser, ".step .model-text")
    wait(browser, lambda d: "for images, estimated" in find(d, ".step .image-tokens").text)
    shoot(browser, "console-run-files.png")
    # a click on the PDF's link fetches it with the key and hands the browser its content
    click(browser, ".task-files a.attachment.pdf")
    wait(browser, lambda d: find(d, ".task-files a.attachment.pdf").get_attribute("download")
         == "report.pdf")
    assert find(browser, ".task-files a.attachment.pdf").get_attribute("href").startswith(
        "blob:")

    # a session: the chat box's file goes with the message and shows in the user's bubble
    browser.get(url + "/#/sessions")
    wait(browser, lambda d: find_all(d, '#session-agent option[value="looker"]'))
    Select(find(browser, "#session-agent")).select_by_value("looker")
    click(browser, "#start-session")
    wait(browser, lambda d: "#/sessions/" in d.current_url and find_all(d, "#composer"))
    wait(browser, lambda d: find(d, "#send").is_enabled())
    find(browser, "#message").send_keys("And this one?")
    find(browser, "#message-files").send_keys(str(chart))
    find(browser, "#send").click()
    bubble_thumb = ".bubble.user .bubble-files img.thumb"
    assert wait(browser, lambda d: loaded_size(d, bubble_thumb), timeout=60) == (64, 48)
    wait(browser, lambda d: "I was shown:" in find(d, "#chat").text, timeout=60)
    shoot(browser, "console-session-files.png")
    assert find(browser, "#message-files").get_attribute("value") == ""  # sent: cleared
