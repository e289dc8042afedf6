"""Questions an agent asks a person (the ``ask_user`` tool): ids, records, answers (pure: no I/O).

An agent with ``askUser: true`` in agent.yaml gets the tool ``ask_user``. Its call records
``QuestionAsked``, keeps the question in the store's questions table and parks the task as
``awaiting_input``; the first answer (``Runtime.answer_question``, or a session's next user
message) wakes it, and the task records ``QuestionAnswered`` with the answer as the tool's
result (docs/guides/asking-the-user.md).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

#: A question's status: ``pending`` until answered, then one of the outcomes.
QuestionStatus = Literal["pending", "answered", "expired", "cancelled"]
QUESTION_STATUSES: tuple[str, ...] = ("pending", "answered", "expired", "cancelled")
#: Who records an expiry or a cancellation.
ANSWERED_BY_TOREN = "toren"
#: Longest question, answer and choice kept, in characters.
MAX_QUESTION_CHARS = 4000
MAX_ANSWER_CHARS = 8000
MAX_CHOICE_CHARS = 200
#: Most choices one question offers.
MAX_CHOICES = 20
#: Longest expiry a question may ask for: 30 days.
MAX_EXPIRY_S = 30 * 86400.0
_NAMESPACE = uuid.UUID("0b9d3c5e-8f3a-4f61-9c1e-4e2a7d6b5a39")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def question_id(idempotency_key: str) -> str:
    """The question's id: a UUID derived from the ``ask_user`` call's idempotency key, so a
    worker that records the question again after a crash names the same question."""
    return str(uuid.uuid5(_NAMESPACE, idempotency_key))


def expiry_seconds(value: Any) -> float | None:
    """``expires_after`` as the model gave it (seconds, or ``"90s"``, ``"15m"``, ``"2h"``,
    ``"1d"``) in seconds; ``None`` when absent. ``ValueError`` saying what is accepted."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("expires_after must be seconds or a duration such as '15m'")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if match is None:
            raise ValueError(f"expires_after {value!r} is not a duration: give seconds "
                             "(e.g. 300) or a number with s, m, h or d (e.g. '15m')")
        seconds = float(match.group(1)) * _UNIT_S[match.group(2) or "s"]
    if not 0 < seconds <= MAX_EXPIRY_S:
        raise ValueError(f"expires_after must be more than 0 and at most {MAX_EXPIRY_S:g} "
                         "seconds (30 days)")
    return seconds


def match_choice(answer: str, choices: tuple[str, ...]) -> str | None:
    """The choice an answer names: the choice itself (ignoring case and surrounding space) or
    its number as the question listed it (``2`` for the second); ``None`` when it names none.
    Without choices every answer stands as it is."""
    if not choices:
        return answer
    text = answer.strip()
    for choice in choices:
        if choice.strip().casefold() == text.casefold():
            return choice
    if text.isdigit() and 1 <= int(text) <= len(choices):
        return choices[int(text) - 1]
    return None


@dataclass(frozen=True)
class QuestionRecord:
    """One question as the store keeps it (``GET /runs/{id}/questions``, ``toren jobs show``)."""

    id: str
    agent: str
    run_id: str
    task_id: str
    call_id: str
    question: str
    choices: tuple[str, ...]
    status: str
    asked_at: datetime | None = None
    expires_at: datetime | None = None
    answer: str | None = None
    answered_by: str | None = None
    answered_at: datetime | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pending(self) -> bool:
        return self.status == "pending"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "agent": self.agent, "run_id": self.run_id, "task_id": self.task_id,
            "call_id": self.call_id, "question": self.question, "choices": list(self.choices),
            "status": self.status, "asked_at": _iso(self.asked_at),
            "expires_at": _iso(self.expires_at), "answer": self.answer,
            "answered_by": self.answered_by, "answered_at": _iso(self.answered_at),
        }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def question_text(question: str, choices: tuple[str, ...] | list[str]) -> str:
    """The question as a channel shows it: its text, then its choices numbered."""
    if not choices:
        return question
    listed = "\n".join(f"{index}. {choice}" for index, choice in enumerate(choices, 1))
    return f"{question}\n{listed}\n(answer with a choice or its number)"


def result_text(outcome: str, answer: str | None, answered_by: str | None) -> str:
    """The ``ask_user`` tool result the model reads."""
    if outcome == "answered":
        return answer or ""
    if outcome == "expired":
        return ("Error: nobody answered the question before it expired. Carry on without the "
                "answer, or ask again if it is still needed.")
    return f"Error: the question was not answered: it was {outcome} by {answered_by or 'toren'}."
