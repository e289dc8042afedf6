"""ask_user against real Postgres: the agent asks, the task parks with no worker, lease or
message as ``awaiting_input``; the first answer wins and wakes it, and the answer is the tool's
result; a session's next message answers instead of starting a turn; expiry tells the model
that nobody answered."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.durable import check_log, types
from tests.integration.test_approvals import live_leases, queued_messages, wait_status
from toren.core.questions import question_id
from toren.errors import InvalidAnswer, QuestionAlreadyAnswered, QuestionNotFound
from toren.seams.model import ModelRequest, ModelResponse, ToolCall
from toren.testing import ScriptedModel, write_agent_dir


def asker(**arguments: object):
    """A script that asks once (with ``arguments``), then says what the answer was."""
    def script(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role == "tool":
            return ModelResponse(text="Got: " + last.text)
        if last.text == "no question":
            return ModelResponse(text="No question needed.")
        return ModelResponse(text="Let me ask.", stop_reason="tool_use", tool_calls=(
            ToolCall(id="q1", name="ask_user",
                     arguments={"question": "Which colour?"} | arguments),))
    return script


async def start(make_runtime, tmp_path: Path, **arguments: object):
    model = ScriptedModel(script=asker(**arguments))
    directory = write_agent_dir(tmp_path, "painter", model="test/painter", askUser=True)
    runtime = await make_runtime(dirs=[directory], models={"painter": model})
    return runtime, model


async def test_a_run_parks_for_its_question_and_the_first_answer_is_the_result(
        make_runtime, tmp_path: Path) -> None:
    runtime, model = await start(make_runtime, tmp_path, choices=["red", "blue"])
    run_id = await runtime.start_run("painter", "paint the shed")
    await wait_status(runtime, run_id, "awaiting_input")
    events = await runtime.events(run_id)
    assert types(events) == ["TaskStarted", "ModelCallStarted", "ModelCallCompleted",
                             "ToolCallStarted", "QuestionAsked"]
    assert await queued_messages(runtime, run_id) == 0  # parked: nothing held while it waits
    assert await live_leases(runtime, run_id) == 0
    [question] = await runtime.questions.list(run_id, status="pending")
    asked = next(e for e in events if e.type == "QuestionAsked")
    assert question.id == asked.data["question_id"] == question_id(
        f"toren:{run_id}:main:1:0")
    assert (question.question, question.choices) == ("Which colour?", ("red", "blue"))
    assert [q["id"] for q in await runtime.questions.pending(run_id)] == [question.id]

    with pytest.raises(InvalidAnswer, match="not among the question's choices"):
        await runtime.answer_question(run_id, question.id, "green", answered_by="cli:ann")
    with pytest.raises(QuestionNotFound):
        await runtime.answer_question(run_id, "not-a-uuid", "red", answered_by="cli:ann")
    answered = await runtime.answer_question(run_id, question.id, "2", answered_by="cli:ann")
    assert (answered["status"], answered["answer"], answered["answered_by"]) == (
        "answered", "blue", "cli:ann")
    with pytest.raises(QuestionAlreadyAnswered, match="already settled: answered by cli:ann"):
        await runtime.answer_question(run_id, question.id, "red", answered_by="cli:bob")

    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert (record.status, record.output) == ("completed", "Got: blue")
    assert model.calls == 2  # the model was never asked again
    events = await runtime.events(run_id)
    check_log(events)
    settled = [e.data for e in events if e.type == "QuestionAnswered"]
    assert settled == [{"question_id": question.id, "call_id": "q1", "outcome": "answered",
                        "answered_by": "cli:ann", "answered_at": settled[0]["answered_at"],
                        "answer": "blue", "epoch": settled[0]["epoch"]}]
    assert await runtime.questions.pending(run_id) == []


async def test_racing_answers_one_wins_and_the_task_records_it_once(
        make_runtime, tmp_path: Path) -> None:
    runtime, model = await start(make_runtime, tmp_path)
    run_id = await runtime.start_run("painter", "paint the shed")
    await wait_status(runtime, run_id, "awaiting_input")
    [question] = await runtime.questions.list(run_id)
    results = await asyncio.gather(
        *(runtime.answer_question(run_id, question.id, f"colour {n}", answered_by=f"p{n}")
          for n in range(6)), return_exceptions=True)
    winners = [r for r in results if isinstance(r, dict)]
    assert len(winners) == 1
    assert all(isinstance(r, QuestionAlreadyAnswered) for r in results if r not in winners)
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.output == f"Got: {winners[0]['answer']}"
    events = await runtime.events(run_id)
    check_log(events)
    assert [e.data["answer"] for e in events if e.type == "QuestionAnswered"] == [
        winners[0]["answer"]]
    assert model.calls == 2


async def test_an_expired_question_tells_the_model_nobody_answered(
        make_runtime, tmp_path: Path) -> None:
    runtime, _model = await start(make_runtime, tmp_path, expires_after="0.3s")
    run_id = await runtime.start_run("painter", "paint the shed")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed"
    assert record.output.startswith("Got: Error: nobody answered the question before it "
                                    "expired")
    [question] = await runtime.questions.list(run_id)
    assert (question.status, question.answered_by) == ("expired", "toren")
    with pytest.raises(QuestionAlreadyAnswered, match="expired"):
        await runtime.answer_question(run_id, question.id, "late", answered_by="cli:ann")
    check_log(await runtime.events(run_id))


async def test_a_sessions_next_message_answers_its_question(make_runtime,
                                                              tmp_path: Path) -> None:
    runtime, model = await start(make_runtime, tmp_path)
    session_id = await runtime.sessions.start("painter")
    assert await runtime.send_message(session_id, "paint the shed") == 1
    await wait_status(runtime, session_id, "awaiting_input")
    found = await runtime.sessions.get(session_id)
    [pending] = found["pending_questions"]
    assert pending["question"] == "Which colour?"
    # the message answers the question: the turn goes on, no second UserMessage
    assert await runtime.send_message(session_id, "green, please", idempotency_key="m2") == 1
    found = await runtime.wait_for_turn(session_id, timeout_s=30)
    # sent again (a channel's retry after a crash): known as taken, not a new turn
    assert await runtime.send_message(session_id, "green, please", idempotency_key="m2") == 1
    assert found["status"] == "awaiting_input" and found["pending_questions"] == []
    events = await runtime.events(session_id)
    assert types(events).count("UserMessage") == 1
    assert [e.data["answered_by"] for e in events if e.type == "QuestionAnswered"] == [
        f"session:{session_id}"]
    assert (await runtime.get_run(session_id)).output == "Got: green, please"
    # the next message starts a new turn again
    assert await runtime.send_message(session_id, "no question") == 2
    found = await runtime.wait_for_turn(session_id, timeout_s=30)
    assert (await runtime.get_run(session_id)).output == "No question needed."
    assert model.calls == 3
    check_log(await runtime.events(session_id))


async def test_cancelling_a_run_cancels_its_question(make_runtime, tmp_path: Path) -> None:
    runtime, _model = await start(make_runtime, tmp_path)
    run_id = await runtime.start_run("painter", "paint the shed")
    await wait_status(runtime, run_id, "awaiting_input")
    await runtime.cancel_run(run_id)
    [question] = await runtime.questions.list(run_id)
    assert question.status == "cancelled"
    with pytest.raises(QuestionAlreadyAnswered, match="cancelled"):
        await runtime.answer_question(run_id, question.id, "red", answered_by="cli:ann")


async def test_questions_over_http_and_the_client(make_runtime, tmp_path: Path) -> None:
    from toren.client import TorenAPIError, TorenClient
    from toren.server.app import create_app
    from toren.testing import serve_on_free_port

    runtime, _model = await start(make_runtime, tmp_path, choices=["red", "blue"])
    run_id = await runtime.start_run("painter", "paint the shed")
    await wait_status(runtime, run_id, "awaiting_input")
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=False))
    try:
        async with TorenClient(url) as client:
            [question] = await client.list_questions(run_id, status="pending")
            run = await client.get_run(run_id)
            assert [q["id"] for q in run["pending_questions"]] == [question["id"]]
            with pytest.raises(TorenAPIError) as unlisted:
                await client.answer_question(run_id, question["id"], "green")
            assert (unlisted.value.status, unlisted.value.code) == (422, "invalid_answer")
            answered = await client.answer_question(run_id, question["id"], "Red")
            assert (answered["answer"], answered["answered_by"]) == ("red", "anonymous")
            with pytest.raises(TorenAPIError) as again:
                await client.answer_question(run_id, question["id"], "blue")
            assert (again.value.status, again.value.code) == (409, "question_answered")
            assert again.value.body["question"]["answer"] == "red"
            import aiohttp
            async with aiohttp.ClientSession() as http:
                for body in ({"answer": 3}, {"answer": "red", "extra": 1}, []):
                    async with http.post(f"{url}/runs/{run_id}/questions/{question['id']}"
                                         "/answer", json=body) as bad:
                        assert bad.status == 400, body
                async with http.post(f"{url}/runs/{run_id}/questions/nope/answer",
                                     json={"answer": "red"}) as missing:
                    assert missing.status == 404
                    assert (await missing.json())["error"]["code"] == "question_not_found"
                async with http.get(f"{url}/runs/{run_id}/questions?status=odd") as odd:
                    assert odd.status == 400
    finally:
        await runner.cleanup()
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.output == "Got: red"
