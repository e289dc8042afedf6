"""Questions: what an agent asked a person (``ask_user``), and the one answer that counts."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING

from toren.core.questions import QuestionRecord
from toren.seams.shapes import OutgoingMessage

if TYPE_CHECKING:
    from toren.core.events import QuestionAsked


class QuestionStore(abc.ABC):
    """Where questions wait and are answered, once (``docs/guides/asking-the-user.md``).

    The task loop opens the questions its log asked before it parks; the host API
    (``Runtime.answer_question``, behind the CLI, ``POST /runs/{id}/questions/{qid}/answer``
    and a session's next message) answers them; both read them. An answer wakes the parked
    task in the same transaction.

    Every record the store returns carries ``extra["due"]``: whether its expiry has passed by
    the store's clock (``False`` without one), and ``extra["key"]``: the idempotency key its
    answer was given with (``None``: none). The task loop expires a pending question that
    is due (``answer_question(..., outcome="expired")``).
    """

    @abc.abstractmethod
    async def open_question(self, agent: str, run_id: str, task_id: str,
                            asked: QuestionAsked, wake: OutgoingMessage) -> QuestionRecord:
        """Keep the question unless it is kept already; return it as it is now (pending or
        answered).

        Called by the task loop each time it takes up a task whose ``ask_user`` call has no
        result, before it parks. Idempotent: a worker that died after recording the question
        opens the same one again, and nothing about it changes. ``wake`` is the queue message
        an answer sends to take the task up again; the expiry is ``asked.expires_after_s``
        from the first open, by the database clock.
        """

    @abc.abstractmethod
    async def answer_question(self, question_id: str, answer: str | None, answered_by: str,
                              outcome: str = "answered", key: str | None = None
                              ) -> tuple[QuestionRecord, bool] | None:
        """Answer a pending question (``answered``, before its expiry) or expire it
        (``expired``, once its expiry has passed), in one transaction with waking its task:
        the run becomes ``running`` if it was ``awaiting_input`` and the task's message is
        queued.

        Called by ``Runtime.answer_question`` and by the task loop (for expiry). Returns the
        question as it is now and whether this call settled it (``False``: it was answered
        before, and the record carries that first answer; or it expired, or its run ended).
        ``None`` when there is no such question. A pending question whose run has ended
        becomes ``cancelled``. ``key``: the idempotency key of the session message that
        answers, kept with the answer (the record's ``extra["key"]``) so that the message sent
        again is known as taken.
        """

    @abc.abstractmethod
    async def get_question(self, question_id: str) -> QuestionRecord | None:
        """One question by id (``None``: none, or the id is no UUID)."""

    @abc.abstractmethod
    async def list_questions(self, *, agents: Sequence[str] | None, run_id: str | None = None,
                             status: str | None = None, limit: int = 50
                             ) -> list[QuestionRecord]:
        """Questions of ``agents`` (``None``: every agent's), oldest first, filtered by run
        and status. Called by ``GET /runs/{id}/questions``, ``toren jobs show`` and a
        session's message (which answers the session's pending question, if any)."""

    @abc.abstractmethod
    async def cancel_questions(self, run_id: str) -> int:
        """Mark the run's pending questions ``cancelled`` (its run was cancelled); return how
        many. Called by ``Runtime.cancel_run``."""
