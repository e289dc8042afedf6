"""Evals over HTTP: start one against an agent served here (the served version, a kept one, or
either with another model; a dataset sent, or made from recorded runs), resume it, read its
report, compare two, list them (docs/guides/evals.md, "Over HTTP").

An eval started here is durable like a run: this server works it in a task while it holds the
eval's **lease** in the database (``EvalStore.claim_eval_leases``, renewed every third of
``TOREN_LEASE_TTL``, expiring by the database's clock). Every server (``toren serve``, with or
without ``--workers``, and ``toren dev``) runs an eval keeper: when it starts, and every few
seconds after, it claims the evals started over HTTP that are still ``running`` and whose
lease is free or expired (their server stopped or was killed), and goes on with them. One
server at a time works an eval however many share the database; working one twice would be
safe anyway (each case run is claimed once in the database), the lease saves the work.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from aiohttp import web

from toren.agents.datasets import dataset_from_json, graders_from_json
from toren.core.eval_cases import Dataset
from toren.core.evals import EvalRecord
from toren.core.run_search import VERSION
from toren.errors import EvalDatasetError, EvalNotFound, TorenError
from toren.host.runtime import Runtime
from toren.host.services.evals import (
    MAX_CONCURRENCY,
    MAX_FORK_AT,
    MAX_RECORDED_RUNS,
    MAX_REPEAT,
    RUN_FILTERS,
    EvalFunctions,
)
from toren.server.context import RUNTIME
from toren.server.cursors import InvalidCursor
from toren.server.errors import json_error
from toren.server.runs import read_json_object

log = logging.getLogger(__name__)

#: The fields ``POST /evals`` takes.
_FIELDS = ("agent", "dataset", "repeat", "concurrency", "grader_model", "version", "model",
           "from_runs", "fork_at")
#: The fields of ``from_runs``.
_RUNS_FIELDS = (*RUN_FILTERS, "since", "until", "limit", "graders")
#: What ``model`` may be: a model id, no spaces or control characters (the OpenAPI pattern).
MODEL_ID = re.compile(r"^[^\s\x00-\x1f\x7f-\x9f]{1,200}$")
#: Evals listed per page at most.
MAX_PAGE = 200
#: How long an eval that failed here waits before this server tries it again (doubling).
RETRY_AFTER_S = (30.0, 600.0)


class EvalKeeper:
    """The evals this server works, each in a task while it holds the eval's lease: claimed
    when started here, when resumed, and by a loop that picks up the evals other servers
    left (``claim_eval_leases``); renewed by that loop, let go when the task ends.

    Args:
        app: the server's application (its runtime under ``RUNTIME``).
    """

    def __init__(self, app: web.Application) -> None:
        self.app = app
        #: Who holds the leases: this process, told apart from a restart of it.
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        #: The evals worked here, by id.
        self.working: dict[str, asyncio.Task[Any]] = {}
        #: Evals that failed here: when to try each again, and the next wait.
        self._retry: dict[str, tuple[float, float]] = {}
        self._loop: asyncio.Task[None] | None = None

    @property
    def ttl_s(self) -> float:
        return float(self.app[RUNTIME].settings.lease_ttl_s)

    def start(self) -> None:
        self._loop = asyncio.create_task(self._keep(), name="eval keeper")

    async def stop(self) -> None:
        """Stop working here: the evals' runs go on, their leases are let go so another
        server (or this one, restarted) picks them up at once."""
        if self._loop is not None:
            self._loop.cancel()
        tasks = list(self.working.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, *([self._loop] if self._loop else []),
                             return_exceptions=True)

    async def claim(self, eval_id: str | None = None) -> list[str]:
        """Claim (the lease of) ``eval_id``, or the evals started over HTTP that no live
        server holds, of the agents served here; work each claimed one not worked here yet.
        The ids of the evals this server works now among those."""
        runtime = self.app[RUNTIME]
        now = time.monotonic()
        # evals that failed here wait their turn (the others are claimed meanwhile); one
        # asked for by id is tried at once
        waiting = ([] if eval_id is not None else
                   [found for found, (at, _wait) in self._retry.items() if at > now])
        claimed = await runtime.evals.claim_leases(
            self.holder, list(runtime.agents), ttl_s=self.ttl_s, eval_id=eval_id,
            skip=waiting)
        started = []
        for found in claimed:
            if self.work(found) and eval_id is None:
                log.info("going on with eval %s (started over HTTP; no live server held it)",
                         found)
            started.append(found)
        return started

    def work(self, eval_id: str) -> bool:
        """Work the eval (whose lease this server holds) in a task unless one already does;
        whether one was started."""
        if eval_id in self.working:
            return False
        self.working[eval_id] = asyncio.create_task(self._work(eval_id),
                                                    name=f"eval {eval_id}")
        return True

    async def _work(self, eval_id: str) -> None:
        runtime = self.app[RUNTIME]
        try:
            await runtime.evals.work(eval_id)
            self._retry.pop(eval_id, None)
        except asyncio.CancelledError:  # stopping, or the lease lost
            raise
        except Exception as exc:  # the eval stays running: it is tried again later
            wait = self._retry.get(eval_id, (0.0, RETRY_AFTER_S[0]))[1]
            self._retry[eval_id] = (time.monotonic() + wait, min(wait * 2, RETRY_AFTER_S[1]))
            if isinstance(exc, TorenError):
                log.warning("eval %s stopped: %s (tried again in %.0f s; POST /evals/%s/"
                            "resume tries at once)", eval_id, exc.message, wait, eval_id)
            else:
                log.exception("eval %s stopped (tried again in %.0f s)", eval_id, wait)
        finally:
            self.working.pop(eval_id, None)
            try:  # another server may take it at once (only if this one still holds it)
                await runtime.evals.release_lease(self.holder, eval_id)
            except Exception as exc:  # it expires by itself
                log.debug("eval %s: lease not let go: %s", eval_id, exc)

    async def _keep(self) -> None:
        """Renew the leases of the evals worked here (stop working one whose lease was lost)
        and claim the evals no live server works, every third of the lease's time."""
        runtime = self.app[RUNTIME]
        while True:
            try:
                if self.working:
                    held = set(await runtime.evals.renew_leases(
                        self.holder, list(self.working), ttl_s=self.ttl_s))
                    for lost in set(self.working) - held:
                        log.warning("eval %s: this server lost its lease (it was cut off "
                                    "longer than TOREN_LEASE_TTL); another server goes on "
                                    "with it", lost)
                        task = self.working.pop(lost, None)
                        if task is not None:
                            task.cancel()
                await self.claim()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database away: try again on the next beat
                log.warning("eval keeper: %s", exc)
            await asyncio.sleep(max(0.1, self.ttl_s / 3))


