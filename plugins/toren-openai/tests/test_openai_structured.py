"""Structured output (``output:``) through the real SDK against the fake: ``response_format``
``json_schema`` (strict when the schema allows it), the answer validated by Toren, a repair
turn for prose, and a worker SIGKILLed between the repair call and its check."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fake_openai import STRUCTURED_ANSWER, Fail, completion, repair_once
from toren_openai import wire

from toren.core.catalog import validate_event
from toren.plugin import Message, ModelRequest
from toren.testing import OutputProcess, wait_for, write_agent_dir

PLAN = {"type": "object", "required": ["topics"], "additionalProperties": False,
        "properties": {"topics": {"type": "array", "items": {"type": "string"}}}}
LOOSE = {"type": "object", "required": ["topics"],
         "properties": {"topics": {"type": "array", "items": {"type": "string"}},
                        "note": {"type": "string"}}}


def test_the_schema_goes_as_response_format_strict_when_strict_mode_takes_it() -> None:
    request = ModelRequest(model="openai/gpt-4o-mini", system="", output_schema=PLAN,
                           messages=(Message(role="user", text="plan"),))
    assert wire.chat_request(request, "gpt-4o-mini")["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "output", "schema": PLAN,
                                               "strict": True}}
    loose = ModelRequest(model="openai/gpt-4o-mini", system="", output_schema=LOOSE,
                         messages=(Message(role="user", text="plan"),))
    assert wire.chat_request(loose, "gpt-4o-mini")["response_format"]["json_schema"][
        "strict"] is False
    assert wire.strict_problem(LOOSE) == "$: additionalProperties must be false"
    assert wire.strict_problem({**PLAN, "properties": {"topics": {"oneOf": []}}}) == \
        "$.properties.topics: oneOf is not supported in strict mode"
    plain = ModelRequest(model="openai/gpt-4o-mini", system="",
                         messages=(Message(role="user", text="plan"),))
    assert "response_format" not in wire.chat_request(plain, "gpt-4o-mini")


def agent(parent: Path, url: str, schema: dict[str, Any], name: str = "planner") -> Path:
    return write_agent_dir(parent, name, model="openai/gpt-4o-mini", baseUrl=url,
                           output=schema)


async def test_prose_gets_a_repair_turn_and_the_json_answer_is_the_output(
        make_fake: Any, start_runtime: Any, tmp_path: Path) -> None:
    fake = await make_fake(responder=repair_once)
    runtime = await start_runtime(agent(tmp_path, fake.url, PLAN))
    run_id = await runtime.start_run("planner", "plan durable execution")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed", record.error
    assert record.output == STRUCTURED_ANSWER
    events = await runtime.events(run_id)
    for event in events:
        validate_event(event.stream, event.type, event.data)
    assert [e.data["attempt"] for e in events if e.type == "OutputRejected"] == [1]
    assert fake.chat_requests == 2
    assert all(body["response_format"]["json_schema"] == {"name": "output", "schema": PLAN,
                                                          "strict": True}
               for body in fake.requests)
    repair = fake.requests[1]["messages"][-1]
    assert repair["role"] == "user" and "is not JSON" in repair["content"]


async def test_a_loose_schema_is_sent_unstrict_and_a_server_without_it_is_asked_without(
        make_fake: Any, start_runtime: Any, tmp_path: Path) -> None:
    unsupported = Fail(400, "Unsupported parameter: 'response_format' is not supported with "
                            "this model.", code="unsupported_parameter", param="response_format")
    fake = await make_fake([unsupported, completion('{"topics": ["a"], "note": "n"}')])
    runtime = await start_runtime(agent(tmp_path, fake.url, LOOSE))
    run_id = await runtime.start_run("planner", "plan")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert (record.status, record.output) == ("completed", {"topics": ["a"], "note": "n"})
    first, second = fake.requests
    assert first["response_format"]["json_schema"]["strict"] is False
    assert "response_format" not in second  # asked again at once, without it


@pytest.fixture
def processes() -> Iterator[list[OutputProcess]]:
    started: list[OutputProcess] = []
    yield started
    for process in reversed(started):
        process.stop()


@pytest.mark.slow
def test_a_worker_killed_between_the_repair_call_and_its_check_does_not_call_again(
        database_url: str, tmp_path: Path, processes: list[OutputProcess]) -> None:
    toren = Path(sys.executable).parent / "toren"
    env = {key: value for key, value in os.environ.items()
           if key != "DATABASE_URL" and not key.startswith(("TOREN_", "OPENAI_"))}
    env |= {"DATABASE_URL": database_url, "OPENAI_API_KEY": "x",
            "TOREN_LOAD_PLUGINS": "toren-openai", "TOREN_LEASE_TTL": "1",
            "TOREN_POLL_INTERVAL": "0.2", "TOREN_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    fake = OutputProcess([sys.executable, str(Path(__file__).parent / "fake_openai.py"),
                          "--structured"], env=env, stderr_path=tmp_path / "fake.err")
    processes.append(fake)
    url = fake.next_json(timeout=30)["url"]
    directory = agent(tmp_path, url, PLAN)
    created = subprocess.run([str(toren), "run", "planner", "plan", "--no-follow", "--json",
                              "--dir", str(directory)], env=env, capture_output=True, text=True,
                             timeout=60, check=False)
    assert created.returncode == 0, created.stderr
    run_id = json.loads(created.stdout)["id"]
    # the second check is the repair call's: the worker dies once that answer is appended
    crashing = env | {"TOREN_CRASH_AT": "before_output_check@2",
                      "TOREN_CRASH_ONCE": str(tmp_path / "crashed")}
    doomed = OutputProcess([str(toren), "worker", "--dir", str(directory), "--json"],
                           env=crashing, stderr_path=tmp_path / "doomed.err")
    processes.append(doomed)
    assert doomed.proc.wait(timeout=60) == -signal.SIGKILL, doomed.stderr
    worker = OutputProcess([str(toren), "worker", "--dir", str(directory), "--json"],
                           env=crashing, stderr_path=tmp_path / "worker.err")
    processes.append(worker)

    def row() -> tuple[str, Any]:
        with psycopg.connect(database_url) as conn:
            found = conn.execute("SELECT status, output FROM agent_planner.runs WHERE id = %s",
                                 [run_id]).fetchone()
        assert found is not None
        return found[0], found[1]

    assert wait_for(lambda: row()[0] in ("completed", "failed"), 60), worker.stderr
    assert row() == ("completed", STRUCTURED_ANSWER)
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT stream, type, data FROM agent_planner.events WHERE "
                            "run_id = %s ORDER BY stream, seq", [run_id]).fetchall()
    for stream, event_type, data in rows:
        validate_event(stream, event_type, data)
    calls = [data for _, kind, data in rows if kind == "ModelCallCompleted"]
    assert [(c["step"], c["repeated"]) for c in calls] == [(1, False), (2, False)]
    assert [kind for _, kind, _ in rows].count("OutputRejected") == 1
    finished = next(data for _, kind, data in rows if kind == "TaskFinished")
    assert finished["epoch"] > calls[1]["epoch"]  # checked by the second worker
    with urllib.request.urlopen(url.removesuffix("/v1") + "/_fake/stats", timeout=10) as answer:
        stats = json.load(answer)
    assert stats["counts"]["/v1/chat/completions"] == 2  # the repair call was not made again
