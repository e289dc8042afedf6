"""Checks on what a caller gives before it is stored."""

from __future__ import annotations

from typing import Any

from toren.core.decisions import unstorable
from toren.core.memory import check_subject
from toren.errors import InvalidMemory, UnstorableValue


def check_storable(value: Any, name: str) -> None:
    """``UnstorableValue`` naming ``name`` (``"input"``, ``"message"``, ...) when ``value``
    cannot be stored (``toren.core.decisions.unstorable``: a NUL character, an unpaired
    surrogate, a number past 64 bits, nesting too deep)."""
    problem = unstorable(value)
    if problem is not None:
        raise UnstorableValue(f"the {name} cannot be stored: {problem}; remove or replace it")


def checked_subject(subject: Any, what: str = "subject") -> str | None:
    """A run's or session's ``subject`` (whom its agent's memories are about), or
    ``InvalidMemory`` saying what a subject may be."""
    try:
        return check_subject(subject, what)
    except ValueError as exc:
        raise InvalidMemory(str(exc)) from None
