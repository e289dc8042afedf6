"""Forks at work: the model and prompt a fork's live steps use instead of the agent's.

A fork's copied task streams carry their overrides in ``TaskForked`` (folded into
``TaskState.fork``). A task a workflow fork starts afresh learns them from its queue message
(``payload["fork"]``, added by the orchestrator from the run's ``RunForked``) and records its
own ``TaskForked`` before ``TaskStarted``, so a resume reads them from the log like everything
else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import msgspec

from toren.core import events as ev
from toren.errors import TorenError
from toren.seams.shapes import OutgoingMessage
from toren.seams.store import PromptStore


class _Spec(Protocol):
    @property
    def model(self) -> str: ...

    @property
    def prompt(self) -> str: ...


SpecT = TypeVar("SpecT", bound=_Spec)


class _ForkPayload(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    source_run_id: str
    model: str | None = None
    prompt_sha256: str | None = None


def with_fork(messages: Sequence[OutgoingMessage], fork: ev.RunForked | None
              ) -> list[OutgoingMessage]:
    """``messages`` with the fork's overrides on each task message (unchanged when the run is
    not a fork, or a fork that changes neither model nor prompt)."""
    if fork is None or (fork.model is None and fork.prompt_sha256 is None):
        return list(messages)
    overrides = {"source_run_id": fork.source_run_id, "model": fork.model,
                 "prompt_sha256": fork.prompt_sha256}
    return [dataclasses.replace(m, payload=m.payload | {"fork": overrides})
            if m.kind == "task" else m for m in messages]


def new_task_fork(payload: dict[str, Any]) -> ev.TaskForked | None:
    """The ``TaskForked`` a task starting afresh in a fork records (``None``: not a fork's)."""
    raw = payload.get("fork")
    if raw is None:
        return None
    try:
        found = msgspec.convert(raw, _ForkPayload)
    except msgspec.ValidationError:
        return None  # not a message Toren made: the task runs as the agent defines it
    return ev.TaskForked(source_run_id=found.source_run_id, at_step=0, copied_events=0,
                         model=found.model, prompt_sha256=found.prompt_sha256)


async def forked_spec(spec: SpecT, fork: ev.TaskForked, prompts: PromptStore,
                      agent: str) -> SpecT:
    """``spec`` with the fork's model and prompt; ``TorenError`` when the fork's prompt is not
    kept in the store (it is saved before the fork is created, so only a damaged store)."""
    if fork.model is not None:
        spec = dataclasses.replace(spec, model=fork.model)  # type: ignore[type-var]
    if fork.prompt_sha256 is not None:
        kept = await prompts.load_prompts(agent, [fork.prompt_sha256])
        text = kept.get(fork.prompt_sha256)
        if text is None:
            raise TorenError(f"the fork's system prompt (sha256 {fork.prompt_sha256}) is not "
                             "kept in the database; fork the run again with --prompt")
        spec = dataclasses.replace(spec, prompt=text)  # type: ignore[type-var]
    return spec
