"""Questions (``ask_user``): ``/runs/{id}/questions``, ``toren jobs answer``, the MCP tool, the
console's run page and a session's next message (``SessionsService.send``) call this service."""

from __future__ import annotations

import builtins
from collections.abc import Collection
from typing import Any

from toren.core.decisions import unstorable
from toren.core.questions import (
    ANSWERED_BY_TOREN,
    MAX_ANSWER_CHARS,
    QUESTION_STATUSES,
    QuestionRecord,
    match_choice,
)
from toren.errors import ConfigError, InvalidAnswer, QuestionAlreadyAnswered, QuestionNotFound
from toren.seams.store.questions import QuestionStore

#: Most questions one listing returns.
MAX_QUESTIONS_PAGE = 200


class QuestionsService:
    """List, read and answer what agents ask a person, limited to the served ``agents`` (a
    runtime serving none, as the CLI uses, sees every agent's). ``runtime.questions``; needs
    the store open."""

    def __init__(self, store: QuestionStore, agents: Collection[str]) -> None:
        self._store = store
        self._agents = list(agents)

    def _scope(self) -> builtins.list[str] | None:
        return self._agents or None

    async def list(self, run_id: str, *, status: str | None = None
                   ) -> builtins.list[QuestionRecord]:
        """The run's questions, oldest first (``status="pending"``: the open ones).
        ``ConfigError`` for an unknown status."""
        if status is not None and status not in QUESTION_STATUSES:
            raise ConfigError(f"unknown question status {status!r}; one of "
                              f"{', '.join(QUESTION_STATUSES)}")
        if unstorable(run_id):
            return []
        return await self._store.list_questions(agents=self._scope(), run_id=run_id,
                                                status=status, limit=MAX_QUESTIONS_PAGE)

    async def pending(self, run_id: str) -> builtins.list[dict[str, Any]]:
        """The run's open questions as JSON, oldest first (``GET /runs/{id}``,
        ``GET /sessions/{id}``, ``toren jobs show`` and ``toren chat`` show them)."""
        return [record.to_json() for record in await self.list(run_id, status="pending")]

    async def get(self, run_id: str, question_id: str) -> QuestionRecord:
        """One question of the run; ``QuestionNotFound`` if the run (of a served agent) asked
        none with this id."""
        record = (None if unstorable(question_id) or unstorable(run_id)
                  else await self._store.get_question(question_id))
        scope = self._scope()
        if (record is None or record.run_id != run_id
                or (scope is not None and record.agent not in scope)):
            raise QuestionNotFound(f"run {run_id} asked no question {question_id!r} (see "
                                   f"`toren jobs show {run_id}`)")
        return record

    async def answer(self, run_id: str, question_id: str, answer: Any, *, answered_by: str,
                     key: str | None = None) -> QuestionRecord:
        """Answer the question (exactly once: the first answer wins) as ``answered_by`` (an API
        key's name, ``cli:<os user>``, a channel's user) and wake its task; return it answered.

        An answer to a question with choices must name one (the choice, ignoring case, or its
        number); the choice itself is kept. Raises ``QuestionNotFound``; ``InvalidAnswer``
        (422) for an empty, too long or unlisted answer; ``key`` (a session message's
        idempotency key) is kept with the answer; ``QuestionAlreadyAnswered`` (409,
        with the first answer) if it was answered before, expired, or its run ended.
        """
        if not isinstance(answer, str) or not answer.strip():
            raise InvalidAnswer("an answer is non-empty text")
        if unstorable(answer):
            raise InvalidAnswer("the answer holds characters that cannot be stored (NUL)")
        if len(answer) > MAX_ANSWER_CHARS:
            raise InvalidAnswer(f"an answer may be at most {MAX_ANSWER_CHARS} characters; this "
                                f"one has {len(answer)}")
        record = await self.get(run_id, question_id)
        if record.pending:
            chosen = match_choice(answer, record.choices)
            if chosen is None:
                raise InvalidAnswer(f"{answer!r} is not among the question's choices: "
                                    + "; ".join(f"{i}. {c}" for i, c in
                                                enumerate(record.choices, 1))
                                    + " (answer with one, or its number)")
            answer = chosen
        result = await self._store.answer_question(record.id, answer, answered_by, key=key)
        assert result is not None
        record, answered = result
        if not answered and record.pending and record.extra.get("due"):
            result = await self._store.answer_question(record.id, None, ANSWERED_BY_TOREN,
                                                       "expired")
            assert result is not None
            record = result[0]
        if not answered:
            by = f" by {record.answered_by}" if record.answered_by else ""
            first = f": {record.answer!r}" if record.answer is not None else ""
            raise QuestionAlreadyAnswered(
                f"question {record.id} was already settled: {record.status}{by}{first}",
                question=record.to_json())
        return record
