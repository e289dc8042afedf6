"""What makes a decision on an approval well-formed, and edited arguments valid for the tool:
checked by ``ApprovalsService.decide`` before the store is asked (every surface goes there)."""

from __future__ import annotations

import json
from typing import Any

from toren.core.approvals import (
    DECISIONS,
    MAX_ANSWER_CHARS,
    MAX_EDITED_ARGUMENTS_BYTES,
    MAX_REASON_CHARS,
    SCOPES,
    ApprovalRecord,
)
from toren.core.decisions import unstorable
from toren.errors import ConfigError, InvalidApprovalArguments


def check_decision(outcome: str, *, reason: str | None, digest: str | None, scope: str,
                   arguments: dict[str, Any] | None, answer: str | None) -> None:
    """``ConfigError`` naming what is wrong with a decision's shape (before any I/O)."""
    if outcome not in DECISIONS:
        raise ConfigError(f"a decision is one of {', '.join(DECISIONS)}, not {outcome!r}")
    if scope not in SCOPES:
        raise ConfigError(f"scope is one of {', '.join(SCOPES)}, not {scope!r}")
    if scope == "run" and outcome != "approved":
        raise ConfigError("only an approval may reach the rest of the run (scope run, "
                          "\"approve always\"); deny, edit and answer decide this call only")
    _check_text("reason", reason, MAX_REASON_CHARS)
    if digest is not None and (not isinstance(digest, str) or len(digest) != 64
                               or any(c not in "0123456789abcdef" for c in digest)):
        raise ConfigError("digest must be the approval's digest: 64 lowercase hex digits, as "
                          "`toren approvals show` and GET /approvals/{id} give it")
    if (outcome == "edited") != (arguments is not None):
        raise ConfigError("edited arguments come with an edit, and an edit with arguments")
    if arguments is not None:
        if not isinstance(arguments, dict):
            raise InvalidApprovalArguments("the edited arguments must be a JSON object")
        try:
            size = len(json.dumps(arguments, ensure_ascii=False, allow_nan=False).encode())
        except (TypeError, ValueError) as exc:
            raise InvalidApprovalArguments(f"the edited arguments are not JSON: {exc}") from exc
        if size > MAX_EDITED_ARGUMENTS_BYTES:
            raise InvalidApprovalArguments(f"the edited arguments may be at most "
                                           f"{MAX_EDITED_ARGUMENTS_BYTES} bytes of JSON; "
                                           f"these are {size}")
        if unstorable(json.dumps(arguments, ensure_ascii=False)):
            raise InvalidApprovalArguments("the edited arguments may not contain NUL "
                                           "characters")
    if (outcome == "answered") != (answer is not None):
        raise ConfigError("an answer comes with the decision answered, and it with an answer")
    if answer is not None:
        _check_text("answer", answer, MAX_ANSWER_CHARS)
        if not answer.strip():
            raise ConfigError("the answer is the tool's result: it may not be empty")


def _check_text(name: str, value: object, limit: int) -> None:
    if value is None:
        return
    if not isinstance(value, str) or unstorable(value):
        raise ConfigError(f"the {name} must be text without NUL characters")
    if len(value) > limit:
        raise ConfigError(f"the {name} may be at most {limit} characters; this one has "
                          f"{len(value)}")


def check_arguments(record: ApprovalRecord, arguments: dict[str, Any]) -> None:
    """``InvalidApprovalArguments`` naming the first field where ``arguments`` break the
    tool's JSON Schema as the approval keeps it (kept before edits: not checked)."""
    if record.parameters is None:
        return
    import jsonschema  # ~0.15 s to import: only an edit needs it

    validator = jsonschema.validators.validator_for(
        record.parameters, jsonschema.Draft202012Validator)(record.parameters)
    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "arguments"
        raise InvalidApprovalArguments(
            f"the edited arguments of {record.tool} do not match its schema at {where}: "
            f"{error.message}", field=where)
