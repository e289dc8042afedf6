"""Forks and diffs: replay a run from any step with a changed prompt, model or agent
definition, and compare two runs step by step (docs/guides/fork-and-replay.md).
``POST /runs/{id}/fork``, ``GET /runs/{a}/diff/{b}``, ``toren jobs fork`` and ``toren jobs diff``
call this service."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from typing import Any

from toren.core import events as ev
from toren.core.decisions import unstorable
from toren.core.events import NewEvent
from toren.core.forking import diff_runs, plan_fork
from toren.core.runs import RunRecord
from toren.core.versions import AgentVersion
from toren.errors import ConfigError, InvalidForkOverride, RunNotFound
from toren.execution.messages import MAIN_TASK, run_tick, task_message
from toren.seams.store.forks import ForkStore
from toren.seams.store.prompts import PromptStore
from toren.seams.store.reader import RunReader

#: The longest system prompt a fork takes (1 MiB of text; prompt.md files are far smaller).
MAX_FORK_PROMPT_CHARS = 1_048_576


class ForksService:
    """Forks of runs and diffs between runs, on the hot tables (``reader``), the store's
    ``ForkStore`` (the fork's copied log) and ``PromptStore`` (a fork's prompt).
    ``runtime.forks``; needs the store open. ``check_model`` is the runtime's: a
    ``ConfigError`` for a model no provider serves."""

    def __init__(self, reader: RunReader, forks: ForkStore, prompts: PromptStore,
                 check_model: Callable[[str], object]) -> None:
        self._reader = reader
        self._forks = forks
        self._prompts = prompts
        self._check_model = check_model

    async def _run(self, run_id: str) -> RunRecord:
        record = await self._reader.get_run(run_id)
        if record is None:
            raise RunNotFound(f"no run {run_id!r} in this database (see `toren jobs list`)")
        return record

    async def fork(self, run_id: str, at_step: int, *, prompt: str | None = None,
                   model: str | None = None, fork_id: str | None = None,
                   version: AgentVersion | None = None,
                   requested_by: str | None = None) -> RunRecord:
        """Create a fork of run ``run_id``: a new run whose log starts as a copy of the
        source's up to ``at_step`` (a step of a single-task run, a wave of a workflow run),
        then goes on live, with ``prompt`` (system prompt text) and ``model`` instead of the
        agent's when given. The copied steps make no model call and cost nothing; the source
        run is only read. A worker serving the agent works the fork (its tools and the rest
        of its definition are the worker's). Returns the fork, queued.

        ``fork_id`` (a new UUID) is the fork's id, decided by the caller (an eval's replay,
        so that a retry finds the fork it made); ``version``: the fork goes on live on that
        version of the agent rather than the source's, recorded as an
        ``AgentVersionUpgraded`` (``requested_by``) in the transaction that creates it.

        Raises ``RunNotFound``, ``InvalidForkStep`` (a step the run does not have),
        ``ForkRefused`` (a session, or a step the run has not completed yet) and
        ``InvalidForkOverride`` (a model no provider serves, an empty or unstorable prompt).
        """
        source = await self._run(run_id)
        if model is not None:
            if not isinstance(model, str) or not model.strip():
                raise InvalidForkOverride("the model to fork with must be a model id such as "
                                          "anthropic/claude-sonnet-4-5")
            try:
                self._check_model(model)
            except ConfigError as exc:
                raise InvalidForkOverride(f"cannot fork with model {model!r}: "
                                          f"{exc.message}") from exc
        digest = None
        if prompt is not None:
            digest = _check_prompt(prompt)
        events = await self._reader.load_events(source.agent, source.id)
        plan = plan_fork(source, events, at_step, model=model, prompt_sha256=digest)
        if prompt is not None and digest is not None:
            # kept before the fork names it, as a task keeps its prompt before TaskStarted
            await self._prompts.save_prompt(source.agent, digest, prompt)
        forked = ev.RunForked(source_run_id=source.id, at_step=at_step, unit=plan.unit,
                              copied_events=plan.copied_events, model=plan.model,
                              prompt_sha256=plan.prompt_sha256)
        # the fork is about the same person as its source (memory:'s subject)
        subject = next((e.data.get("subject") for e in events
                        if e.stream == ev.RUN_STREAM and e.type == ev.RUN_CREATED), None)
        run_events = [NewEvent.of(ev.RunCreated(agent=source.agent, input=source.input,
                                                idempotency_key=None, subject=subject)),
                      NewEvent.of(forked), *plan.run_events]
        if version is not None and version.hash != source.agent_version:
            # last of the run stream, so the worker that takes the fork reads it on this one
            run_events.append(NewEvent.of(ev.AgentVersionUpgraded(
                version=version.hash, human_version=version.human, reason="requested",
                from_version=source.agent_version, requested_by=requested_by)))
        if plan.unit == "step":
            first = task_message(MAIN_TASK, None, source.input)
        else:  # the orchestrator re-executes workflow.py: waves 1..N from the log, then live
            first = run_tick(f"forked from {source.id} at wave {at_step}")
        fork_id = fork_id or str(uuid.uuid4())
        await self._forks.create_fork(source.agent, fork_id, source.input,
                                      streams={ev.RUN_STREAM: run_events, **plan.task_events,
                                               **({ev.SIGNALS_STREAM: plan.signal_events}
                                                  if plan.signal_events else {})},
                                      messages=[first])
        return await self._run(fork_id)

    async def fork_of(self, run_id: str) -> dict[str, Any] | None:
        """What run ``run_id`` is a fork of: its ``RunForked`` (``source_run_id``, ``at_step``,
        ``unit``, ``copied_events``, ``model``, ``prompt_sha256``), or ``None`` for a run that
        is not a fork. ``RunNotFound`` for no such run."""
        record = await self._run(run_id)
        stream = await self._reader.load_stream(record.agent, record.id, ev.RUN_STREAM)
        return next((e.data for e in stream if e.type == ev.RUN_FORKED), None)

    async def forks_of(self, run_id: str) -> list[RunRecord]:
        """The forks made from run ``run_id``, oldest first (``RunReader.fork_runs``).
        ``RunNotFound`` for no such run; ``NotImplementedError`` from a store that does not
        list forks."""
        record = await self._run(run_id)
        return await self._reader.fork_runs(record.agent, record.id)

    async def diff(self, run_a: str, run_b: str) -> dict[str, Any]:
        """Where runs ``run_a`` and ``run_b`` diverge: every task's steps side by side (the
        model's text and tool calls, the tool results), the first step that differs, and how
        each run ended (``toren.core.forking.diff_runs``). ``RunNotFound`` for either."""
        a = await self._run(run_a)
        b = await self._run(run_b)
        a_events = await self._reader.load_events(a.agent, a.id)
        b_events = await self._reader.load_events(b.agent, b.id)
        return diff_runs(a, a_events, b, b_events)


def _check_prompt(prompt: Any) -> str:
    """The SHA-256 of a fork's system prompt, or an ``InvalidForkOverride`` saying what is
    wrong."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidForkOverride("the prompt to fork with is empty: give the text of a "
                                  "system prompt (toren jobs fork --prompt FILE)")
    if len(prompt) > MAX_FORK_PROMPT_CHARS:
        raise InvalidForkOverride(f"the prompt to fork with has {len(prompt):,} characters; "
                                  f"at most {MAX_FORK_PROMPT_CHARS:,} are taken")
    problem = unstorable(prompt)
    if problem is not None:
        raise InvalidForkOverride(f"the prompt to fork with cannot be stored: {problem}")
    return hashlib.sha256(prompt.encode()).hexdigest()