#: The eval keeper of this server.
KEEPER = web.AppKey("eval_keeper", EvalKeeper)


def routes(app: web.Application) -> None:
    app[KEEPER] = EvalKeeper(app)
    app.on_startup.append(_start_keeper)
    app.on_shutdown.append(_stop_keeper)
    app.router.add_post("/evals", start_eval)
    app.router.add_get("/evals", list_evals)
    app.router.add_get("/evals/{eval_id}", get_eval)
    app.router.add_post("/evals/{eval_id}/resume", resume_eval)
    app.router.add_get("/evals/{eval_id}/compare/{other_eval_id}", compare_evals)


async def _start_keeper(app: web.Application) -> None:
    app[KEEPER].start()


async def _stop_keeper(app: web.Application) -> None:
    await app[KEEPER].stop()


def _bad_body(message: str) -> web.Response:
    return json_error(400, "invalid_body", message)


async def start_eval(request: web.Request) -> web.Response:
    """Body ``{"agent", "dataset": {"name"?, "description"?, "graders"?, "cases": [...]}
    | "from_runs": {filters, "since"?, "until"?, "limit"?, "graders"?}, "version"?, "model"?,
    "fork_at"?, "repeat"?, "concurrency"?, "grader_model"?}``: what ``toren eval run`` takes
    (``--version``, ``--model``, ``--from-runs``, ``--fork-at``), through the same service
    calls; 202 with the eval, being worked here."""
    runtime = request.app[RUNTIME]
    body = await read_json_object(request)
    unknown = sorted(set(body) - set(_FIELDS))
    if unknown:
        return _bad_body(f"unknown field(s): {', '.join(unknown)[:200]}; the body is "
                         f"{{{', '.join(_FIELDS)}}} (agent, and dataset or from_runs, "
                         "required)")
    agent = body.get("agent")
    if not isinstance(agent, str) or not agent:
        return _bad_body("'agent' is required: the name of an agent served here")
    if agent not in runtime.agents:
        return json_error(404, "not_found", f"no agent named {agent[:100]!r} is served here")
    if ("dataset" in body) == ("from_runs" in body):
        return _bad_body("give 'dataset' ({\"cases\": [{\"input\": ...}, ...]}) or "
                         "'from_runs' ({\"status\": \"completed\", \"since\": \"7d\"}): one "
                         "of the two")
    numbers: dict[str, int | None] = {}
    for name, default, low, top in (("repeat", 1, 1, MAX_REPEAT),
                                    ("concurrency", 4, 1, MAX_CONCURRENCY),
                                    ("fork_at", None, 0, MAX_FORK_AT)):
        value = body.get(name, default)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not low <= value <= top):
            return _bad_body(f"{name!r} must be an integer from {low} to {top}")
        numbers[name] = value
    if numbers["fork_at"] is not None and "from_runs" not in body:
        return _bad_body("'fork_at' replays recorded runs: it goes with 'from_runs'")
    texts = {name: body.get(name) for name in ("grader_model", "model", "version")}
    grader_model = texts["grader_model"]
    if grader_model is not None and (not isinstance(grader_model, str) or not grader_model):
        return _bad_body("'grader_model' must be a model id")
    if texts["model"] is not None and (not isinstance(texts["model"], str)
                                       or not MODEL_ID.match(texts["model"])):
        return _bad_body("'model' must be a model id such as anthropic/claude-sonnet-4-5 "
                         "(no spaces or control characters)")
    if texts["version"] is not None and (not isinstance(texts["version"], str)
                                         or not VERSION.match(texts["version"])):
        return _bad_body("'version' must be a kept version's hash (4 characters at least) or "
                         "its version: string: letters, digits, '.', '_', '+', '-' (see GET "
                         f"/agents/{agent}/versions)")
    definition = await runtime.evals.definition(agent, version=texts["version"],
                                                model=texts["model"],
                                                options=("version", "model"))
    if "dataset" in body:
        dataset = dataset_from_json(body["dataset"], where="dataset")
    else:
        made = await _recorded_runs(runtime, agent, body["from_runs"])
        if isinstance(made, web.Response):
            return made
        dataset = made
    functions = None
    if any(g.kind == "function" for case in dataset.cases for g in case.graders):
        # the evals.py deployed with the agent, as its tools.py: never code from the request
        functions = await asyncio.to_thread(_deployed_functions, runtime.agents[agent].directory,
                                            agent, dataset)
    source = " ".join(["POST /evals", *(f"{name}={value}" for name, value in
                                        (("version", texts["version"]),
                                         ("model", texts["model"]),
                                         ("fork_at", numbers["fork_at"])) if value is not None),
                       *(["from_runs"] if "from_runs" in body else [])])
    record = await runtime.evals.create(
        dataset, agent, model=texts["model"], grader_model=texts["grader_model"],
        source=source, repeat=numbers["repeat"] or 1, concurrency=numbers["concurrency"] or 4,
        functions=functions, fork_at=numbers["fork_at"], definition=definition,
        auto_resume=True)
    await request.app[KEEPER].claim(record.id)
    return web.json_response(record.to_json(), status=202)


