"""SIGKILL with images in flight (issue 38 §4), against real ``toren worker`` processes and
real Postgres, through the named crash points (TOREN_CRASH_AT):

- right after a tool that returned an image has stored it, before its result is appended
  (``after_tool``: the one point between ``store_tool_files`` and the append): the next worker
  runs the idempotent tool again and records its result once, with one attachment whose file
  reads back, and the model is shown it;
- right after the model answered a call it was shown images for, before the answer is
  appended (``after_model_response``): that one call is made again, marked repeated;
- right after that answer was appended (``after_append``): it is not paid for again.

Either way the receipt counts each recorded call's image tokens once, and ``toren jobs
receipt`` shows them in its "image tok" column (runs shown no file have none). Last, the
example contrib/examples/vision-desk runs offline as its README says."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import signal
from pathlib import Path
from typing import Any

import jsonschema
import psycopg
import pytest

from tests.badinput.test_uploads import read_back
from tests.chaos.helpers import create_run, run_events, run_row, start_worker
from tests.conftest import TorenCli, wait_until
from tests.durable import check_log, plugin_host
from toren.config import Settings
from toren.core.attachments import describe_file, estimated_tokens
from toren.core.events import TERMINAL_STATUSES, Event
from toren.host.runtime import Runtime
from toren.testing import png_bytes, write_agent_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

#: An idempotent tool that returns a picture (and writes its idempotency key to a file kept
#: outside the database, once per execution), then one that returns text: the offline model
#: calls screenshot (step 1), then lookup (step 2), then answers (step 3).
TOOLS = """
import toren
from toren.testing import png_bytes

@toren.tool(idempotent=True)
def screenshot(page: str) -> toren.ToolResult:
    'Take a screenshot of a page.'
    with open({effects!r}, "a") as f:
        f.write(toren.current_tool_call().idempotency_key + "\\n")
    return toren.ToolResult("the page", files=[toren.ToolFile(
        "shot.png", "image/png", png_bytes(320, 200, (0, 128, 255)))])

@toren.tool(idempotent=True)
def lookup(topic: str) -> str:
    'Look a topic up.'
    with open({effects!r}, "a") as f:
        f.write(toren.current_tool_call().idempotency_key + "\\n")
    return "facts"
"""
SHOT = png_bytes(320, 200, (0, 128, 255))
CHART = png_bytes(800, 600, (200, 40, 40))
AGENT = "looker"
SCHEMA = "agent_looker"
VISION_DESK = Path(__file__).resolve().parents[2] / "contrib" / "examples" / "vision-desk"


def looker(tmp_path: Path) -> tuple[Path, Path]:
    """The agent's directory and its effects file."""
    effects = tmp_path / "effects.log"
    return write_agent_dir(tmp_path, AGENT, tools_py=TOOLS.format(effects=str(effects))), effects


def start_with_chart(database_url: str, directory: Path, home: Path) -> tuple[str, str]:
    """Upload the chart and queue a run with it attached (``Runtime.start_run(files=...)``,
    what ``POST /runs {"files"}`` does), in this process without workers: the run's id and
    the chart's file id."""
    async def start() -> tuple[str, str]:
        settings = Settings(database_url=database_url, home=home, load_plugins=())
        runtime = Runtime([directory], settings=settings, plugins=plugin_host())
        await runtime.start(workers=False)
        try:
            stored = await runtime.store.add_file(
                name="chart.png", content_type="image/png", data=CHART,
                sha256=hashlib.sha256(CHART).hexdigest())
            return await runtime.start_run(AGENT, "example.com", files=[stored.id]), stored.id
        finally:
            await runtime.stop()

    return asyncio.run(start())


