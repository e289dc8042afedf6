"""Questions over HTTP: what a run's agent asked a person (``ask_user``), and the answer.

``GET /runs/{id}/questions`` lists them; ``POST /runs/{id}/questions/{qid}/answer`` with
``{"answer": "..."}`` answers one, once: a second answer is ``409`` with the first, an answer
not among the question's choices ``422``. The answerer is the request's API key (its name);
without keys (local development) it is ``anonymous``.
"""

from __future__ import annotations

from aiohttp import web

from toren.core.questions import MAX_ANSWER_CHARS
from toren.errors import QuestionAlreadyAnswered
from toren.server.auth import request_actor
from toren.server.context import RUNTIME
from toren.server.errors import error_body, json_error
from toren.server.runs import read_json_object, served_run


def routes(app: web.Application) -> None:
    app.router.add_get("/runs/{run_id}/questions", list_questions)
    app.router.add_post("/runs/{run_id}/questions/{question_id}/answer", answer_question)


async def list_questions(request: web.Request) -> web.Response:
    """The run's questions, oldest first (``?status=pending``: the open ones)."""
    record = await served_run(request)
    status = request.query.get("status")
    found = await request.app[RUNTIME].questions.list(record.id, status=status)
    return web.json_response({"questions": [question.to_json() for question in found]})


async def answer_question(request: web.Request) -> web.Response:
    """``{"answer": "..."}`` answers; 409 with the first answer if it was answered."""
    runtime = request.app[RUNTIME]
    record = await served_run(request)
    body = await read_json_object(request)
    unknown = set(body) - {"answer"}
    if unknown:
        return json_error(400, "invalid_body", f"unknown field(s): {', '.join(sorted(unknown))};"
                                               ' the body is {"answer": "..."}')
    answer = body.get("answer")
    if not isinstance(answer, str):
        return json_error(400, "invalid_body", "'answer' must be a string: the answer's text")
    if len(answer) > MAX_ANSWER_CHARS:
        return json_error(422, "invalid_answer",
                          f"an answer may be at most {MAX_ANSWER_CHARS} characters")
    try:
        answered = await runtime.questions.answer(
            record.id, request.match_info["question_id"], answer,
            answered_by=request_actor(request).label)
    except QuestionAlreadyAnswered as exc:
        return web.json_response(error_body(exc.code, exc.message) | {"question": exc.question},
                                 status=409)
    return web.json_response(answered.to_json())
