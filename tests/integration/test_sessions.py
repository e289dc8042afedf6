"""Sessions against real Postgres: turns, the turn token (409 semantics), close, limits,
restarts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.durable import check_log, types
from toren.core.decisions import MAX_JSON_DEPTH
from toren.errors import ConfigError, SessionBusy, SessionEnded, SessionNotFound, UnstorableValue
from toren.testing import ScriptedModel, write_agent_dir

TOOLS = '''
from toren import tool

@tool(idempotent=True)
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"
'''


def chat_dir(tmp_path: Path, name: str = "chat", **fields: object) -> Path:
    return write_agent_dir(tmp_path, name, tools_py=TOOLS, **fields)


async def test_a_session_takes_turns_and_keeps_the_whole_transcript(make_runtime,
                                                                     tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[chat_dir(tmp_path)])
    session_id = await runtime.start_session("chat")
    opened = await runtime.get_session(session_id)
    assert opened["status"] == "awaiting_input" and opened["transcript"] == []
    assert (await runtime.get_run(session_id)).kind == "session"

    assert await runtime.send_message(session_id, "postgres") == 1
    first = await runtime.wait_for_turn(session_id, timeout_s=30)
    assert first["status"] == "awaiting_input" and first["turns"] == 1
    roles = [(e["role"], e["turn"]) for e in first["transcript"]]
    assert roles == [("user", 1), ("assistant", 1), ("tool", 1), ("assistant", 1)]
    assert first["transcript"][2]["output"] == "facts about postgres"

    assert await runtime.send_message(session_id, "and sqlite?") == 2
    second = await runtime.wait_for_turn(session_id, timeout_s=30)
    assert second["turns"] == 2 and second["turns_ended"] == 2
    # the model saw the whole conversation: turn 2's reply is about turn 2's input
    assert "sqlite" in second["transcript"][-1]["text"]
    assert [e["text"] for e in second["transcript"] if e["role"] == "user"] == [
        "postgres", "and sqlite?"]
    record = await runtime.get_run(session_id)
    assert record.status == "awaiting_input" and record.output == second["transcript"][-1]["text"]

    await runtime.close_session(session_id)
    closed = await runtime.wait_for_turn(session_id, timeout_s=30)
    assert closed["status"] == "completed" and closed["stop_reason"] == "end_turn"
    events = await runtime.events(session_id)
    check_log(events)
    assert types(events, "run") == ["RunCreated", "TaskScheduled", "AgentVersionPinned",
                                    "TaskAbsorbed", "RunFinished"]
    task = types(events)
    assert task.count("UserMessage") == 2 and task.count("TurnEnded") == 2
    assert task[-2:] == ["CloseRequested", "TaskFinished"]
    assert (await runtime.get_run(session_id)).output == second["transcript"][-1]["text"]
    assert (await runtime.receipt(session_id))["why"] == "the session was closed"
    with pytest.raises(SessionEnded, match="has ended"):
        await runtime.send_message(session_id, "hello?")


async def test_a_message_mid_turn_is_refused_and_nothing_is_written(make_runtime,
                                                                    tmp_path: Path) -> None:
    slow = ScriptedModel(delay=0.6)
    runtime = await make_runtime(dirs=[chat_dir(tmp_path, model="test/slow")],
                                 models={"slow": slow})
    session_id = await runtime.start_session("chat")
    await runtime.send_message(session_id, "first")
    before = len(await runtime.events(session_id))
    with pytest.raises(SessionBusy, match="awaiting_input"):
        await runtime.send_message(session_id, "too soon")
    with pytest.raises(SessionBusy):
        await runtime.close_session(session_id)
    assert not [e for e in await runtime.events(session_id)
                if e.type == "UserMessage" and e.data["text"] == "too soon"]
    assert len(await runtime.events(session_id)) >= before
    done = await runtime.wait_for_turn(session_id, timeout_s=30)
    assert [e["text"] for e in done["transcript"] if e["role"] == "user"] == ["first"]
    assert await runtime.send_message(session_id, "now") == 2


async def test_concurrent_senders_get_exactly_one_turn(make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[chat_dir(tmp_path)], workers=False)
    session_id = await runtime.start_session("chat")
    results = await asyncio.gather(*(runtime.send_message(session_id, f"message {i}")
                                     for i in range(8)), return_exceptions=True)
    accepted = [r for r in results if isinstance(r, int)]
    assert accepted == [1]
    assert all(isinstance(r, SessionBusy) for r in results if not isinstance(r, int))
    events = await runtime.events(session_id)
    check_log(events)
    assert types(events) == ["UserMessage"]


async def test_max_steps_ends_the_turn_not_the_session(make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[chat_dir(tmp_path, limits={"maxSteps": 1})])
    session_id = await runtime.start_session("chat")
    await runtime.send_message(session_id, "postgres")
    first = await runtime.wait_for_turn(session_id, timeout_s=30)
    assert first["status"] == "awaiting_input"
    ended = [e for e in await runtime.events(session_id) if e.type == "TurnEnded"]
    assert ended[-1].data["stop_reason"] == "max_steps" and ended[-1].data["steps"] == 1
    # the next turn gets its own max_steps: it finishes the tool call and answers
    await runtime.send_message(session_id, "go on")
    second = await runtime.wait_for_turn(session_id, timeout_s=30)
    assert second["status"] == "awaiting_input" and second["turns"] == 2


async def test_a_session_survives_a_restart_of_every_process(make_runtime,
                                                             tmp_path: Path) -> None:
    directory = chat_dir(tmp_path, model="test/logged")
    calls = tmp_path / "calls.jsonl"
    models = {"logged": ScriptedModel(call_log=calls)}
    # checkpoints every few events: the resumed task starts from one, mid-conversation
    first = await make_runtime(dirs=[directory], checkpoint_every=3, models=models)
    session_id = await first.start_session("chat")
    await first.send_message(session_id, "postgres")
    before = await first.wait_for_turn(session_id, timeout_s=30)
    await first.stop()
    second = await make_runtime(dirs=[directory], checkpoint_every=3, models=models)
    after = await second.get_session(session_id)
    assert after["transcript"] == before["transcript"]
    await second.send_message(session_id, "again")
    again = await second.wait_for_turn(session_id, timeout_s=30)
    assert again["turns"] == 2 and again["transcript"][:4] == before["transcript"]
    events = await second.events(session_id)
    check_log(events)
    assert "TaskCheckpoint" in types(events)
    # turn 1: 1 message, then 3 (+ call and result); on turn 2 the model was sent the whole
    # conversation: turn 1's 4 messages and the new one, then + call and result
    sent = [json.loads(line)["messages"] for line in calls.read_text().splitlines()]
    assert sent == [1, 3, 5, 7]


async def test_cancel_ends_a_session_and_bad_requests_are_refused(make_runtime,
                                                                  tmp_path: Path) -> None:
    flow = chat_dir(tmp_path, "flow")
    (flow / "workflow.py").write_text("async def workflow(ctx):\n    return 'done'\n")
    runtime = await make_runtime(dirs=[chat_dir(tmp_path), flow])
    with pytest.raises(ConfigError, match="workflow"):
        await runtime.start_session("flow")
    with pytest.raises(ConfigError, match="not served"):
        await runtime.start_session("ghost")
    run_id = await runtime.start_run("chat", "a plain run")
    with pytest.raises(SessionNotFound):
        await runtime.send_message(run_id, "hi")
    with pytest.raises(SessionNotFound):
        await runtime.get_session("not-a-uuid")
    session_id = await runtime.start_session("chat", idempotency_key="conv-1")
    assert await runtime.start_session("chat", idempotency_key="conv-1") == session_id
    with pytest.raises(ConfigError, match="non-empty"):
        await runtime.send_message(session_id, "   ")
    await runtime.cancel_run(session_id)
    with pytest.raises(SessionEnded, match="cancelled"):
        await runtime.send_message(session_id, "hi")


async def test_a_session_reads_back_like_a_run(make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[chat_dir(tmp_path)])
    session_id = await runtime.start_session("chat")
    await runtime.send_message(session_id, "postgres")
    await runtime.wait_for_turn(session_id, timeout_s=30)
    receipt = await runtime.receipt(session_id)
    assert receipt["status"] == "awaiting_input"
    assert receipt["totals"]["model_calls"] == 2 and receipt["totals"]["tool_calls"] == 1
    assert receipt["why"] == "the session is waiting for the user's next message"
    listed = await runtime.list_runs(kind="session")
    assert [run.id for run in listed] == [session_id]
    assert await runtime.list_runs(kind="run") == []


async def test_a_message_resent_with_its_idempotency_key_is_not_taken_twice(
        make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[chat_dir(tmp_path)])
    session_id = await runtime.start_session("chat")
    assert await runtime.send_message(session_id, "postgres", idempotency_key="m-1") == 1
    # resent mid-turn (the answer was lost): the same turn, not 409
    assert await runtime.send_message(session_id, "postgres", idempotency_key="m-1") == 1
    await runtime.wait_for_turn(session_id, timeout_s=30)
    # resent after the turn: still the same turn, and no second turn starts
    assert await runtime.send_message(session_id, "postgres", idempotency_key="m-1") == 1
    assert (await runtime.get_run(session_id)).status == "awaiting_input"
    assert await runtime.send_message(session_id, "sqlite", idempotency_key="m-2") == 2
    done = await runtime.wait_for_turn(session_id, timeout_s=30)
    assert [e["text"] for e in done["transcript"] if e["role"] == "user"] == [
        "postgres", "sqlite"]
    check_log(await runtime.events(session_id))


async def test_what_postgres_cannot_store_is_refused_before_anything_is_written(
        make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[chat_dir(tmp_path)], workers=False)
    with pytest.raises(UnstorableValue, match="the input cannot be stored: strings may not"):
        await runtime.start_run("chat", {"text": "a\x00b"})
    with pytest.raises(UnstorableValue, match="idempotency key"):
        await runtime.start_run("chat", "x", idempotency_key="k\x00")
    with pytest.raises(UnstorableValue, match="idempotency key"):
        await runtime.start_session("chat", idempotency_key="\ud800")
    session_id = await runtime.start_session("chat")
    with pytest.raises(UnstorableValue, match="message"):
        await runtime.send_message(session_id, "hi \x00")
    # nesting beyond the limit: refused here, not by the store's JSON encoder (a 500 over HTTP)
    with pytest.raises(UnstorableValue, match=f"nested at most {MAX_JSON_DEPTH} levels"):
        await runtime.start_run("chat", nested(MAX_JSON_DEPTH + 1))
    with pytest.raises(UnstorableValue, match="nested at most"):
        await runtime.start_run("chat", nested(900))
    assert [run.id for run in await runtime.list_runs()] == [session_id]
    assert not [e for e in await runtime.events(session_id) if e.type == "UserMessage"]
    # the deepest value allowed is stored and read back whole
    deepest = await runtime.start_run("chat", nested(MAX_JSON_DEPTH))
    assert (await runtime.get_run(deepest)).input == nested(MAX_JSON_DEPTH)


def nested(levels: int) -> object:
    """``levels`` arrays and objects, each inside the one before."""
    value: object = "core"
    for level in range(levels):
        value = [value] if level % 2 else {"k": value}
    return value
