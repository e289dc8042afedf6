"""Evals: a dataset run against one version of an agent, every case a durable run, graded and
reported (docs/guides/evals.md). ``toren eval`` and ``/evals`` call this service.

An eval survives being killed at any moment: each case run is claimed in the database before
its run is created (``EvalStore.claim_case_run``), and the run is created with an idempotency
key made of the eval, the case and the repeat, so resuming finds the run instead of starting a
second; a run that was in flight continues from its log (a completed model call is never made
again), and a graded case is never run or graded again.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import logging
import re
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from toren.agents import AgentSpec
from toren.core import events as ev
from toren.core.eval_cases import Case, Dataset, Grader
from toren.core.evals import (
    CaseRun,
    Check,
    EvalRecord,
    Trajectory,
    compare,
    fork_run_id,
    idempotency_key,
    plain_check,
    report,
    trajectory,
    verdict,
)
from toren.core.events import Event
from toren.core.messages import Message, ModelRequest
from toren.core.run_search import InvalidRunSearch, parse_run_search
from toren.core.runs import RunRecord, RunSearch, RunTotals
from toren.core.versions import AgentVersion
from toren.errors import (
    ConfigError,
    EvalDatasetError,
    EvalMismatch,
    EvalNotFound,
    EvalVersionNotFound,
    ForkRefused,
    InvalidEvalRequest,
    InvalidForkStep,
    ProviderError,
    RunNotFound,
)
from toren.seams.model import Model
from toren.seams.store.evals import EvalLeaseStore, EvalStore
from toren.seams.store.migrations import Migrator
from toren.seams.store.versions import AgentVersionStore

log = logging.getLogger(__name__)

#: The most case runs of one eval at once.
MAX_CONCURRENCY = 64
#: The most repeats of each case.
MAX_REPEAT = 100
#: The highest step ``fork_at`` may name (a replay forks a recorded run there).
MAX_FORK_AT = 100_000
#: The most recorded runs a dataset of recorded runs holds.
MAX_RECORDED_RUNS = 10_000
#: Tries of a rubric's model call that fails with a retryable error.
RUBRIC_TRIES = 3
#: What a rubric grader's model is asked (the rubric, the case and the run's output follow).
RUBRIC_SYSTEM = (
    "You grade the answer of an AI agent against a rubric. Read the rubric, the task the "
    "agent was given, the expected answer if there is one, and the agent's answer. Decide "
    "whether the answer meets the rubric. Reply with JSON only: {\"passed\": true or false, "
    "\"score\": a number from 0 to 1, \"reason\": one sentence}.")
RUBRIC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"passed": {"type": "boolean"}, "score": {"type": "number"},
                   "reason": {"type": "string"}},
    "required": ["passed", "reason"],
}


@dataclass(frozen=True)
class Progress:
    """What an eval at work has done: case runs ``graded`` of ``total``, ``passed`` so far,
    ``running`` now, and the case run just graded (``None`` for the first report)."""

    total: int
    graded: int
    passed: int
    running: int
    last: CaseRun | None = None


class EvalFunctions:
    """The grading functions of an ``evals.py`` (a file of plain Python functions), imported
    at the first ``function:`` grader that needs them."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._module: Any = None

    def get(self, name: str) -> Callable[..., Any]:
        """The function ``name``; ``ConfigError`` saying where it was looked for."""
        if self.path is None or not self.path.is_file():
            raise ConfigError(f"a case is graded by function: {name}, but there is no evals.py "
                              "(next to the dataset, or in the agent's directory; or give "
                              "--evals FILE)")
        if self._module is None:
            module_name = f"toren_evals_{uuid.uuid4().hex[:8]}"
            spec = importlib.util.spec_from_file_location(module_name, self.path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                raise ConfigError(f"{self.path}: cannot be imported: "
                                  f"{type(exc).__name__}: {exc}") from exc
            self._module = module
        found: Callable[..., Any] | None = getattr(self._module, name, None)
        if not callable(found):
            raise ConfigError(f"{self.path} has no function {name!r} (a case's function: "
                              "grader names it)")
        return found

    def check_defined_here(self, dataset: Dataset) -> None:
        """Every ``function:`` grader of ``dataset`` names a public function defined in this
        ``evals.py`` itself (not one it imported, nor a ``_private`` one): what a dataset
        sent over HTTP may call (``POST /evals``). ``EvalDatasetError`` otherwise."""
        for name in sorted({g.value for c in dataset.cases for g in c.graders
                            if g.kind == "function"}):
            found = self.get(name)
            if name.startswith("_") or getattr(found, "__module__", None) != \
                    self._module.__name__:
                raise EvalDatasetError(f"function: {name} is not a function defined in "
                                       f"{self.path.name if self.path else 'evals.py'} (only "
                                       "its own public functions grade evals sent over HTTP)")


class EvalsService:
    """Evals on the store's ``EvalStore``: started, worked (case runs created through the
    runtime's run-start path, so they are ordinary durable runs of the agent), graded,
    reported and compared. ``runtime.evals``; needs the store open, and workers to work the
    case runs (the eval's process, or any worker of the agent).

    Args:
        store: where evals and their case runs are kept.
        versions: where agent versions are kept (an eval of a stored version).
        registered: which agents the database has (their versions can be read).
        agents: the served definitions, by name (an eval runs the one served here).
        start_run: ``Runtime.start_run`` (agent, input, idempotency key[, the definition to
            pin the run to when it is not the served one]) -> run id.
        get_run: the run's current row.
        run_events: every event of a run.
        totals: each run's ``RunTotals``.
        model: the ``Model`` for a model id (a rubric's grader).
        fork: ``ForksService.fork`` (replays by fork, ``fork_at``).
        search: ``RunsService.search`` (datasets made from recorded runs).
        load_version: ``AgentVersions.load``: a kept version of an agent served here, as a
            definition (an eval of another version than the served one).
        derive_with_model: ``AgentVersions.with_model``: a kept version with another model,
            kept as a version of its own (an eval's ``model``).
        leases: where the API servers' leases on the evals they work are kept (the eval
            keeper, ``toren.server.evals.EvalKeeper``, through ``claim_leases`` and the rest).
    """

    def __init__(self, store: EvalStore, versions: AgentVersionStore, registered: Migrator,
                 agents: Mapping[str, AgentSpec], *,
                 start_run: Callable[..., Awaitable[str]],
                 get_run: Callable[[str], Awaitable[RunRecord]],
                 run_events: Callable[[RunRecord], Awaitable[list[Event]]],
                 totals: Callable[[Sequence[RunRecord]], Awaitable[dict[str, RunTotals]]],
                 model: Callable[[str], Model],
                 fork: Callable[..., Awaitable[RunRecord]] | None = None,
                 search: Callable[[RunSearch], Awaitable[Any]] | None = None,
                 load_version: Callable[[str, str], Awaitable[AgentSpec]] | None = None,
                 derive_with_model: Callable[[str, str, str], Awaitable[AgentSpec]] | None
                 = None, leases: EvalLeaseStore | None = None) -> None:
        self._store = store
        self._versions = versions
        self._registered = registered
        self._agents = agents
        self._start_run = start_run
        self._get_run = get_run
        self._run_events = run_events
        self._totals = totals
        self._model = model
        self._fork = fork
        self._search = search
        self._load_version = load_version
        self._derive_with_model = derive_with_model
        self._leases = leases

    # -- leases: which API server works an eval started over HTTP ---------------------------------

    def _lease_store(self) -> EvalLeaseStore:
        if self._leases is None:
            raise ConfigError("this runtime's evals were set up without a lease store: evals "
                              "started over HTTP need the store's EvalLeaseStore")
        return self._leases

    async def claim_leases(self, holder: str, agents: Sequence[str], *, ttl_s: float,
                           eval_id: str | None = None, skip: Sequence[str] = ()) -> list[str]:
        """The evals whose lease ``holder`` took (``EvalLeaseStore.claim_eval_leases``): the
        eval keeper's claim at start, on each beat, and for an eval started or resumed."""
        return await self._lease_store().claim_eval_leases(holder, agents, ttl_s=ttl_s,
                                                           eval_id=eval_id, skip=skip)

    async def renew_leases(self, holder: str, eval_ids: Sequence[str], *,
                           ttl_s: float) -> list[str]:
        """Those of ``eval_ids`` whose lease ``holder`` still held, extended by ``ttl_s``."""
        return await self._lease_store().renew_eval_leases(holder, eval_ids, ttl_s=ttl_s)

    async def release_lease(self, holder: str, eval_id: str) -> None:
        """Let the eval's lease go if ``holder`` holds it (another server may take it)."""
        await self._lease_store().release_eval_lease(holder, eval_id)

    async def lease_holder(self, eval_id: str) -> str | None:
        """Who works the eval now (an unexpired lease's holder), or ``None``."""
        return await self._lease_store().eval_lease(eval_id)

    # -- reading ---------------------------------------------------------------------------------

    async def get(self, eval_id: str) -> EvalRecord:
        """The eval; ``EvalNotFound`` if there is none with that id."""
        found = await self._store.get_eval(eval_id)
        if found is None:
            raise EvalNotFound(f"no eval {eval_id!r} in this database (see `toren eval list`)")
        return found

    async def list(self, *, agent: str | None = None, limit: int = 50,
                   before: str | None = None) -> list[EvalRecord]:
        """Evals, newest first (``EvalStore.list_evals``)."""
        return await self._store.list_evals(agent=agent, limit=limit, before=before)

    async def report(self, eval_id: str) -> dict[str, Any]:
        """The eval's report (``toren.core.evals.report``): pass rates, per case and tag,
        flaky cases, cost and latency distributions."""
        record = await self.get(eval_id)
        return report(record, await self._store.case_runs(record.id))

    async def compare(self, eval_a: str, eval_b: str) -> dict[str, Any]:
        """What changed from eval ``eval_a`` (the baseline) to ``eval_b``
        (``toren.core.evals.compare``)."""
        return compare(await self.report(eval_a), await self.report(eval_b))

    async def stored_version(self, agent: str, version: str, *,
                             option: str = "--version") -> AgentVersion:
        """The kept version of ``agent`` whose hash starts with ``version`` (4 characters at
        least) or whose ``version:`` it is, with its files; ``EvalVersionNotFound`` when none
        matches, ``ConfigError`` when several do (both naming ``option``)."""
        if agent not in await self._registered.registered_agents():
            raise EvalVersionNotFound(f"{option} {version[:100]}: this database has no agent "
                                      f"{agent!r} (a version is kept when a process serving "
                                      "it starts a run)")
        kept = await self._versions.list_agent_versions(agent)
        wanted = version.strip().lower()
        matches = {v.hash for v in kept
                   if (len(wanted) >= 4 and v.hash.startswith(wanted))
                   or v.human_version == version}
        if len(matches) != 1:
            found = "several versions match" if matches else "no kept version matches"
            raise (EvalVersionNotFound if not matches else ConfigError)(
                f"{option} {version[:100]}: {found} for agent {agent!r}; give at least 4 "
                f"characters of a hash from `toren agents versions {agent}`")
        stored = await self._versions.load_agent_version(agent, matches.pop())
        if stored is None:  # listed a moment ago: only a damaged store loses it
            raise EvalVersionNotFound(f"{option} {version[:100]}: the files of that version of "
                                      f"{agent!r} are not in this database")
        return stored

    async def definition(self, agent: str, *, version: str | None = None,
                         model: str | None = None, options: tuple[str, str] = ("--version",
                                                                                "--model")
                         ) -> AgentSpec:
        """The definition an eval of ``agent`` runs without serving it itself: the served one,
        or the kept ``version`` (``stored_version``), with ``model`` instead of its own
        (``AgentVersions.with_model``, as ``toren eval run --model`` makes it: a version of its
        own, kept). Its case runs are pinned to it and run by any worker of the agent, which
        loads it from the database. ``InvalidEvalRequest`` for a model no provider serves, or
        when the served definition says ``onChange: upgrade`` (its workers would move the
        case runs to it); ``EvalVersionNotFound`` for a version not kept. ``options``: what
        the errors call the version and the model (the CLI's options, or ``POST /evals``'
        fields)."""
        served = self._served(agent)
        assert served.version is not None
        base = (served.version.hash if version is None
                else (await self.stored_version(agent, version, option=options[0])).hash)
        if model is not None:
            try:
                self._model(model)
            except ConfigError as exc:
                raise InvalidEvalRequest(f"{options[1]} {model[:100]!r} cannot be used: "
                                         f"{exc.message}") from None
        if base == served.version.hash and model is None:
            return served
        if served.on_change == "upgrade":
            raise InvalidEvalRequest(
                f"{options[0] if version is not None else options[1]}: the definition of "
                f"{agent} served here says onChange: upgrade, so its workers "
                "would move the eval's case runs to it: evaluate another version or model with "
                "`toren eval run --version/--model`, which serves the definition itself")
        assert self._load_version is not None and self._derive_with_model is not None, \
            "evals of other definitions need the AgentVersions loader"
        if model is not None:
            return await self._derive_with_model(agent, base, model)
        return await self._load_version(agent, base)

    async def recorded_runs(self, agent: str, filters: Mapping[str, str], *,
                            since: str | None = None, until: str | None = None,
                            limit: int = 50, graders: Sequence[Grader] = (),
                            label: str = "", option: str = "--from-runs") -> Dataset:
        """The dataset of ``agent``'s recorded runs (``toren eval run --from-runs``, and
        ``from_runs`` of ``POST /evals``): ``filters`` (``RUN_FILTERS``, and ``agent`` naming
        the agent itself), ``since``/``until`` (``7d``, ``12h``, or ISO 8601), at most
        ``limit`` runs, newest first (``runs_dataset``). Errors name ``option``:
        ``ConfigError`` for an unknown filter, ``InvalidRunSearch`` for a bad value,
        ``EvalDatasetError`` when no run matches."""
        found = recorded_runs_filters(filters, agent, since, until, option=option)
        status = found.pop("status", "completed")
        schedule = found.pop("schedule", None)
        if not 1 <= limit <= MAX_RECORDED_RUNS:
            raise ConfigError(f"{option}: the limit of runs must be 1 to {MAX_RECORDED_RUNS}, "
                              f"not {limit}")
        search = parse_run_search(found, agents=(agent,), status=status, schedule=schedule,
                                  limit=limit)
        return await self.runs_dataset(search, graders=graders, option=option,
                                       name=f"runs of {agent}" + (f" ({label})" if label
                                                                  else ""))

    # -- running ---------------------------------------------------------------------------------

    async def create(self, dataset: Dataset, agent: str, *, model: str | None = None,
                     repeat: int = 1, concurrency: int = 4, grader_model: str | None = None,
                     source: str = "", functions: str | None = None,
                     fork_at: int | None = None, definition: AgentSpec | None = None,
                     auto_resume: bool = False) -> EvalRecord:
        """Keep a new eval of ``dataset`` against the served definition of ``agent`` (whose
        model is ``model`` when the eval overrides it: the caller serves a definition that
        says so); ``functions``: the absolute path of the ``evals.py`` that grades
        ``function:`` graders; ``fork_at``: replay each case (every one made from a
        recorded run: ``runs_dataset``) as a fork of its run at that step, on this version;
        ``definition``: another definition of the agent than the served one (``definition``
        makes it); ``auto_resume``: any server serving the agent goes on with it after a
        restart (``toren.server.evals``). Nothing runs until ``work``. ``ConfigError`` for
        a bad repeat, concurrency or grader model, or an agent not served here."""
        spec = self._served(agent) if definition is None else definition
        if not 1 <= repeat <= MAX_REPEAT:
            raise ConfigError(f"--repeat must be 1 to {MAX_REPEAT}, not {repeat}")
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise ConfigError(f"--concurrency must be 1 to {MAX_CONCURRENCY}, not {concurrency}")
        rubric_models = {g.model or grader_model for c in dataset.cases for g in c.graders
                         if g.kind == "rubric"}
        if None in rubric_models:
            raise EvalDatasetError("a case has a rubric: grader without model:; give "
                                   "--grader-model MODEL (the model that grades rubrics)")
        for model_id in sorted(m for m in rubric_models if m is not None):
            try:
                self._model(model_id)  # now, not after the runs: a model no provider serves
            except ConfigError as exc:
                raise EvalDatasetError(f"a rubric's model {model_id!r} cannot be used: "
                                       f"{exc.message}") from None
        _check_functions(dataset, EvalFunctions(Path(functions) if functions else None))
        if fork_at is not None:
            if (isinstance(fork_at, bool) or not isinstance(fork_at, int)
                    or not 0 <= fork_at <= MAX_FORK_AT):
                raise ConfigError(f"--fork-at must be a step from 0 to {MAX_FORK_AT}, not "
                                  f"{fork_at!r}")
            loose = [case.id for case in dataset.cases if case.from_run is None]
            if loose:
                raise ConfigError(f"--fork-at replays recorded runs, but case {loose[0]!r} "
                                  "was not made from one: use --from-runs")
        assert spec.version is not None
        record = EvalRecord(id=str(uuid.uuid4()), agent=agent, dataset=dataset,
                            version=spec.version.hash, human_version=spec.version.human,
                            model=model, repeat=repeat, concurrency=concurrency,
                            grader_model=grader_model, source=source,
                            functions=functions, fork_at=fork_at, auto_resume=auto_resume)
        return await self._store.create_eval(record)

    async def eval_definition(self, record: EvalRecord) -> AgentSpec:
        """The definition ``record``'s case runs are pinned to: the served one when it is the
        eval's version, else that version loaded from the database. ``EvalMismatch`` when
        the served definition says ``onChange: upgrade`` (its workers would move the case
        runs off the eval's version)."""
        spec = self._served(record.agent)
        assert spec.version is not None
        if spec.version.hash == record.version:
            return spec
        if spec.on_change == "upgrade" or self._load_version is None:
            raise EvalMismatch(
                f"eval {record.id} runs version {record.version[:12]} of {record.agent}; the "
                f"definition served here is {spec.version.short}"
                + (" and says onChange: upgrade (its workers would move the case runs to it)"
                   if spec.on_change == "upgrade" else "")
                + f". Resume it with `toren eval resume {record.id}`: it loads and serves "
                "the eval's version from the database")
        return await self._load_version(record.agent, record.version)

    def _served(self, agent: str) -> AgentSpec:
        spec = self._agents.get(agent)
        if spec is None:
            raise ConfigError(f"agent {agent!r} is not served here; give its directory with "
                              "--dir, or a stored version with --version")
        if spec.version is None:
            raise ConfigError(f"agent {agent!r} has no version to pin its case runs to")
        return spec

    async def work(self, eval_id: str, *,
                   progress: Callable[[Progress], None] | None = None) -> dict[str, Any]:
        """Run and grade every case run of the eval not graded yet, ``concurrency`` at a
        time, then mark it finished; its report. Resumable: call it again after any stop.
        Its case runs are pinned to the eval's version: the served definition, or one loaded
        from the database (``eval_definition``)."""
        record = await self.get(eval_id)
        spec = await self.eval_definition(record)
        functions = EvalFunctions(Path(record.functions) if record.functions else None)
        _check_functions(record.dataset, functions)
        kept = {run.key: run for run in await self._store.case_runs(record.id)}
        todo = [(case, repeat) for case in record.dataset.cases
                for repeat in range(1, record.repeat + 1)
                if (found := kept.get((case.id, repeat))) is None or found.grade is None]
        total = len(record.dataset.cases) * record.repeat
        state = {"graded": total - len(todo), "running": 0,
                 "passed": sum(1 for run in kept.values()
                               if run.grade is not None and run.grade.get("passed"))}
        if progress is not None:
            progress(Progress(total, state["graded"], state["passed"], 0))
        queue: asyncio.Queue[tuple[Case, int]] = asyncio.Queue()
        for item in todo:
            queue.put_nowait(item)

        async def worker() -> None:
            while not queue.empty():
                case, repeat = queue.get_nowait()
                state["running"] += 1
                try:
                    graded = await self._run_case(record, spec, case, repeat, functions)
                finally:
                    state["running"] -= 1
                state["graded"] += 1
                state["passed"] += bool(graded.grade and graded.grade.get("passed"))
                if progress is not None:
                    progress(Progress(total, state["graded"], state["passed"],
                                      state["running"], graded))

        # a failure (the database gone, a rubric's provider down) stops the others too, and
        # is raised as itself: the runs go on, and `toren eval resume` picks them up
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(min(record.concurrency, len(todo) or 1)):
                    group.create_task(worker())
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None
        await self._store.finish_eval(record.id)
        return await self.report(record.id)

    async def _run_case(self, record: EvalRecord, spec: AgentSpec, case: Case, repeat: int,
                        functions: EvalFunctions) -> CaseRun:
        claimed = await self._store.claim_case_run(record.id, case.id, repeat)
        if claimed.grade is not None:
            return claimed
        run_id = claimed.run_id
        if run_id is None:
            try:
                run_id = await self._start_case_run(record, spec, case, repeat)
            except (InvalidForkStep, ForkRefused, RunNotFound) as exc:
                # a recorded run that cannot be forked there: the case fails, saying why
                lost = Trajectory("not_run", None, error=exc.message)
                grade = verdict(case, lost, [Check("fork", False, exc.message)])
                await self._store.grade_case_run(record.id, case.id, repeat, grade)
                return CaseRun(record.id, case.id, repeat, None, grade, claimed.created_at)
            await self._store.set_case_run(record.id, case.id, repeat, run_id)
        ended = await self._wait(run_id)
        grade = await self.grade(case, ended, record, functions)
        await self._store.grade_case_run(record.id, case.id, repeat, grade)
        return CaseRun(record.id, case.id, repeat, run_id, grade, claimed.created_at)

    async def _start_case_run(self, record: EvalRecord, spec: AgentSpec, case: Case,
                              repeat: int) -> str:
        """Create the case run: a run of the case's input, or (``fork_at``) a fork of the
        recorded run it was made from. Either way its identity is decided before it is made
        (an idempotency key, a fork id), so a resume that comes here again after a crash
        finds it rather than make a second."""
        if record.fork_at is None or case.from_run is None:
            key = idempotency_key(record.id, case.id, repeat)
            if spec is self._agents.get(record.agent):
                return await self._start_run(record.agent, case.input, key)
            return await self._start_run(record.agent, case.input, key, spec)
        assert self._fork is not None, "replays by fork need the ForksService"
        fork_id = fork_run_id(record.id, case.id, repeat)
        try:
            return (await self._get_run(fork_id)).id  # made before a crash
        except RunNotFound:
            pass
        try:
            made = await self._fork(case.from_run, record.fork_at, fork_id=fork_id,
                                    version=spec.version, requested_by=f"eval:{record.id}")
        except (InvalidForkStep, ForkRefused, RunNotFound):
            raise
        except Exception:
            try:  # another process working this eval made it first
                return (await self._get_run(fork_id)).id
            except RunNotFound:
                pass
            raise
        return made.id

    async def runs_dataset(self, search: RunSearch, *, name: str,
                           graders: Sequence[Grader] = (),
                           option: str = "--from-runs") -> Dataset:
        """A dataset of recorded runs (``--from-runs``): a case per run ``search`` finds
        (newest first, at most ``search.limit``; an eval's own case runs left out), its input
        the run's, its ``expected`` the run's output, named ``run:<run id>``, with
        ``graders`` (``expected`` adds ``exact`` unless they hold an exact, schema or
        function grader). ``EvalDatasetError`` when no run matches."""
        assert self._search is not None, "datasets of runs need the RunsService"
        wanted = search.limit
        found: list[RunRecord] = []
        page_search = replace(search, limit=min(200, max(wanted, 1)))
        while len(found) < wanted:
            page = await self._search(page_search)
            found += [run for run in page.items
                      if not (run.idempotency_key or "").startswith("eval:")]
            if page.after is None and page.next_offset is None:
                break
            page_search = replace(page_search, before=page.after,
                                  offset=page.next_offset or 0)
        found = found[:wanted]
        if not found:
            raise EvalDatasetError(f"{option}: no run matches (an eval's own case runs are "
                                   "left out); see `toren jobs list`")
        reads_expected = any(g.kind in ("exact", "function", "schema") for g in graders)
        cases = []
        for run in found:
            own = tuple(graders)
            if run.output is not None and not reads_expected:
                own = (Grader("exact", run.output), *own)
            cases.append(Case(f"run:{run.id}", run.input, run.output, ("from-runs",), own,
                              f"run {run.id}", run.id))
        return Dataset(name, tuple(cases))

    async def _wait(self, run_id: str) -> RunRecord:
        delay = 0.05
        while True:
            found = await self._get_run(run_id)
            if found.status in ev.TERMINAL_STATUSES:
                return found
            await asyncio.sleep(delay)
            delay = min(0.5, delay * 1.5)

    # -- grading ---------------------------------------------------------------------------------

    async def grade(self, case: Case, run: RunRecord, record: EvalRecord,
                    functions: EvalFunctions) -> dict[str, Any]:
        """The grade of ``case``'s ended ``run``: every grader's check, the verdict and the
        trajectory (``toren.core.evals.verdict``)."""
        totals = (await self._totals([run])).get(run.id, RunTotals())
        path = trajectory(run, await self._run_events(run), totals)
        checks = []
        for grader in case.graders:
            if grader.kind == "function":
                checks.append(await self._function_check(grader, case, path, functions))
            elif grader.kind == "rubric":
                checks.append(await self._rubric_check(grader, case, path,
                                                       grader.model or record.grader_model))
            else:
                checks.append(plain_check(grader, path))
        return verdict(case, path, checks)

    async def _function_check(self, grader: Grader, case: Case, path: Trajectory,
                              functions: EvalFunctions) -> Check:
        function = functions.get(grader.value)
        offered = {"output": path.output, "expected": case.expected, "input": case.input,
                   "case": case.to_json(), "trajectory": path.to_json()}
        try:
            parameters: Mapping[str, inspect.Parameter] = inspect.signature(function).parameters
        except (TypeError, ValueError):
            parameters = {}
        takes_all = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
        arguments = {k: v for k, v in offered.items() if takes_all or k in parameters}
        try:
            if inspect.iscoroutinefunction(function):
                result = await function(**arguments)
            else:  # plain user code may block: keep the event loop (and the runs) going
                result = await asyncio.to_thread(function, **arguments)
        except Exception as exc:
            return Check("function", False, f"{grader.value} raised {type(exc).__name__}: "
                         f"{exc}")
        return _function_result(grader.value, result)

    async def _rubric_check(self, grader: Grader, case: Case, path: Trajectory,
                            model_id: str | None) -> Check:
        assert model_id is not None  # create() refuses a rubric without a model
        model = self._model(model_id)
        parts = [f"Rubric:\n{grader.value}", f"Task given to the agent:\n{_text(case.input)}"]
        if case.expected is not None:
            parts.append(f"Expected answer:\n{_text(case.expected)}")
        parts.append(f"The agent's answer:\n{path.text or '(no answer: the run ended '}"
                     + ("" if path.text else f"{path.status})"))
        request = ModelRequest(model=model_id, system=RUBRIC_SYSTEM,
                               messages=(Message("user", "\n\n".join(parts)),),
                               max_tokens=1024, output_schema=RUBRIC_SCHEMA)
        for attempt in range(1, RUBRIC_TRIES + 1):
            try:
                response = await model.complete(request)
                break
            except ProviderError as exc:
                if not exc.retryable or attempt == RUBRIC_TRIES:
                    raise
                await asyncio.sleep(2 ** attempt)
        cost = (model.pricing.cost(response.usage) if model.pricing is not None
                else response.cost_usd or 0.0)
        try:
            answer = json.loads(response.text)
            passed = bool(answer["passed"])
            reason = str(answer.get("reason", ""))
            score = answer.get("score")
            score = (max(0.0, min(1.0, float(score))) if isinstance(score, int | float)
                     and not isinstance(score, bool) else (1.0 if passed else 0.0))
        except (ValueError, KeyError, TypeError):
            return Check("rubric", False, f"{model_id} did not answer with a verdict: "
                         f"{response.text[:120]!r}", cost_usd=cost)
        return Check("rubric", passed, f"{model_id}: {reason}", score, cost_usd=cost)


#: What a dataset of recorded runs filters by (``GET /runs``' search parameters, and the status).
RUN_FILTERS = ("status", "version", "schedule", "q")
_RELATIVE = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_SCHEDULE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


def recorded_runs_filters(filters: Mapping[str, str], agent: str, since: str | None,
                          until: str | None, *, option: str = "--from-runs") -> dict[str, str]:
    """The search parameters of a dataset of recorded runs: ``filters`` checked (``agent``
    may only name ``agent``; ``status`` a run status; ``schedule`` a schedule's name),
    ``since`` and ``until`` relative (``7d``, ``12h``, ``30m``, ``2w``) made absolute.
    ``ConfigError`` naming ``option`` and the filter that is wrong."""
    found: dict[str, str] = {}
    for key, text in filters.items():
        if not isinstance(text, str) or not text:
            raise ConfigError(f"{option} {key}: give a value, as in status=completed")
        if key == "agent":
            if text != agent:
                raise ConfigError(f"{option} agent={text[:100]}: the runs must be of the agent "
                                  f"evaluated ({agent}); replays run their inputs on its "
                                  "version")
            continue
        if key not in RUN_FILTERS:
            raise ConfigError(f"{option}: unknown filter {key[:100]!r}; filters: agent, "
                              f"{', '.join(RUN_FILTERS)} (and since, until)")
        if key == "status" and text not in ev.RUN_STATUSES:
            raise ConfigError(f"{option} status={text[:100]}: a run's status is one of "
                              f"{', '.join(ev.RUN_STATUSES)}")
        if key == "schedule" and not _SCHEDULE_NAME.match(text):
            raise ConfigError(f"{option} schedule={text[:100]}: a schedule's name is lowercase "
                              "letters, digits, - and _, starting with a letter")
        found[key] = text
    for name, moment in (("since", since), ("until", until)):
        if moment:
            relative = _RELATIVE.fullmatch(moment.strip())
            if relative:
                try:
                    delta = timedelta(**{_UNITS[relative[2]]: int(relative[1])})
                    moment = (datetime.now(UTC) - delta).isoformat()
                except OverflowError:
                    raise InvalidRunSearch(f"invalid_{name}", f"{option}: {name} "
                                           f"{moment[:40]} is too far back") from None
            found[name] = moment
    return found


def _check_functions(dataset: Dataset, functions: EvalFunctions) -> None:
    """A missing ``evals.py`` or function fails before any case runs."""
    for name in sorted({g.value for c in dataset.cases for g in c.graders
                        if g.kind == "function"}):
        functions.get(name)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _function_result(name: str, result: Any) -> Check:
    """A grading function's answer as a check: ``True``/``False``, a score from 0 to 1 (passes
    at 0.5 or more), ``(passed, reason)`` or ``{"passed", "score", "reason"}``."""
    if isinstance(result, bool):
        return Check("function", result, "" if result else f"{name} said no")
    if isinstance(result, int | float):
        score = max(0.0, min(1.0, float(result)))
        return Check("function", score >= 0.5, f"{name}: score {score:g}", score)
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], bool):
        return Check("function", result[0], f"{name}: {result[1]}")
    if isinstance(result, dict) and isinstance(result.get("passed"), bool):
        given = result.get("score")
        return Check("function", result["passed"],
                     f"{name}: {result.get('reason', '')}".rstrip(": "),
                     float(given) if isinstance(given, int | float)
                     and not isinstance(given, bool) else None)
    return Check("function", False, f"{name} returned {type(result).__name__}; return True/"
                 "False, a score from 0 to 1, (passed, reason) or {'passed': ..., 'reason': ...}")
