"""Checks on what a caller gives before it is stored."""

from __future__ import annotations

from typing import Any

from toren.core.decisions import unstorable
from toren.errors import UnstorableValue


def check_storable(value: Any, name: str) -> None:
    """``UnstorableValue`` naming ``name`` (``"input"``, ``"message"``, ...) when ``value``
    cannot be stored (``toren.core.decisions.unstorable``: a NUL character, an unpaired
    surrogate, a number past 64 bits, nesting too deep)."""
    problem = unstorable(value)
    if problem is not None:
        raise UnstorableValue(f"the {name} cannot be stored: {problem}; remove or replace it")
