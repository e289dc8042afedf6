"""The built-in tool ``ask_user`` (``askUser: true`` in agent.yaml): the agent asks a person.

The loader adds it to an agent that enables it; the task loop (``toren.execution.questions``)
runs it itself, durably, instead of calling its function: the question is recorded and kept,
and the task parks as ``awaiting_input`` until someone answers (docs/guides/asking-the-user.md).
"""

from __future__ import annotations

from typing import Any

from toren.core.questions import MAX_CHOICE_CHARS, MAX_CHOICES, MAX_QUESTION_CHARS
from toren.seams.tools import Tool

#: The tool's name, as the model sees it.
ASK_USER_TOOL = "ask_user"
#: Where the tool comes from, as ``toren plugins`` and errors name it.
SOURCE = "toren (agent.yaml askUser:)"


def _run_by_task_loop(**_arguments: Any) -> str:
    raise RuntimeError("ask_user is run by the task loop, not called")


def ask_user_tool() -> Tool:
    """``ask_user``: ask the person behind the run a question and wait for the answer."""
    return Tool(
        name=ASK_USER_TOOL,
        description=("Ask the user a question and wait for the answer, which is this tool's "
                     "result. Use it when you cannot go on without a person's decision or "
                     "information. Offer choices when the answer is one of a few options. The "
                     "wait may be long; nothing else happens meanwhile."),
        parameters={
            "type": "object", "additionalProperties": False, "required": ["question"],
            "properties": {
                "question": {"type": "string", "minLength": 1, "maxLength": MAX_QUESTION_CHARS,
                             "description": "The question, with what the user needs to know "
                                            "to answer it."},
                "choices": {"type": "array", "minItems": 2, "maxItems": MAX_CHOICES,
                            "uniqueItems": True,
                            "items": {"type": "string", "minLength": 1,
                                      "maxLength": MAX_CHOICE_CHARS},
                            "description": "The answers allowed; leave out for free text."},
                "expires_after": {
                    "type": ["number", "string"],
                    "description": "Give up waiting after this long: seconds (300) or a "
                                   "duration ('15m', '2h', '1d'). Leave out to wait until "
                                   "answered."}}},
        function=_run_by_task_loop, idempotent=True, source=SOURCE)
