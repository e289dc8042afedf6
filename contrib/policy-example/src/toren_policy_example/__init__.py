"""toren-policy-example: a Toren policy plugin (entry point ``policy-example``).

It acts only on agents that list it under ``policies:`` in agent.yaml, with these settings:

- ``redact``: the kinds of personal data masked in tool results: ``email``, ``phone``, ``card``
  (card numbers passing the Luhn check). Default: all three.
- ``tools``: the tools whose results are masked. Default: every tool.
- ``responses``: also mask the model's own responses (what later steps, the output and the
  transcript read; the log keeps the original). Default: false.
- ``shellTools``: the tools whose ``command`` argument is checked against the deny-list.
  Default: ``[bash]``, the sandbox's shell (toren-sandbox).
- ``denyCommands``: regular expressions a command may not match; replaces the built-in list
  (``toren_policy_example.shell.DEFAULT_DENY``).
"""

from __future__ import annotations

from typing import Any

from toren import hookimpl
from toren.plugin import (
    ModelResponseView,
    ProposedToolCall,
    ResponseDecision,
    ToolCallDecision,
    ToolCallResult,
    ToolResultDecision,
)
from toren_policy_example.pii import PLACEHOLDERS, redact
from toren_policy_example.shell import denied

__version__ = "0.1.0"
#: Policy hooks arrived in plugin API 1.3 (docs/reference/plugin-api.md).
TOREN_PLUGIN_API = ">=1.3,<2"


def _kinds(settings: dict[str, Any]) -> list[str]:
    kinds = list(settings.get("redact", PLACEHOLDERS))
    unknown = [kind for kind in kinds if kind not in PLACEHOLDERS]
    if unknown:  # raising fails closed: the result is withheld, naming this plugin
        raise ValueError(f"settings.redact names {unknown}; the kinds are "
                         f"{', '.join(PLACEHOLDERS)}")
    return kinds


@hookimpl
def before_tool_call(call: ProposedToolCall,
                     settings: dict[str, Any]) -> ToolCallDecision | None:
    """Deny a shell command that matches the deny-list; the model reads why."""
    if call.name not in settings.get("shellTools", ["bash"]):
        return None
    command = call.arguments.get("command")
    if not isinstance(command, str):
        return None
    why = denied(command, settings.get("denyCommands"))
    if why is None:
        return None
    return ToolCallDecision.deny(f"the command is on the deny-list ({why}); do it another "
                                 "way or ask the user")


@hookimpl
def after_tool_call(result: ToolCallResult,
                    settings: dict[str, Any]) -> ToolResultDecision | None:
    """Mask personal data in a tool's result before it is recorded."""
    tools = settings.get("tools")
    if tools is not None and result.name not in tools:
        return None
    masked = redact(result.output, _kinds(settings))
    if masked == result.output:
        return None
    return ToolResultDecision.redact(masked, "personal data masked")


@hookimpl
def after_model_response(response: ModelResponseView,
                         settings: dict[str, Any]) -> ResponseDecision | None:
    """With ``responses: true``, mask personal data in the model's own text too."""
    if not settings.get("responses"):
        return None
    masked = redact(response.text, _kinds(settings))
    if masked == response.text:
        return None
    return ResponseDecision.redact(masked, "personal data masked")
