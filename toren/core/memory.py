"""Memory that outlives a session (``memory:`` in agent.yaml): its settings, who sees what, the
records people list and erase, and the text the model reads (pure: no I/O).

An agent with ``memory:`` gets the tools ``remember``, ``recall``, ``update_memory`` and
``forget``. A memory has a scope: ``user`` (about the person behind the run: its *subject*, the
channel identity such as ``telegram:12345`` or the ``subject`` given when the run or session was
started), ``agent`` (the agent's own notes, every run of it sees them) or ``shared`` (readable
by the agents that both list each other in ``memory.shareWith``). Writes are tool calls in the
log that take effect once, keyed by the call's idempotency key (docs/guides/memory.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from toren.core.retention import parse_age

#: Where a memory belongs: the run's subject, the agent, or the agents sharing with it.
MemoryScope = Literal["user", "agent", "shared"]
MEMORY_SCOPES: tuple[str, ...] = ("user", "agent", "shared")
#: The scopes an agent's tools use when ``memory.scopes`` is not given.
DEFAULT_SCOPES: tuple[str, ...] = ("user", "agent")
#: The tools ``memory:`` gives an agent, as the model sees them.
REMEMBER_TOOL = "remember"
RECALL_TOOL = "recall"
UPDATE_TOOL = "update_memory"
FORGET_TOOL = "forget"
MEMORY_TOOLS: tuple[str, ...] = (REMEMBER_TOOL, RECALL_TOOL, UPDATE_TOOL, FORGET_TOOL)
#: Longest memory kept, in characters.
MAX_MEMORY_CHARS = 4000
#: Longest subject (``telegram:12345``, an e-mail address, a customer id), in characters.
MAX_SUBJECT_CHARS = 200
#: Longest recall query, in characters.
MAX_QUERY_CHARS = 1000
#: Most memories one recall may return (``memory.recall.limit`` and the tool's ``limit``).
MAX_RECALL_LIMIT = 50
DEFAULT_RECALL_LIMIT = 5
#: Characters of recalled memory one ``recall`` result may hold (``memory.recall.maxChars``).
DEFAULT_RECALL_CHARS = 2000
#: Characters of pinned memory the system prompt may hold (``memory.pinned.maxChars``).
DEFAULT_PINNED_CHARS = 2000
#: Days after which a memory's recency weighs half as much in a recall's ranking.
RECENCY_HALF_LIFE_DAYS = 30.0
#: The cosine similarity from which a memory a recall's words did not match is found by its
#: vector (``memory.embeddings``), unless ``memory.recall.minSimilarity`` says otherwise.
MIN_SIMILARITY = 0.3
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}$")


@dataclass(frozen=True)
class MemoryConfig:
    """``memory:`` of agent.yaml, as loaded (``schemas/agent.schema.json`` checked its shape)."""

    #: The scopes the agent's memories may have (``scopes:``); the first is the default.
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    #: Agents whose shared memories this one reads, and that may read its own (``shareWith:``);
    #: both sides must list each other.
    share_with: tuple[str, ...] = ()
    #: Most memories one ``recall`` returns (``recall.limit``).
    recall_limit: int = DEFAULT_RECALL_LIMIT
    #: Characters of memory one ``recall`` result may hold (``recall.maxChars``): the budget
    #: of recalled memory entering the context.
    recall_max_chars: int = DEFAULT_RECALL_CHARS
    #: The similarity from which a memory is found by its vector (``recall.minSimilarity``).
    min_similarity: float = MIN_SIMILARITY
    #: Characters of pinned memory added to the system prompt as a task starts
    #: (``pinned.maxChars``); 0: memories cannot be pinned.
    pinned_max_chars: int = DEFAULT_PINNED_CHARS
    #: ``keep:``: how long a memory is kept after its last change (``180d``); ``None``
    #: (``never``, the default) keeps it until the agent forgets it or a person erases it.
    keep_s: float | None = None
    #: ``embeddings:``: the embedder (``register_embedders``) whose vectors rank recalls by
    #: similarity too; ``None``: full-text recall only.
    embeddings: str | None = None

    @classmethod
    def from_yaml(cls, data: Mapping[str, Any] | None) -> MemoryConfig | None:
        """The settings of a ``memory:`` block; ``None`` when there is none. ``ValueError``
        saying which field is wrong (the loader adds the file and line)."""
        if data is None:
            return None
        recall = data.get("recall") or {}
        pinned = data.get("pinned") or {}
        scopes = tuple(data.get("scopes") or DEFAULT_SCOPES)
        share_with = tuple(data.get("shareWith") or ())
        if share_with and "shared" not in scopes:
            raise ValueError("memory.shareWith: the agent shares memories only in the scope "
                             "'shared': add shared to memory.scopes, or remove shareWith")
        try:
            keep_s = parse_age(str(data.get("keep", "never")))
        except ValueError as exc:
            raise ValueError(f"memory.keep: {exc}") from None
        return cls(scopes=scopes, share_with=share_with,
                   recall_limit=int(recall.get("limit", DEFAULT_RECALL_LIMIT)),
                   recall_max_chars=int(recall.get("maxChars", DEFAULT_RECALL_CHARS)),
                   min_similarity=float(recall.get("minSimilarity", MIN_SIMILARITY)),
                   pinned_max_chars=int(pinned.get("maxChars", DEFAULT_PINNED_CHARS)),
                   keep_s=keep_s, embeddings=data.get("embeddings"))

    def to_json(self) -> dict[str, Any]:
        return {"scopes": list(self.scopes), "shareWith": list(self.share_with),
                "recall": {"limit": self.recall_limit, "maxChars": self.recall_max_chars,
                           "minSimilarity": self.min_similarity},
                "pinned": {"maxChars": self.pinned_max_chars}, "keepSeconds": self.keep_s,
                "embeddings": self.embeddings}


@dataclass(frozen=True)
class MemoryView:
    """Who is looking: an agent, in a run about ``subject`` (``None``: nobody in particular),
    with its ``memory:`` scopes and ``shareWith``. What it sees:

    - ``agent`` memories it wrote;
    - ``user`` memories it wrote about ``subject`` (none without a subject);
    - ``shared`` memories about ``subject`` or about nobody, that it wrote, or that an agent it
      lists in ``shareWith`` wrote while listing it back.
    It changes and forgets only what it sees and wrote itself."""

    agent: str
    subject: str | None
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    share_with: tuple[str, ...] = ()


@dataclass(frozen=True)
class MemoryVector:
    """A text's vector by an embedder (``memory.embeddings``): a memory's, kept with it, or a
    recall query's."""

    embedder: str
    values: tuple[float, ...]


