"""Costs over HTTP: what the served agents' model calls cost per day or week, per agent and
model, with their budgets and the day's use (``GET /costs``, the console's Costs page)."""

from __future__ import annotations

from aiohttp import web

from toren.core.costs import InvalidCostsQuery, costs_window
from toren.server.auth import API_KEY
from toren.server.context import RUNTIME
from toren.server.errors import json_error

#: The query parameters ``GET /costs`` takes.
_PARAMETERS = frozenset({"period", "since", "until", "agent"})


def routes(app: web.Application) -> None:
    app.router.add_get("/costs", get_costs)


async def get_costs(request: web.Request) -> web.Response:
    """``period`` (``day``, the default, or ``week``), ``since`` and ``until`` (ISO 8601 dates
    or times, widened to whole periods; at most 366 days; by default the last 30 days or 12
    weeks), ``agent`` (one served agent; by default every one the key may see). 400
    ``invalid_costs_query`` naming a bad parameter, 404 for an agent not served here, 501 from
    a store that does not add up costs."""
    runtime = request.app[RUNTIME]
    query = request.query
    unknown = sorted(set(query) - _PARAMETERS)
    if unknown:
        raise InvalidCostsQuery(f"unknown query parameter(s): {', '.join(unknown)[:200]}; "
                                f"the parameters are {', '.join(sorted(_PARAMETERS))}")
    for name in _PARAMETERS:
        if len(query.getall(name, ())) > 1:
            raise InvalidCostsQuery(f"{name} is given more than once")
    period, since, until = costs_window(query.get("period"), query.get("since"),
                                        query.get("until"))
    key = request.get(API_KEY)
    agent = query.get("agent")
    if agent is not None:
        if agent not in runtime.agents or (key is not None and not key.may_touch(agent)):
            return json_error(404, "agent_not_found",
                              f"no agent named {agent[:100]!r} is served here")
        agents = [agent]
    else:
        agents = sorted(name for name in runtime.agents
                        if key is None or key.may_touch(name))
    try:
        report = await runtime.costs.report(period, since, until, agents)
    except NotImplementedError as exc:
        return json_error(501, "not_supported", f"{exc}: use a store driver that does "
                          "(toren-postgres)")
    return web.json_response(report)
