"""Retention over HTTP: archived runs listed, an archive pass run on request, and an archived
run restored (``toren db archive --url``, ``toren db restore --url``).

An archived run is read through the run routes as a hot one is (``GET /runs/{id}``,
``/receipt``, ``/events``, ``/children``): ``Runtime.get_run`` finds it in the archive index.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from toren.core.runs import RunRecord
from toren.host.retention import is_archived
from toren.host.services.archive import MAX_ARCHIVED_PAGE
from toren.server.context import RUNTIME
from toren.server.cursors import InvalidCursor, decode_page_cursor, encode_page_cursor
from toren.server.errors import json_error
from toren.server.runs import is_uuid, read_json_object, refuse_a_body, served_run

#: Most runs one ``POST /archive`` may be asked to archive.
MAX_RUNS_PER_REQUEST = 100_000


def routes(app: web.Application) -> None:
    app.router.add_get("/archived-runs", list_archived_runs)
    app.router.add_post("/archive", archive)
    app.router.add_post("/runs/{run_id}/restore", restore_run)


async def list_archived_runs(request: web.Request) -> web.Response:
    """Archived runs of the served agents, newest first, a page at a time."""
    runtime = request.app[RUNTIME]
    query = request.query
    agent = query.get("agent")
    if agent is not None and agent not in runtime.agents:
        return json_error(404, "agent_not_found", f"no agent named {agent!r} is served here")
    try:
        limit = int(query.get("limit", "50"))
    except ValueError:
        return json_error(400, "invalid_limit", "limit must be an integer")
    if not 1 <= limit <= MAX_ARCHIVED_PAGE:
        return json_error(400, "invalid_limit", f"limit must be between 1 and "
                                                f"{MAX_ARCHIVED_PAGE}")
    before = decode_page_cursor(query.get("cursor"))
    if before is not None and not is_uuid(before[1]):
        raise InvalidCursor("the page cursor is malformed: pass back the next_cursor that "
                            "Toren returned")
    page = await runtime.runs.archived_page(limit=limit, before=before, agent=agent)
    next_cursor = encode_page_cursor(*page.after) if page.after else None
    return web.json_response({"runs": [archived_json(run) for run in page.items],
                              "next_cursor": next_cursor})


async def archive(request: web.Request) -> web.Response:
    """One archive pass over the served agents now (as the elected worker's loop does);
    body ``{"dry_run": bool, "max_runs": int}`` (both optional)."""
    runtime = request.app[RUNTIME]
    body = await read_json_object(request) if request.can_read_body else {}
    unknown = set(body) - {"dry_run", "max_runs"}
    if unknown:
        return json_error(400, "invalid_body", f"unknown field(s): {', '.join(sorted(unknown))}"
                                               '; the body is {"dry_run", "max_runs"}')
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        return json_error(400, "invalid_body", "'dry_run' must be true or false")
    max_runs = body.get("max_runs")
    if isinstance(max_runs, float) and max_runs.is_integer():
        max_runs = int(max_runs)  # JSON has one number type: 5.0 is the integer 5
    if max_runs is not None and (not isinstance(max_runs, int) or isinstance(max_runs, bool)
                                 or not 1 <= max_runs <= MAX_RUNS_PER_REQUEST):
        return json_error(400, "invalid_body", "'max_runs' must be an integer from 1 to "
                                               f"{MAX_RUNS_PER_REQUEST}")
    report = await runtime.archive.archive_due(dry_run=dry_run, max_runs=max_runs)
    return web.json_response(report)


async def restore_run(request: web.Request) -> web.Response:
    """Put an archived run back into the hot tables, whole (``ArchiveService.restore``); the run
    as the API reads it afterwards. 409 if the run is in the hot tables already. A body, if
    sent, is an empty JSON object."""
    record = await served_run(request)
    await refuse_a_body(request)
    if not is_archived(record):
        return json_error(409, "run_not_archived", f"run {record.id} is in the hot tables, "
                                                   "not archived: there is nothing to restore")
    restored = await request.app[RUNTIME].archive.restore(record.id)
    return web.json_response(restored.to_json())


def archived_json(run: RunRecord) -> dict[str, Any]:
    """An archived run as the API lists it: the run's JSON and ``archive``."""
    return run.to_json() | {"archive": run.extra["archive"]}
