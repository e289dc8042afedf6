"""Flow control of an agent's runs: its concurrency limit and key, and run priority (pure).

docs/guides/flow-control.md says what they mean; the queue's claim enforces them (control
migration 0024 of toren-postgres).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toren.core.errors import InvalidFlowControl

#: A priority is a whole number in this range (agent.yaml ``priority:``, ``POST /runs``).
MIN_PRIORITY = -100
MAX_PRIORITY = 100
#: The longest concurrency key value kept; a longer one is refused at start.
MAX_KEY_CHARS = 200
#: ``concurrency: {key: session}``: the session (or the run) that started the run.
SESSION_KEY = "session"


def check_priority(value: Any, where: str = "priority") -> int:
    """``value`` as a priority, or ``InvalidFlowControl`` naming ``where`` and the range. A
    number with no fraction (``5.0``) is that whole number, as JSON Schema counts it."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        raise InvalidFlowControl(
            f"{where}: {shown} is not a whole number; give a priority from {MIN_PRIORITY} to "
            f"{MAX_PRIORITY} (higher is claimed first; default 0)")
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise InvalidFlowControl(
            f"{where}: {value} is out of range; give a priority from {MIN_PRIORITY} to "
            f"{MAX_PRIORITY} (higher is claimed first; default 0)")
    return value


@dataclass(frozen=True)
class Concurrency:
    """agent.yaml ``concurrency:``: at most ``limit`` runs of the agent execute at once, per
    value of ``key`` when one is given (``session``, or ``input.<field>[.<field>...]``)."""

    limit: int
    key: str | None = None

    @classmethod
    def from_yaml(cls, value: Any) -> Concurrency | None:
        """From the (schema-validated) ``concurrency:`` value; ``None`` when absent."""
        if value is None:
            return None
        if isinstance(value, int | float):  # 3, or 3.0 (which the schema counts as 3)
            return cls(limit=int(value))
        return cls(limit=int(value["limit"]), key=value.get("key"))

    def key_of(self, input: Any, *, run_id: str, parent_run_id: str | None = None
               ) -> str | None:
        """The run's key value (``None``: the agent-wide group), or ``InvalidFlowControl``
        naming the path when the input does not hold a usable value there."""
        if self.key is None:
            return None
        if self.key == SESSION_KEY:
            return parent_run_id or run_id
        value = input
        for part in self.key.split(".")[1:]:
            if not isinstance(value, Mapping) or part not in value:
                raise InvalidFlowControl(
                    f"the agent's concurrency key is {self.key}, and this run's input has no "
                    f"{self.key}: start it with a JSON object input holding that field (its "
                    "runs are limited per value of it)")
            value = value[part]
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str | int | float):
            text = str(value)
        else:
            kind = "null" if value is None else type(value).__name__
            raise InvalidFlowControl(
                f"the agent's concurrency key is {self.key}, and this run's input has a "
                f"{kind} there: it must be a string, a number or a boolean")
        if len(text) > MAX_KEY_CHARS or not text.isprintable():
            raise InvalidFlowControl(
                f"the value of the concurrency key {self.key} must be at most {MAX_KEY_CHARS} "
                "printable characters")
        return text

    def to_json(self) -> dict[str, Any]:
        return {"limit": self.limit, "key": self.key}


def run_flow(concurrency: Concurrency | None, agent_priority: int, input: Any, *,
             run_id: str, parent_run_id: str | None = None, priority: Any = None,
             fallback_key: str | None = None) -> tuple[int, str | None]:
    """A new run's ``(priority, concurrency key)``: ``priority`` as asked (checked) or the
    agent's; the key from its input (``Concurrency.key_of``). With ``fallback_key`` (a
    scheduled run, which no caller could be told about), an input without the key takes that
    key instead of being refused."""
    chosen = agent_priority if priority is None else check_priority(priority)
    if concurrency is None:
        return chosen, None
    try:
        return chosen, concurrency.key_of(input, run_id=run_id, parent_run_id=parent_run_id)
    except InvalidFlowControl:
        if fallback_key is None:
            raise
        return chosen, fallback_key