@dataclass(frozen=True)
class NewMemory:
    """A memory the ``remember`` tool writes."""

    agent: str
    scope: str
    subject: str | None
    content: str
    pinned: bool = False
    #: Who may read a ``shared`` memory besides its writer: the writer's ``shareWith``.
    shared_with: tuple[str, ...] = ()
    run_id: str | None = None
    #: Its content's vector (``memory.embeddings``), kept for semantic recall.
    vector: MemoryVector | None = None


#: How a memory write ended, as the store records it once per idempotency key.
WriteOutcome = Literal["remembered", "updated", "forgotten", "not_found"]


@dataclass(frozen=True)
class MemoryWriteResult:
    """What one memory write did (``MemoryStore.remember``/``update_memory``/``forget_memory``).

    ``first`` is ``False`` when the key had written before (a resumed task's call): the result
    is the first write's, and nothing changed now."""

    outcome: WriteOutcome
    memory_id: str | None
    first: bool = True


@dataclass(frozen=True)
class MemoryRecord:
    """One memory as the store keeps it (``toren memory``, ``GET /memories``, ``recall``)."""

    id: str
    agent: str
    scope: str
    subject: str | None
    content: str
    pinned: bool = False
    shared_with: tuple[str, ...] = ()
    run_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    #: A recall's ranking (relevance weighed by recency); ``None`` outside a search.
    score: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "agent": self.agent, "scope": self.scope,
                "subject": self.subject, "content": self.content, "pinned": self.pinned,
                "shared_with": list(self.shared_with), "run_id": self.run_id,
                "created_at": _iso(self.created_at), "updated_at": _iso(self.updated_at),
                "score": self.score}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def check_subject(subject: Any, what: str = "subject") -> str | None:
    """A run's or a filter's subject, checked: ``None``, or 1 to 200 characters without
    control characters. ``ValueError`` saying what is wrong."""
    if subject is None:
        return None
    if not isinstance(subject, str) or not subject:
        raise ValueError(f"{what} must be a non-empty string, such as telegram:12345 or a "
                         "customer id")
    if len(subject) > MAX_SUBJECT_CHARS or _CONTROL.search(subject):
        raise ValueError(f"{what} must be at most {MAX_SUBJECT_CHARS} characters, with no "
                         "control characters")
    return subject


