"""A structured answer (``output:``) as a user reads it: ``toren run`` (text and ``--json``),
``toren jobs show``, ``GET /runs/{id}`` and the client give the JSON object, not its text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TorenCli
from tests.e2e.test_http_api import conforms
from toren.client import SyncTorenClient
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
PLAN = {"type": "object", "required": ["topics"],
        "properties": {"topics": {"type": "array", "items": {"type": "string"}}}}
TOOLS = '''
from toren import tool

@tool(idempotent=True)
def suggest(question: str) -> dict:
    """Suggest topics for a question."""
    return {"topics": ["postgres", question]}
'''
EXPECTED = {"topics": ["postgres", "sql"]}


def planner(tmp_path: Path) -> Path:
    parent = tmp_path / "crews"
    write_agent_dir(parent, "planner", tools_py=TOOLS, output=PLAN)
    return parent


def test_toren_run_and_jobs_show_print_the_object(toren_cli: TorenCli, database_url: str,
                                                  tmp_path: Path) -> None:
    parent = planner(tmp_path)
    env = {"DATABASE_URL": database_url}
    done = toren_cli("run", "planner", "sql", "--dir", str(parent), "--json", env=env)
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert (run["status"], run["output"]) == ("completed", EXPECTED)
    shown = json.loads(toren_cli("jobs", "show", run["id"], "--json", env=env).stdout)
    assert shown["output"] == EXPECTED
    text = toren_cli("run", "planner", "sql", "--dir", str(parent), env=env).stdout
    assert json.dumps(EXPECTED, indent=2) in text  # indented JSON, not a Python dict
    assert json.dumps(EXPECTED, indent=2) in toren_cli("jobs", "show", run["id"],
                                                       env=env).stdout


def test_the_http_api_and_the_client_return_the_object(database_url: str, start_toren,
                                                       tmp_path: Path) -> None:
    dev = start_toren("dev", "--dir", str(planner(tmp_path)), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url})
    client = SyncTorenClient(str(dev.next_json()["url"]))
    created = client.create_run("planner", "sql")
    run = client.wait_for_run(created["id"], timeout_s=30)
    conforms("RunDetail", run)
    assert (run["status"], run["output"]) == ("completed", EXPECTED)
    events = client.events(created["id"])["events"]
    finished = next(e for e in events if e["type"] == "RunFinished")
    assert finished["data"]["output"] == EXPECTED
    agent = next(a for a in client.agents() if a["name"] == "planner")
    conforms("Agent", agent)
    assert agent["output"] == {"source": "agent.yaml:output", "schema": PLAN}
