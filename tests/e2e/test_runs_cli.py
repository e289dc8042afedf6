"""``toren run``, ``toren worker`` and ``toren jobs`` as a user runs them."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import TorenCli, wait_until
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(180)

TOOLS = '''
from toren import tool

@tool(idempotent=True)
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"
'''


def test_run_follows_live_and_prints_output_and_receipt(toren_cli: TorenCli, database_url: str,
                                                        tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew", tools_py=TOOLS)
    done = toren_cli("run", "crew", "postgres", "--dir", str(crew),
                     env={"DATABASE_URL": database_url})
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "▶ task main started" in out
    assert "step 1" in out and "→ calls lookup" in out
    assert "↳ lookup facts about postgres" in out
    assert "Here is what I found for 'postgres'" in out
    assert "completed (end_turn)" in out and "the model gave its final answer" in out


def test_run_json_then_jobs_list_show_receipt(toren_cli: TorenCli, database_url: str,
                                              tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew", tools_py=TOOLS)
    env = {"DATABASE_URL": database_url}
    done = toren_cli("run", "crew", "postgres", "--dir", str(crew), "--json", env=env)
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    assert "facts about postgres" in run["output"]

    listed = json.loads(toren_cli("jobs", "list", "--json", env=env).stdout)
    assert [r["id"] for r in listed["runs"]] == [run["id"]]
    assert json.loads(toren_cli("jobs", "list", "--status", "failed", "--json",
                                env=env).stdout)["runs"] == []
    bad = toren_cli("jobs", "list", "--status", "nope", env=env)
    assert bad.returncode == 1 and "unknown status 'nope'" in bad.stderr

    shown = json.loads(toren_cli("jobs", "show", run["id"], "--json", env=env).stdout)
    assert shown["status"] == "completed" and shown["totals"]["model_calls"] == 2
    assert shown["tasks"][0]["steps"] == 2
    text = toren_cli("jobs", "show", run["id"], env=env).stdout
    assert "task main" in text and "step 1" in text and "lookup ok" in text
    prompted = toren_cli("jobs", "show", run["id"], "--prompts", env=env).stdout
    assert "system prompt of task main" in prompted and "You are a test agent." in prompted
    digest = shown["tasks"][0]["prompt_sha256"]
    assert json.loads(toren_cli("jobs", "show", run["id"], "--prompts", "--json",
                                env=env).stdout)["prompts"] == {digest: "You are a test agent.\n"}

    receipt = json.loads(toren_cli("jobs", "receipt", run["id"], "--json", env=env).stdout)
    (task,) = receipt["tasks"]
    assert [c["step"] for c in task["model_calls"]] == [1, 2]
    assert task["tool_calls"][0]["idempotency_key"] == f"toren:{run['id']}:main:1:0"
    assert receipt["why"] == "the model gave its final answer"

    missing = toren_cli("jobs", "show", "00000000-0000-0000-0000-000000000000", env=env)
    assert missing.returncode == 1 and "no run" in missing.stderr
    garbage = toren_cli("jobs", "show", "not-a-uuid", "--json", env=env)
    assert garbage.returncode == 1
    assert json.loads(garbage.stdout)["error"]["code"] == "run_not_found"


def test_no_follow_enqueues_and_a_worker_executes_it(toren_cli: TorenCli, start_toren,
                                                     database_url: str, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew", tools_py=TOOLS)
    env = {"DATABASE_URL": database_url}
    queued = toren_cli("run", "crew", "x", "--no-follow", "--dir", str(crew), env=env)
    assert queued.returncode == 0, queued.stderr
    run_id = queued.stdout.strip()
    shown = json.loads(toren_cli("jobs", "show", run_id, "--json", env=env).stdout)
    assert shown["status"] == "queued"

    worker = start_toren("worker", "--dir", str(crew), "--json", env=env)
    assert worker.next_json()["event"] == "ready"
    assert wait_until(lambda: json.loads(toren_cli("jobs", "show", run_id, "--json",
                                                   env=env).stdout)["status"] == "completed", 60)
    assert worker.stop(signal.SIGTERM) == 0


def test_idempotency_key_on_the_command_line(toren_cli: TorenCli, database_url: str,
                                             tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    env = {"DATABASE_URL": database_url}
    first = toren_cli("run", "crew", "x", "--no-follow", "--idempotency-key", "k1",
                      "--dir", str(crew), env=env)
    second = toren_cli("run", "crew", "x", "--no-follow", "--idempotency-key", "k1",
                       "--dir", str(crew), env=env)
    assert first.stdout == second.stdout and first.stdout.strip()


def test_cancel_from_the_cli_and_while_retrying_shows_the_error(
        toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    env = {"DATABASE_URL": database_url}
    run_id = toren_cli("run", "crew", "x", "--no-follow", "--dir", str(crew),
                       env=env).stdout.strip()
    cancelled = toren_cli("jobs", "cancel", run_id, "--json", env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["status"] == "cancelled"
    shown = json.loads(toren_cli("jobs", "show", run_id, "--json", env=env).stdout)
    assert (shown["status"], shown["stop_reason"]) == ("cancelled", "cancelled")


def test_sigterm_lets_a_worker_finish_the_step_in_hand(toren_cli: TorenCli, start_toren,
                                                       database_url: str, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew", tools_py=TOOLS)
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "1.5"}
    run_id = toren_cli("run", "crew", "x", "--no-follow", "--dir", str(crew),
                       env=env).stdout.strip()
    worker = start_toren("worker", "--dir", str(crew), "--json", env=env)
    worker.next_json()
    time.sleep(0.7)  # the first model call is in flight
    started = time.monotonic()
    assert worker.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 15  # within the default 10 s grace
    receipt = json.loads(toren_cli("jobs", "receipt", run_id, "--json", env=env).stdout)
    # the call in flight was finished and recorded, not abandoned and paid again later
    assert receipt["totals"]["model_calls"] >= 1
    assert receipt["run"]["status"] in ("running", "completed")
    # and the next worker picks the run up at once: the stopping worker gave its lease back
    worker = start_toren("worker", "--dir", str(crew), "--json", env=env)
    worker.next_json()
    assert wait_until(lambda: json.loads(toren_cli("jobs", "show", run_id, "--json",
                                                   env=env).stdout)["status"] == "completed", 30)
    worker.stop()
    receipt = json.loads(toren_cli("jobs", "receipt", run_id, "--json", env=env).stdout)
    assert receipt["totals"]["repeated_calls"] == 0
