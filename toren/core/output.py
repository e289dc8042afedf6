"""Structured output: the JSON Schema a task's final answer must match (``output:``).

Pure: parsing an answer and validating it against the schema need no I/O. The loader builds an
``OutputSchema`` from agent.yaml or a subagent's front matter (``toren.agents.loader``), the
task loop asks the model for it (``ModelRequest.output_schema``) and checks the answer with
``check``; an answer that does not match gets a repair turn (``OutputRejected``), a bounded
number of times (``toren.core.decisions``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jsonschema

#: Repair turns an invalid final answer gets before the task fails with ``invalid_output``.
MAX_OUTPUT_REPAIRS = 2


@dataclass(frozen=True)
class OutputProblem:
    """Why an answer does not match: ``where`` in the answer (``$.topics[0]``), what is wrong,
    and the keyword of the schema it broke (``properties/topics/items/type``)."""

    where: str
    message: str
    schema_path: str

    def describe(self) -> str:
        keyword = f" (schema: {self.schema_path})" if self.schema_path else ""
        return f"at {self.where}: {self.message}{keyword}"


@dataclass(frozen=True)
class OutputCheck:
    """The outcome of ``OutputSchema.check``: the parsed value, or the problem."""

    value: Any = None
    problem: OutputProblem | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass(frozen=True)
class OutputSchema:
    """A JSON Schema (2020-12) for a task's final answer.

    Args:
        schema: the schema (its root is an object type: the loader checks).
        source: where it was declared, as errors name it: ``agent.yaml:output``, a file
            relative to the agent directory (``schemas/plan.json``), or a subagent's
            ``subagents/planner.md:output``.
    """

    schema: dict[str, Any]
    source: str
    _validator: list[jsonschema.protocols.Validator] = field(
        default_factory=list, repr=False, compare=False)

    def validator(self) -> jsonschema.protocols.Validator:
        """The schema's validator, made once (jsonschema's import takes ~0.15 s: only a task
        with ``output:`` pays it)."""
        if not self._validator:
            import jsonschema

            self._validator.append(jsonschema.Draft202012Validator(self.schema))
        return self._validator[0]

    def check(self, text: str) -> OutputCheck:
        """Parse ``text`` as JSON (a Markdown code fence around it is allowed) and validate it."""
        try:
            value = json.loads(strip_fence(text))
        except ValueError as exc:
            reason = getattr(exc, "msg", str(exc))
            said = "an empty answer" if not text.strip() else f"{reason}: {clip(text)}"
            return OutputCheck(problem=OutputProblem("$", f"the answer is not JSON ({said})",
                                                     ""))
        import jsonschema

        error = jsonschema.exceptions.best_match(self.validator().iter_errors(value))
        if error is None:
            return OutputCheck(value=value)
        return OutputCheck(value=value, problem=OutputProblem(
            json_path(error.absolute_path), clip(error.message, 300),
            "/".join(str(part) for part in error.absolute_schema_path)))

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "schema": self.schema}


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` cannot be an output schema (not a valid JSON Schema 2020-12, a root that
    is not an object type, a ``$ref`` outside it), or ``None``. The loader says the same with
    files and lines; a workflow's ``ctx.task(..., output=...)`` is checked with this."""
    import jsonschema

    if not isinstance(schema, dict):
        return f"an output schema is a JSON Schema object, not {type(schema).__name__}"
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = ".".join(str(part) for part in exc.absolute_path) or "(root)"
        return f"{where}: not a valid JSON Schema: {exc.message}"
    if schema.get("type") != "object":
        return "type: the output schema's root must be an object (type: object)"
    pending: list[Any] = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and not ref.startswith("#"):
                return f"$ref {ref!r} points outside the schema; use #/$defs/<name>"
            pending += node.values()
        elif isinstance(node, list):
            pending += node
    return None


def strip_fence(text: str) -> str:
    """``text`` without a Markdown code fence around it (```json ... ```), which models add."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and "\n" in stripped:
        return stripped[stripped.index("\n") + 1:-3]
    return stripped


def json_path(parts: Any) -> str:
    """A location in a JSON value as ``$.topics[0].name``."""
    path = "$"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def repair_text(problem: OutputProblem, schema: dict[str, Any], attempt: int,
                attempts: int) -> str:
    """The user turn that tells the model what failed and asks for the answer again."""
    return (f"Your final answer does not match the required output schema: "
            f"{problem.describe()}. Reply again with only the JSON value, nothing else, "
            f"matching this JSON Schema (repair {attempt} of {attempts}): "
            f"{json.dumps(schema, sort_keys=True, ensure_ascii=False)}")


__all__ = ["MAX_OUTPUT_REPAIRS", "OutputCheck", "OutputProblem", "OutputSchema", "repair_text",
           "schema_problem"]