def crash_then_finish(start_toren: Any, directory: Path, env: dict[str, str], point: str,
                      run_id: str, tmp_path: Path) -> list[Event]:
    """A worker SIGKILLs itself at ``point``; another (past the point: the marker file exists)
    finishes the run. The run's events, checked."""
    crashing = env | {"TOREN_CRASH_AT": point, "TOREN_CRASH_ONCE": str(tmp_path / "crashed")}
    doomed = start_toren("worker", "--dir", str(directory), "--json", env=crashing)
    assert doomed.next_json()["event"] == "ready"
    assert doomed.proc.wait(timeout=60) == -signal.SIGKILL, doomed.stderr
    worker = start_worker(start_toren, directory, crashing)
    assert wait_until(lambda: run_row(env["DATABASE_URL"], SCHEMA, run_id)[0]
                      in TERMINAL_STATUSES, 90), worker.stderr
    worker.stop()
    assert run_row(env["DATABASE_URL"], SCHEMA, run_id)[0] == "completed"
    events = run_events(env["DATABASE_URL"], SCHEMA, run_id)
    check_log(events)
    return events


def call_log(env: dict[str, str]) -> list[dict[str, Any]]:
    """The offline model's calls, one line each as a call starts (a call cut short by a
    crash counts as paid)."""
    return [json.loads(line) for line in Path(env["TOREN_SCRIPTED_CALL_LOG"]).read_text()
            .splitlines()]


def tokens(*images: bytes) -> int:
    """What showing ``images`` costs by the published formula (what the offline model and
    the receipt count)."""
    return sum(estimated_tokens(describe_file(file_id="x", name="x", content_type="image/png",
                                              size_bytes=len(image), sha256="x", data=image))
               for image in images)


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
            "TOREN_SCRIPTED_CALL_LOG": str(tmp_path / "calls.jsonl"),
            "TOREN_MAX_DELIVERIES": "100"}


def test_a_crash_after_a_tools_image_was_stored_records_it_once_and_shows_it(
        start_toren: Any, toren_cli: TorenCli, env: dict[str, str], tmp_path: Path) -> None:
    directory, effects = looker(tmp_path)
    run_id = create_run(toren_cli, directory, AGENT, "example.com", env)

    # the screenshot ran and its image was stored; the worker dies before appending the result
    events = crash_then_finish(start_toren, directory, env, "after_tool", run_id, tmp_path)

    keys = effects.read_text().splitlines()
    # the screenshot is idempotent: run again by the successor; lookup once
    assert keys == [f"toren:{run_id}:main:1:0"] * 2 + [f"toren:{run_id}:main:2:0"]
    check_log(events, executed=keys, calls=call_log(env))
    results = [e.data for e in events if e.type == "ToolCallCompleted"
               and e.data["name"] == "screenshot"]
    assert len(results) == 1 and not results[0]["is_error"]
    (shot,) = results[0]["attachments"]
    assert (shot["name"], shot["width"], shot["height"]) == ("shot.png", 320, 200)
    assert asyncio.run(read_back(env["DATABASE_URL"], shot["file_id"])) == hashlib.sha256(
        SHOT).hexdigest()
    # the model's next calls were shown it, bytes and all
    calls = call_log(env)
    assert [c["attachments"] for c in calls] == [[], [["shot.png", len(SHOT)]],
                                                 [["shot.png", len(SHOT)]]]
    # the crashed execution's copy is stored too, named by no event: two file rows over one
    # stored content (content is kept once per SHA-256)
    with psycopg.connect(env["DATABASE_URL"]) as conn:
        rows = conn.execute("SELECT id FROM toren_control.files WHERE run_id = %s",
                            [run_id]).fetchall()
        blobs = conn.execute("SELECT count(*) FROM toren_control.file_blobs WHERE sha256 = %s",
                             [shot["sha256"]]).fetchone()
    assert len(rows) == 2 and shot["file_id"] in {str(row[0]) for row in rows}
    assert blobs == (1,)


