"""``memory:`` in the task loop: the run's subject and pinned memories as a task starts, and the
memory tools (``remember``, ``recall``, ``update_memory``, ``forget``) run against the store.

A task of an agent with memory records ``MemoryLoaded`` before its first model call: whom the
run is about (its ``RunCreated.subject``) and the block of pinned memories its system prompt
carries from then on, so a replayed task sends the prompt it sent before. The tools are run by
the loop itself, not called as functions: each write goes to the store with the call's
idempotency key, which takes effect once (``MemoryStore``): a worker killed after the write and
before its result was appended writes nothing the second time, and the result recorded is the
first write's. Recalls read what is kept now (a memory a person erased is not found).

With ``memory.embeddings`` the content written and each recall's query are embedded first
(``ExecutionPorts.embed``): the vector is kept with the memory, and recall finds memories by
similarity too where the store can (``MemoryStore.semantic_recall``). An embedder that fails
costs the call its vector, never its write: the memory is still found by its words.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from toren.agents import AgentSpec
from toren.core import events as ev
from toren.core.decisions import truncate_output
from toren.core.fold import PendingToolCall
from toren.core.memory import (
    FORGET_TOOL,
    MEMORY_TOOLS,
    RECALL_TOOL,
    REMEMBER_TOOL,
    MemoryConfig,
    MemoryVector,
    NewMemory,
    check_content,
    pinned_block,
    recall_text,
    scope_for,
    view_of,
    write_text,
)
from toren.execution.task_port import TaskPort

#: Most pinned memories read for the block (the budget in characters cuts it further).
MAX_PINNED = 50

log = logging.getLogger(__name__)


def is_memory_call(agent: AgentSpec, tool_name: str) -> bool:
    """Whether a tool call of ``agent`` is one of the memory tools (the agent has ``memory:``)."""
    return agent.memory is not None and tool_name in MEMORY_TOOLS


async def load_memory(runner: TaskPort) -> None:
    """Record ``MemoryLoaded`` for a task of an agent with memory that has none yet: the
    run's subject, read from its ``RunCreated``, and its pinned memories as they are now."""
    config = runner.agent.memory
    if config is None or runner.state.memory is not None:
        return
    subject = await _run_subject(runner)
    store = runner.ports.memory
    text, ids = "", tuple[str, ...]()
    if store is not None and config.pinned_max_chars > 0:
        pinned = await store.pinned_memories(view_of(runner.agent.name, config, subject),
                                             limit=MAX_PINNED)
        text = pinned_block(pinned, config.pinned_max_chars)
        ids = tuple(record.id for record in pinned if f"[{record.id}]" in text)
    runner.record(ev.MemoryLoaded(epoch=runner.lease.epoch, subject=subject, pinned=text,
                                  memory_ids=ids))


async def _run_subject(runner: TaskPort) -> str | None:
    """The subject its ``RunCreated`` gave the run (``None``: none, or no run stream here)."""
    read = runner.ports.read_stream
    if read is None:
        return None
    for event in await read(runner.agent.name, runner.run_id, "run"):
        if event.type == ev.RUN_CREATED:
            subject = event.data.get("subject")
            return subject if isinstance(subject, str) else None
    return None


async def _vector(runner: TaskPort, text: str) -> MemoryVector | None:
    """``text``'s vector by the agent's ``memory.embeddings``; ``None`` without one, or when
    the embedder failed (logged: the write or recall goes on by words)."""
    config, embed = runner.agent.memory, runner.ports.embed
    if config is None or config.embeddings is None or embed is None:
        return None
    try:
        [values] = await embed(config.embeddings, [text])
    except Exception as exc:
        log.warning("embedder %s failed for a memory call of run %s (recall by words only "
                    "for it): %s", config.embeddings, runner.run_id, exc)
        return None
    return MemoryVector(config.embeddings, tuple(float(v) for v in values))


async def run_memory_calls(runner: TaskPort, calls: Sequence[PendingToolCall]) -> None:
    """Run the memory tool calls, in order, and record their results."""
    await load_memory(runner)  # a task started before the agent had memory: now
    for pending in calls:
        started = time.perf_counter()
        text, error_kind = await _run_one(runner, pending)
        output, truncated, size = truncate_output(text, runner.spec.limits.max_tool_output_bytes)
        runner.record(ev.ToolCallCompleted(
            step=pending.step, call_id=pending.call.id, name=pending.call.name,
            output=output, is_error=error_kind is not None, error_kind=error_kind,
            truncated=truncated, original_bytes=size,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
            epoch=runner.lease.epoch))


async def _run_one(runner: TaskPort, pending: PendingToolCall
                   ) -> tuple[str, ev.ToolErrorKind | None]:
    """The call's result text, and its error kind (``None``: it worked)."""
    config = runner.agent.memory
    assert config is not None
    store = runner.ports.memory
    if store is None:
        return "Error: this host keeps no memories. Carry on without them.", "refused"
    loaded = runner.state.memory
    subject = loaded.subject if loaded is not None else None
    view = view_of(runner.agent.name, config, subject)
    call, key = pending.call, pending.idempotency_key
    arguments = call.arguments
    try:
        if call.name == REMEMBER_TOOL:
            scope = scope_for(config, arguments.get("scope"), subject)
            content = check_content(arguments.get("content"))
            result = await store.remember(key, NewMemory(
                agent=runner.agent.name, scope=scope,
                subject=subject if scope != "agent" else None, content=content,
                pinned=bool(arguments.get("pinned", False)) and config.pinned_max_chars > 0,
                shared_with=config.share_with if scope == "shared" else (),
                run_id=runner.run_id, vector=await _vector(runner, content)))
        elif call.name == RECALL_TOOL:
            return await _recall(runner, config, subject, pending)
        elif call.name == FORGET_TOOL:
            result = await store.forget_memory(key, view, str(arguments["id"]))
        else:
            changed = (check_content(arguments["content"]) if "content" in arguments
                       else None)
            result = await store.update_memory(
                key, view, str(arguments["id"]), content=changed,
                pinned=(bool(arguments["pinned"]) if "pinned" in arguments
                        and config.pinned_max_chars > 0 else None),
                vector=await _vector(runner, changed) if changed is not None else None)
    except ValueError as exc:
        return f"Error: {exc}", "invalid_arguments"
    runner.ports.crash_point("after_memory_write")
    text, failed = write_text(result, str(arguments.get("id") or ""))
    return text, "exception" if failed else None


async def _recall(runner: TaskPort, config: MemoryConfig, subject: str | None,
                  pending: PendingToolCall) -> tuple[str, ev.ToolErrorKind | None]:
    """A ``recall``: what the agent sees, best first, within ``memory.recall``'s budget."""
    store = runner.ports.memory
    assert store is not None
    arguments = pending.call.arguments
    scope = arguments.get("scope")
    if scope is not None and scope not in config.scopes:
        return (f"Error: scope {scope!r} is not one this agent may use "
                f"({', '.join(config.scopes)})", "invalid_arguments")
    limit = min(int(arguments.get("limit") or config.recall_limit), config.recall_limit)
    query = str(arguments.get("query") or "").strip() or None
    found = await store.recall_memories(view_of(runner.agent.name, config, subject), query,
                                        limit=limit, scope=scope,
                                        vector=await _vector(runner, query) if query else None,
                                        min_similarity=config.min_similarity)
    return recall_text(found, config.recall_max_chars, query), None