def check_content(content: Any, what: str = "content") -> str:
    """A memory's text, checked: 1 to 4000 characters, no NUL. ``ValueError`` otherwise."""
    if not isinstance(content, str) or not content:
        raise ValueError(f"{what} must be non-empty text")
    if len(content) > MAX_MEMORY_CHARS:
        raise ValueError(f"{what} is {len(content)} characters; a memory holds at most "
                         f"{MAX_MEMORY_CHARS}: keep one fact per memory")
    if "\x00" in content:
        raise ValueError(f"{what} must not contain NUL characters")
    return content


def is_memory_id(text: Any) -> bool:
    """Whether ``text`` can be a memory's id (a UUID): anything else names no memory."""
    return isinstance(text, str) and bool(_UUID.match(text))


def scope_for(config: MemoryConfig, asked: str | None, subject: str | None) -> str:
    """The scope a ``remember`` call writes in: the one it asked for, else ``user`` when the
    run has a subject and the agent may use it, else the first of ``memory.scopes`` that
    needs no subject. ``ValueError`` (the model reads it) when the scope cannot be used."""
    if asked is not None:
        if asked not in config.scopes:
            raise ValueError(f"scope {asked!r} is not one this agent may use "
                             f"({', '.join(config.scopes)})")
        if asked == "user" and subject is None:
            raise ValueError("scope 'user' needs a user: this run has no subject (it was "
                             "started without one). Use another scope or do not remember it")
        return asked
    if subject is not None and "user" in config.scopes:
        return "user"
    for scope in config.scopes:
        if scope != "user":
            return scope
    raise ValueError("this run has no subject (no user to remember things about) and the "
                     "agent's memory.scopes allow only 'user'")


def view_of(agent: str, config: MemoryConfig, subject: str | None) -> MemoryView:
    """What ``agent`` sees in a run about ``subject``."""
    return MemoryView(agent=agent, subject=subject, scopes=config.scopes,
                      share_with=config.share_with)


def _line(record: MemoryRecord) -> str:
    day = record.updated_at.date().isoformat() if record.updated_at else "?"
    where = f"shared by {record.agent}" if record.scope == "shared" else record.scope
    pin = ", pinned" if record.pinned else ""
    return f"- [{record.id}] ({where}{pin}, {day}) {record.content}"


def within_budget(records: Sequence[MemoryRecord], max_chars: int
                  ) -> tuple[list[str], int]:
    """The lines of ``records`` (best first) that fit in ``max_chars`` characters, and how
    many were left out. The first is cut to fit rather than dropped, so a recall that found
    something always shows something."""
    lines: list[str] = []
    used = 0
    for index, record in enumerate(records):
        line = _line(record)
        if used + len(line) + 1 > max_chars:
            if not lines:
                lines.append(line[:max(max_chars - 1, 1)] + "…")
                return lines, len(records) - 1
            return lines, len(records) - index
        lines.append(line)
        used += len(line) + 1
    return lines, 0


def recall_text(records: Sequence[MemoryRecord], max_chars: int, query: str | None) -> str:
    """The ``recall`` result the model reads: the memories found (best first: relevance
    weighed by recency), within the budget."""
    if not records:
        what = f" matches {query!r}" if query else " is kept"
        return (f"No memory{what}. Nothing was found; do not assume anything about it.")
    lines, left = within_budget(records, max_chars)
    head = f"{len(lines)} memor{'y' if len(lines) == 1 else 'ies'} (best first):"
    tail = (f"\n({left} more did not fit in the recall budget; ask a narrower query.)"
            if left else "")
    return head + "\n" + "\n".join(lines) + tail


def pinned_block(records: Sequence[MemoryRecord], max_chars: int) -> str:
    """The block of pinned memories added to the system prompt (empty when none fit)."""
    if not records or max_chars <= 0:
        return ""
    lines, left = within_budget(records, max_chars)
    more = f"\n({left} more pinned memories did not fit; use recall.)" if left else ""
    return ("Pinned memories (what you chose to keep in mind; each has its id for "
            "update_memory and forget):\n" + "\n".join(lines) + more)


def system_prompt(prompt: str, pinned: str | None) -> str:
    """The system prompt with the task's pinned memories after it."""
    return f"{prompt}\n\n{pinned}" if pinned else prompt


def write_text(result: MemoryWriteResult, memory_id: str | None = None) -> tuple[str, bool]:
    """The result the model reads of a write, and whether it is an error."""
    match result.outcome:
        case "remembered":
            return f"Remembered as memory {result.memory_id}.", False
        case "updated":
            return f"Updated memory {result.memory_id}.", False
        case "forgotten":
            return f"Forgot memory {result.memory_id}.", False
    return (f"Error: there is no memory {memory_id or result.memory_id} that you can change "
            "(it was forgotten, a person erased it, or another agent wrote it).", True)
