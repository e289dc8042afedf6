"""The built-in tools of cross-agent calls (``peers:``) and background runs (``background:``).

The loader adds them to an agent that lists peers or background agents; the task loop
(``toren.execution.children``) runs them itself, durably, instead of calling their function:
``ask_<peer>`` creates a run of the peer and waits for its answer without holding a worker,
``start_background_run`` creates a run and returns at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toren.seams.tools import Tool

#: The prefix of a peer's tool: ``peers: [writer]`` gives the tool ``ask_writer``.
ASK_PREFIX = "ask_"
#: The tool a session gets with ``background:``.
BACKGROUND_TOOL = "start_background_run"
#: Where these tools come from, as ``toren plugins`` and errors name it.
SOURCE = "toren (agent.yaml peers:/background:)"


def _run_by_task_loop(**_arguments: Any) -> str:
    raise RuntimeError("cross-agent tools are run by the task loop, not called")


def peer_tool(peer: str, description: str = "") -> Tool:
    """``ask_<peer>``: ask the agent ``peer`` a question and get its final answer."""
    about = f" ({description})" if description else ""
    return Tool(
        name=ASK_PREFIX + peer,
        description=(f"Ask the agent {peer!r}{about} to work on a request and return its final "
                     "answer. It runs with its own prompt and tools; you see only its answer."),
        parameters={"type": "object", "additionalProperties": False, "required": ["request"],
                    "properties": {"request": {
                        "type": "string", "minLength": 1,
                        "description": "What the agent should do, with everything it needs "
                                       "to know: it does not see this conversation."}}},
        function=_run_by_task_loop, idempotent=True, source=SOURCE)


def background_tool(agents: Sequence[str]) -> Tool:
    """``start_background_run``: start a run of one of ``agents`` and go on at once."""
    return Tool(
        name=BACKGROUND_TOOL,
        description=("Start a run of another agent in the background and continue at once. "
                     "When it finishes, its answer is posted into this conversation. Agents: "
                     + ", ".join(agents) + "."),
        parameters={"type": "object", "additionalProperties": False,
                    "required": ["agent", "request"],
                    "properties": {
                        "agent": {"type": "string", "enum": list(agents),
                                  "description": "The agent to run."},
                        "request": {"type": "string", "minLength": 1,
                                    "description": "What the agent should do, with everything "
                                                   "it needs to know."}}},
        function=_run_by_task_loop, idempotent=True, source=SOURCE)