@pytest.mark.parametrize(("point", "repaid"), [
    # step 2 (shown the chart and the screenshot) answered; the answer died with the worker:
    # that one call is made again, marked repeated
    ("after_model_response@2", 1),
    # step 2's answer and its lookup call were appended (appends: step 1 started, step 1's
    # answer, step 2 started, step 2's answer): nothing is paid again
    ("after_append@4", 0),
])
def test_a_crash_around_a_call_shown_images_pays_it_at_most_once_more_and_counts_it_once(
        start_toren: Any, toren_cli: TorenCli, env: dict[str, str], tmp_path: Path,
        point: str, repaid: int) -> None:
    directory, _effects = looker(tmp_path)
    run_id, chart_id = start_with_chart(env["DATABASE_URL"], directory, tmp_path / "home")

    events = crash_then_finish(start_toren, directory, env, point, run_id, tmp_path)

    calls = call_log(env)
    check_log(events, calls=calls)
    both = [["chart.png", len(CHART)], ["shot.png", len(SHOT)]]
    # step 1 was shown the run's chart; steps 2 and 3 the chart and the tool's screenshot
    assert [c["attachments"] for c in calls] == [[["chart.png", len(CHART)]]] + [both] * (
        2 + repaid)
    doomed = calls[0]["pid"]
    assert [c["pid"] == doomed for c in calls] == [True, True] + [False] * (1 + repaid)
    started = next(e for e in events if e.type == "TaskStarted")
    assert [a["file_id"] for a in started.data["attachments"]] == [chart_id]
    completed = [e.data for e in events if e.type == "ModelCallCompleted"]
    assert [c["step"] for c in completed] == [1, 2, 3]  # each step recorded once
    assert [c["repeated"] for c in completed] == [False, bool(repaid), False]

    receipt = json.loads(toren_cli("jobs", "receipt", run_id, "--json", env=env).stdout)
    per_call = [c["image_tokens"] for task in receipt["tasks"] for c in task["model_calls"]]
    assert per_call == [tokens(CHART), tokens(CHART, SHOT), tokens(CHART, SHOT)]
    assert receipt["totals"]["image_tokens"] == sum(per_call)
    assert receipt["totals"]["repeated_calls"] == repaid
    assert len(calls) == receipt["totals"]["model_calls"] + repaid


def test_jobs_receipt_shows_image_tokens_only_for_runs_shown_files(
        toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url}
    directory, _effects = looker(tmp_path)
    plain = write_agent_dir(tmp_path, "plain")
    seen = json.loads(toren_cli("run", AGENT, "example.com", "--dir", str(directory), "--json",
                                env=env).stdout)
    blind = json.loads(toren_cli("run", "plain", "hello", "--dir", str(plain), "--json",
                                 env=env).stdout)
    assert seen["status"] == blind["status"] == "completed"

    shown = toren_cli("jobs", "receipt", seen["id"], env=env)
    assert shown.returncode == 0, shown.stderr
    header = next(line for line in shown.stdout.splitlines() if "purpose" in line)
    assert "image tok" in header
    model_calls = shown.stdout.split("Tool calls")[0]
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in
            model_calls.splitlines() if line.startswith("│ main")]
    column = header.split("┃")[1:-1]
    images = [row[[c.strip() for c in column].index("image tok")] for row in rows]
    assert images == ["", str(tokens(SHOT)), str(tokens(SHOT))]
    assert f"({2 * tokens(SHOT)} of the input for images and PDF pages, estimated)" in (
        shown.stdout)
    without = toren_cli("jobs", "receipt", blind["id"], env=env)
    assert without.returncode == 0 and "image" not in without.stdout


def test_the_vision_desk_example_reads_its_sample_receipt_offline(
        toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url}
    directory = Path(shutil.copytree(VISION_DESK, tmp_path / "vision-desk"))
    receipt_pdf = directory / "samples" / "receipt.pdf"

    done = toren_cli("run", "vision-desk", "What does this receipt say?", "--dir",
                     str(directory), "--file", str(receipt_pdf), "--json", env=env)

    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["status"] == "completed", run
    schema = json.loads((directory / "schemas" / "reading.json").read_text())
    jsonschema.validate(run["output"], schema)  # the structured answer, as a JSON object
    (stored,) = run["files"]
    assert (stored["name"], stored["content_type"]) == ("receipt.pdf", "application/pdf")
    events = run_events(database_url, "agent_vision_desk", run["id"])
    started = next(e for e in events if e.type == "TaskStarted")
    assert [(a["file_id"], a["pages"]) for a in started.data["attachments"]] == [
        (stored["id"], 1)]
    receipt = json.loads(toren_cli("jobs", "receipt", run["id"], "--json", env=env).stdout)
    (task,) = receipt["tasks"]
    # the offline model added up with the tool, then answered; shown the PDF at both calls
    assert [t["name"] for t in task["tool_calls"]] == ["add_up"]
    assert [c["image_tokens"] for c in task["model_calls"]] == [1_600, 1_600]