def _deployed_functions(directory: Path, agent: str, dataset: Dataset) -> str:
    """The path of the evals.py deployed in the agent's directory, whose own functions every
    ``function:`` grader of ``dataset`` names (importing it, as ``tools.py`` is imported);
    ``EvalDatasetError`` otherwise."""
    path = directory / "evals.py"
    if not path.is_file():
        raise EvalDatasetError("dataset: function: graders run the functions of the evals.py "
                               f"deployed with {agent}, and its directory on this server has "
                               "none; run this eval with `toren eval run` (other graders work "
                               "here)")
    EvalFunctions(path).check_defined_here(dataset)
    return str(path.resolve())


async def _recorded_runs(runtime: Runtime, agent: str, given: Any
                         ) -> Dataset | web.Response:
    """``from_runs`` of ``POST /evals`` as a dataset (``EvalsService.recorded_runs``, which
    ``toren eval run --from-runs`` calls)."""
    if not isinstance(given, dict):
        return _bad_body("'from_runs' must be an object of filters: status, version, schedule, "
                         "q, since, until, limit, graders (all optional)")
    unknown = sorted(set(given) - set(_RUNS_FIELDS))
    if unknown:
        return _bad_body(f"from_runs: unknown field(s): {', '.join(unknown)[:200]}; it takes "
                         f"{', '.join(_RUNS_FIELDS)}")
    filters: dict[str, str] = {}
    for name in (*RUN_FILTERS, "since", "until"):
        value = given.get(name)
        if value is not None and (not isinstance(value, str) or not value
                                  or len(value) > 500):
            return _bad_body(f"from_runs.{name} must be text (at most 500 characters)")
        if value is not None and name in RUN_FILTERS:
            filters[name] = value
    limit = given.get("limit", 50)
    if isinstance(limit, bool) or not isinstance(limit, int) or not \
            1 <= limit <= MAX_RECORDED_RUNS:
        return _bad_body(f"from_runs.limit must be an integer from 1 to {MAX_RECORDED_RUNS}")
    graders = (graders_from_json(given["graders"], where="from_runs")
               if given.get("graders") is not None else [])
    return await runtime.evals.recorded_runs(
        agent, filters, since=given.get("since"), until=given.get("until"), limit=limit,
        graders=graders, label="POST /evals from_runs", option="from_runs")


