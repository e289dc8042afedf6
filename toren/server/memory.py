"""Memories over HTTP: what agents keep beyond a session (``memory:``), for people to see,
correct and erase (docs/guides/memory.md).

``GET /memories`` lists (``?agent``, ``?subject``, ``?scope``, ``?q``, ``?limit``);
``GET``/``PATCH``/``DELETE /memories/{id}`` read, correct and erase one;
``DELETE /memories?subject=...`` erases everything kept about someone (of ``?agent``, or of
every agent the key may touch). A key limited to some agents sees and erases only theirs.
"""

from __future__ import annotations

from aiohttp import web

from toren.errors import InvalidMemory
from toren.server.audit import audit_note
from toren.server.auth import API_KEY
from toren.server.context import RUNTIME
from toren.server.errors import json_error
from toren.server.runs import read_json_object

_LIST_PARAMETERS = frozenset({"agent", "subject", "scope", "q", "limit"})


def routes(app: web.Application) -> None:
    app.router.add_get("/memories", list_memories)
    app.router.add_delete("/memories", erase_subject)
    app.router.add_get("/memories/{memory_id}", get_memory)
    app.router.add_patch("/memories/{memory_id}", edit_memory)
    app.router.add_delete("/memories/{memory_id}", delete_memory)


def _limit(text: str | None) -> int:
    if text is None:
        return 100
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise InvalidMemory("limit must be a whole number from 1 to 1000")
    return int(text)


async def list_memories(request: web.Request) -> web.Response:
    """Memories, most recently changed first (best match first with ``?q``)."""
    unknown = set(request.query) - _LIST_PARAMETERS
    if unknown:
        return json_error(400, "invalid_query", f"unknown parameter(s): "
                                                f"{', '.join(sorted(unknown))}; known: "
                                                f"{', '.join(sorted(_LIST_PARAMETERS))}")
    query = request.query
    found = await request.app[RUNTIME].memory.list(
        agent=query.get("agent"), subject=query.get("subject"), scope=query.get("scope"),
        search=query.get("q") or None, limit=_limit(query.get("limit")))
    return web.json_response({"memories": [record.to_json() for record in found]})


async def get_memory(request: web.Request) -> web.Response:
    record = await request.app[RUNTIME].memory.get(request.match_info["memory_id"])
    return web.json_response(record.to_json())


async def edit_memory(request: web.Request) -> web.Response:
    """``{"content": "...", "pinned": true}`` (either or both) corrects a memory."""
    body = await read_json_object(request)
    unknown = set(body) - {"content", "pinned"}
    if unknown or not body:
        return json_error(400, "invalid_body", (
            f"unknown field(s): {', '.join(sorted(unknown))}; " if unknown else "") +
            'the body is {"content": "...", "pinned": true|false} (either or both)')
    content, pinned = body.get("content"), body.get("pinned")
    if content is not None and not isinstance(content, str):
        return json_error(400, "invalid_body", "'content' must be a string: the memory's text")
    if pinned is not None and not isinstance(pinned, bool):
        return json_error(400, "invalid_body", "'pinned' must be true or false")
    record = await request.app[RUNTIME].memory.edit(request.match_info["memory_id"],
                                                    content=content, pinned=pinned)
    audit_note(request).agent = record.agent
    return web.json_response(record.to_json())


async def delete_memory(request: web.Request) -> web.Response:
    record = await request.app[RUNTIME].memory.delete(request.match_info["memory_id"])
    audit_note(request).agent = record.agent
    return web.json_response({"id": record.id, "deleted": True})


async def erase_subject(request: web.Request) -> web.Response:
    """Erase every memory about ``?subject`` (of ``?agent``, else of every agent the key may
    touch); the ids erased."""
    unknown = set(request.query) - {"subject", "agent"}
    subject = request.query.get("subject")
    if unknown or subject is None:
        return json_error(400, "invalid_query", "DELETE /memories takes ?subject=... (whom "
                                                "to forget) and optionally ?agent=...")
    agent = request.query.get("agent")
    key = request.get(API_KEY)
    runtime = request.app[RUNTIME]
    if agent is None and key is not None and key.agents is not None:
        agents = [name for name in key.agents if name in runtime.agents]
        erased = [memory_id for name in agents
                  for memory_id in await runtime.memory.erase_subject(subject, agent=name)]
    else:
        erased = await runtime.memory.erase_subject(subject, agent=agent)
    note = audit_note(request)
    note.target = subject[:200]
    note.details["erased"] = len(erased)
    return web.json_response({"erased": erased})
