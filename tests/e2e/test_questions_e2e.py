"""ask_user end to end with real processes: the example question-desk answered with
`toren jobs answer` while a worker is SIGKILLed between reading the answer and recording it
(the answer is recorded once, the model is not asked again); and `toren chat`, where the next
line answers the agent's question."""

from __future__ import annotations

import getpass
import json
import shutil
from pathlib import Path

import pytest

from tests.chaos.helpers import create_run, run_events, run_row, start_worker
from tests.conftest import wait_until
from tests.durable import check_log

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
EXAMPLE = Path(__file__).parents[2] / "contrib" / "examples" / "question-desk"
SCHEMA = "agent_question_desk"


def desk(tmp_path: Path) -> Path:
    directory = tmp_path / "crews" / "question-desk"
    shutil.copytree(EXAMPLE, directory)
    return directory


def test_sigkill_between_the_answer_and_its_record_answers_once(
        database_url: str, start_toren, toren_cli, tmp_path: Path) -> None:
    directory = desk(tmp_path)
    calls = tmp_path / "model-calls.jsonl"
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_CRASH_AT": "after_question_answer",
           "TOREN_CRASH_ONCE": str(tmp_path / "crashed"), "TOREN_SCRIPTED_CALL_LOG": str(calls)}
    run_id = create_run(toren_cli, directory, "question-desk", "Which colour for the shed?", env)
    first = start_worker(start_toren, directory, env)
    assert wait_until(lambda: run_row(database_url, SCHEMA, run_id)[0] == "awaiting_input", 60)

    shown = toren_cli("jobs", "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    said = " ".join(shown.stdout.split())
    assert "The agent asks (question" in said and "Which colour for the shed?" in said
    [question] = json.loads(toren_cli("jobs", "show", run_id, "--json", env=env).stdout)[
        "pending_questions"]
    assert f"toren jobs answer {run_id} {question['id'][:8]} TEXT" in said

    for args, words in ((("nope", "x"), "no question of run"),
                        ((question["id"], ""), "an answer is non-empty text")):
        refused = toren_cli("jobs", "answer", run_id, *args, env=env)
        assert refused.returncode != 0 and words in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
    done = toren_cli("jobs", "answer", run_id[:8], question["id"][:8], "blue", "--json",
                     env=env)
    assert done.returncode == 0, done.stderr
    answered = json.loads(done.stdout)
    assert (answered["answer"], answered["answered_by"]) == ("blue", f"cli:{getpass.getuser()}")
    # the worker takes the answer up and is killed before it records it
    assert wait_until(lambda: first.proc.poll() is not None, 60), "the crash point was missed"
    assert (tmp_path / "crashed").exists() and first.proc.returncode == -9
    again = toren_cli("jobs", "answer", run_id, question["id"], "red", env=env)
    assert again.returncode != 0 and "already settled: answered" in again.stderr

    start_worker(start_toren, directory, env)
    assert wait_until(lambda: run_row(database_url, SCHEMA, run_id)[0] == "completed", 60)
    _status, output, _ = run_row(database_url, SCHEMA, run_id)
    assert "blue" in output and "red" not in output
    events = run_events(database_url, SCHEMA, run_id)
    check_log(events)
    kinds = [e.type for e in events]
    assert kinds.count("QuestionAsked") == kinds.count("QuestionAnswered") == 1
    # asked once, answered once: two model calls in all, none repeated after the crash
    assert len(calls.read_text().splitlines()) == 2
    assert not any(e.data.get("repeated") for e in events if e.type == "ModelCallCompleted")


def test_chat_shows_the_question_and_the_next_line_answers_it(toren_cli, database_url: str,
                                                              tmp_path: Path) -> None:
    directory = desk(tmp_path)
    done = toren_cli("chat", "question-desk", "--dir", str(directory),
                     env={"DATABASE_URL": database_url},
                     input="Which colour for the shed?\nblue\n", timeout=180)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "agent asks> Which colour for the shed?" in said
    assert "ask_user: blue" in said  # the scripted model's answer quotes the tool's result
    assert said.count("you>") >= 3  # the question, the answer, then the next turn's prompt


async def test_mcp_lists_and_answers_questions_and_session_send_answers(
        start_toren, database_url: str, tmp_path: Path) -> None:
    import asyncio

    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from tests.e2e.test_mcp import WITH_MCP, data, error_text

    desk(tmp_path)
    dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, **WITH_MCP})
    url = str(dev.next_json()["url"])
    async with streamable_http_client(url + "/mcp", http_client=httpx2.AsyncClient(
            timeout=60)) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        tools = {tool.name for tool in (await mcp.list_tools()).tools}
        assert {"questions_list", "answer_question"} <= tools
        run = data(await mcp.call_tool("start_run", {"agent": "question-desk",
                                                     "input": "Which colour?"}))
        questions: list[dict[str, str]] = []
        for _ in range(600):
            questions = data(await mcp.call_tool("questions_list",
                                                 {"run_id": run["id"]}))["questions"]
            if questions:
                break
            await asyncio.sleep(0.05)
        [question] = questions
        answered = data(await mcp.call_tool("answer_question", {
            "run_id": run["id"], "question_id": question["id"], "answer": "blue"}))
        assert answered["answered_by"] == "anonymous"
        again = await mcp.call_tool("answer_question", {
            "run_id": run["id"], "question_id": question["id"], "answer": "red"})
        assert "question_answered: question" in error_text(again)
        done = data(await mcp.call_tool("wait_for_run", {"run_id": run["id"],
                                                         "timeout_s": 60}))
        assert done["status"] == "completed" and "blue" in done["output"]

        # in a session, the next message answers (session_send waits for the turn's end)
        session = data(await mcp.call_tool("session_start", {"agent": "question-desk"}))
        asked = data(await mcp.call_tool("session_send", {
            "session_id": session["id"], "text": "Which size?", "wait_s": 60}))
        assert [q["question"] for q in asked["pending_questions"]] == ["Which size?"]
        replied = data(await mcp.call_tool("session_send", {
            "session_id": session["id"], "text": "large", "wait_s": 60}))
        assert replied["pending_questions"] == []
        assert "ask_user: large" in replied["transcript"][-1]["text"]