async def resume_eval(request: web.Request) -> web.Response:
    """Go on with an eval now (its cases without a grade) in a task of this server, on the
    eval's version (loaded from the database when this server serves another); 202 with the
    eval: ``started`` false when a server (this one, or another holding its lease) works it
    already. 409 when the served definition says ``onChange: upgrade`` and is not the
    eval's."""
    runtime = request.app[RUNTIME]
    record = await _eval(request, "eval_id")
    await runtime.evals.eval_definition(record)  # 409 eval_mismatch before claiming
    started = bool(await request.app[KEEPER].claim(record.id))
    working = started or await runtime.evals.lease_holder(record.id) is not None
    return web.json_response(record.to_json() | {"working": working, "started": started},
                             status=202)


async def _eval(request: web.Request, name: str) -> EvalRecord:
    """The eval named by path part ``name``, of an agent served here; 404 otherwise."""
    runtime = request.app[RUNTIME]
    eval_id = request.match_info[name]
    try:
        record = await runtime.evals.get(str(uuid.UUID(eval_id)))
    except (ValueError, EvalNotFound):
        record = None
    if record is None or record.agent not in runtime.agents:
        raise EvalNotFound(f"no eval {eval_id[:100]!r} of an agent served here")
    return record


async def get_eval(request: web.Request) -> web.Response:
    """The eval's report: what ``toren eval report --json`` prints."""
    record = await _eval(request, "eval_id")
    report = await request.app[RUNTIME].evals.report(record.id)
    report["working"] = (record.id in request.app[KEEPER].working
                         or await request.app[RUNTIME].evals.lease_holder(record.id) is not None)
    return web.json_response(report)


async def compare_evals(request: web.Request) -> web.Response:
    """What changed from eval A to eval B: what ``toren eval compare --json`` prints."""
    a = await _eval(request, "eval_id")
    b = await _eval(request, "other_eval_id")
    return web.json_response(await request.app[RUNTIME].evals.compare(a.id, b.id))


async def list_evals(request: web.Request) -> web.Response:
    """``?agent=&limit=&cursor=``: evals of the served agents, newest first, with
    ``next_cursor`` (the last one's id) while there may be more."""
    runtime = request.app[RUNTIME]
    query = request.query
    unknown = sorted(set(query) - {"agent", "limit", "cursor"})
    if unknown:
        return json_error(400, "invalid_query", f"unknown parameter(s): {', '.join(unknown)}; "
                          "GET /evals takes agent, limit and cursor")
    try:
        limit = int(query.get("limit", "50"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_PAGE:
        return json_error(400, "invalid_query", f"limit must be an integer from 1 to "
                          f"{MAX_PAGE}")
    agent = query.get("agent")
    if agent is not None and agent not in runtime.agents:
        return json_error(404, "not_found", f"no agent named {agent[:100]!r} is served here")
    cursor = query.get("cursor")
    if cursor is not None:
        try:
            cursor = str(uuid.UUID(cursor))
        except ValueError:
            raise InvalidCursor("cursor must be the next_cursor of a previous page of "
                                "GET /evals") from None
    found: list[EvalRecord] = []
    before = cursor
    # evals of agents not served here are skipped: read on until the page is full
    while len(found) < limit + 1:
        page = await runtime.evals.list(agent=agent, limit=limit + 1, before=before)
        found += [e for e in page if e.agent in runtime.agents]
        if len(page) < limit + 1:
            break
        before = page[-1].id
    more = len(found) > limit
    items = found[:limit]
    return web.json_response({"evals": [e.to_json() for e in items],
                              "next_cursor": items[-1].id if more and items else None})
