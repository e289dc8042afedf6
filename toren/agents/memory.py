"""The built-in memory tools (``memory:`` in agent.yaml): ``remember``, ``recall``,
``update_memory`` and ``forget``.

The loader adds them to an agent with a ``memory:`` block; the task loop
(``toren.execution.memory``) runs them itself against the store's memories, instead of calling
their functions, so that each write takes effect once across crashes (docs/guides/memory.md).
"""

from __future__ import annotations

from typing import Any

from toren.core.memory import (
    FORGET_TOOL,
    MAX_MEMORY_CHARS,
    MAX_QUERY_CHARS,
    RECALL_TOOL,
    REMEMBER_TOOL,
    UPDATE_TOOL,
    MemoryConfig,
)
from toren.seams.tools import Tool

#: Where the tools come from, as ``toren plugins`` and errors name it.
SOURCE = "toren (agent.yaml memory:)"
_ID = {"type": "string", "minLength": 1, "maxLength": 64,
       "description": "The memory's id, as recall or the pinned memories show it."}


def _run_by_task_loop(**_arguments: Any) -> str:
    raise RuntimeError("memory tools are run by the task loop, not called")


def memory_tools(config: MemoryConfig) -> list[Tool]:
    """The four memory tools, their parameters bounded by the agent's ``memory:``."""
    scope = {"type": "string", "enum": list(config.scopes),
             "description": "user: about the person you are talking to; agent: your own notes "
                            "for every conversation; shared: readable by the agents you share "
                            "memory with. Leave out for the default (user when there is one)."}
    pinned = {"type": "boolean",
              "description": "Keep it in your system prompt at the start of every later "
                             "conversation (for the few facts always needed)."}
    content = {"type": "string", "minLength": 1, "maxLength": MAX_MEMORY_CHARS,
               "description": "One fact, written to be understood later without this "
                              "conversation."}
    remember_props: dict[str, Any] = {"content": content, "scope": scope}
    update_props: dict[str, Any] = {"id": _ID, "content": content}
    if config.pinned_max_chars > 0:
        remember_props["pinned"] = pinned
        update_props["pinned"] = pinned
    return [
        Tool(name=REMEMBER_TOOL,
             description=("Remember a fact for later conversations (they do not see this "
                          "one). Remember durable facts and preferences, not the chat itself. "
                          "Returns the memory's id."),
             parameters={"type": "object", "additionalProperties": False,
                         "required": ["content"], "properties": remember_props},
             function=_run_by_task_loop, idempotent=True, source=SOURCE),
        Tool(name=RECALL_TOOL,
             description=("Search what you remembered in earlier conversations: the "
                          "memories that best match the query (by words, weighing recent "
                          "ones higher), each with its id. An empty query lists the most "
                          "recent."),
             parameters={"type": "object", "additionalProperties": False,
                         "properties": {
                             "query": {"type": "string", "maxLength": MAX_QUERY_CHARS,
                                       "description": "What to look for, in words."},
                             "scope": scope | {"description": "Search only this scope."},
                             "limit": {"type": "integer", "minimum": 1,
                                       "maximum": config.recall_limit,
                                       "description": "Most memories to return."}}},
             function=_run_by_task_loop, idempotent=True, source=SOURCE),
        Tool(name=UPDATE_TOOL,
             description=("Change a memory you wrote (its text, or whether it is pinned), "
                          "when a fact changed. Give its id."),
             parameters={"type": "object", "additionalProperties": False,
                         "required": ["id"], "minProperties": 2,
                         "properties": update_props},
             function=_run_by_task_loop, idempotent=True, source=SOURCE),
        Tool(name=FORGET_TOOL,
             description=("Forget a memory you wrote (it is erased), when it is wrong or "
                          "the user asks you to. Give its id."),
             parameters={"type": "object", "additionalProperties": False,
                         "required": ["id"], "properties": {"id": _ID}},
             function=_run_by_task_loop, idempotent=True, source=SOURCE),
    ]
