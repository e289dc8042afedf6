"""Compaction: summarise a task's older turns when its context grows too large (pure parts).

The task loop decides with ``needs_compaction``, asks the model for a summary of
``messages[:boundary]`` (a recorded, costed model call) and records ``Compacted``; the fold then
replaces those messages by one user message holding the summary. A resume reads the summary
from the log and never recomputes it.
"""

from __future__ import annotations

from collections.abc import Sequence

from toren.core.attachments import estimated_tokens, unseen_note
from toren.core.limits import Compaction
from toren.core.messages import Message, ModelRequest

#: Tokens are estimated at four characters each, plus a little per message; the provider's own
#: count is only known after a call, and compaction must decide before one.
CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4
#: Share of the model's context window at which compaction starts when not configured.
DEFAULT_THRESHOLD_SHARE = 0.8

SUMMARY_SYSTEM = (
    "You compress the history of an agent's work so it can continue with less context. "
    "Write a faithful, specific summary of the conversation you are given: the task, what was "
    "tried, which tools were called with what results (keep numbers, names, identifiers and "
    "errors verbatim), what was decided and what remains to do. Do not address the user; do not "
    "invent anything.")
SUMMARY_REQUEST = "Summarise the conversation above as instructed."
SUMMARY_PREFIX = "Summary of the earlier part of this task (older turns were compacted):\n\n"


def estimate_tokens(system: str, messages: Sequence[Message]) -> int:
    """A cheap upper-leaning estimate of the context a request would take."""
    chars = len(system) + sum(
        len(m.text) + sum(len(c.name) + len(str(c.arguments)) for c in m.tool_calls)
        for m in messages)
    shown = sum(estimated_tokens(a) for m in messages for a in m.attachments)
    return chars // CHARS_PER_TOKEN + TOKENS_PER_MESSAGE * len(messages) + shown


def threshold(settings: Compaction, context_window: int | None) -> int | None:
    """Tokens past which to compact, or ``None`` (only on a context-length error)."""
    if not settings.enabled:
        return None
    if settings.threshold_tokens is not None:
        return settings.threshold_tokens
    if context_window:
        return int(context_window * DEFAULT_THRESHOLD_SHARE)
    return None


def boundary(messages: Sequence[Message], keep_recent: int) -> int | None:
    """Index of the first message to keep, or ``None`` if nothing can be compacted.

    The kept part starts with an assistant message, so the compacted conversation is
    ``[user: summary, assistant, ...]`` and no tool result is separated from its call.
    """
    start = min(len(messages) - 1, max(1, len(messages) - keep_recent))
    for index in range(start, 0, -1):
        if messages[index].role == "assistant":
            return index
    return None


def needs_compaction(settings: Compaction, context_window: int | None, system: str,
                     messages: Sequence[Message]) -> bool:
    limit = threshold(settings, context_window)
    return (limit is not None and estimate_tokens(system, messages) > limit
            and boundary(messages, settings.keep_recent_messages) is not None)


def summary_request(model: str, messages: Sequence[Message], cut: int) -> ModelRequest:
    """The model call that summarises ``messages[:cut]``."""
    older = tuple(messages[:cut])
    return ModelRequest(model=model, system=SUMMARY_SYSTEM,
                        messages=(*older, Message(role="user", text=SUMMARY_REQUEST)))


def compacted(messages: Sequence[Message], replaced: int, summary: str) -> list[Message]:
    """The conversation after compaction: the summary, then the kept messages.

    Files shown in the compacted turns are not shown again (each would cost its tokens on
    every later call): the summary names them, so the agent's tools can still read them."""
    files = [a for m in messages[:replaced] for a in m.attachments]
    text = SUMMARY_PREFIX + summary + ("\n\n" + unseen_note(
        dict.fromkeys(files), "files shown earlier, no longer attached") if files else "")
    return [Message(role="user", text=text), *messages[replaced:]]
