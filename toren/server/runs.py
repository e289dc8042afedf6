"""Runs over HTTP: create, list, read, cancel, and their events as JSON or a live SSE stream."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from typing import Any

from aiohttp import web

from toren.core import events as ev
from toren.core.decisions import unstorable
from toren.core.run_search import parse_run_search
from toren.core.runs import RunRecord, RunTotals
from toren.core.webhooks import WebhookSubscription, parse_subscriptions
from toren.errors import RunNotFound
from toren.seams.store import RunReader
from toren.seams.telemetry import parse_traceparent
from toren.server.audit import audit_note
from toren.server.context import RUNTIME
from toren.server.cursors import (
    InvalidCursor,
    decode_event_cursor,
    decode_runs_cursor,
    encode_event_cursor,
    encode_offset_cursor,
    encode_page_cursor,
)
from toren.server.errors import json_error
from toren.server.streams import event_json, stream_events

log = logging.getLogger(__name__)
#: A schedule's name as agent.yaml allows it (``$defs.schedule`` of agent.schema.json).
SCHEDULE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
MAX_PAGE = 200
NO_TOTALS = RunTotals()
#: What the run log stores: integers in JSON of 64 bits (signed or not), event numbers of 32.
MAX_SEQ = 2**31 - 1


def routes(app: web.Application) -> None:
    app.router.add_post("/runs", create_run)
    app.router.add_get("/runs", list_runs)
    app.router.add_get("/runs/{run_id}", get_run)
    app.router.add_get("/runs/{run_id}/events", run_events)
    app.router.add_get("/runs/{run_id}/children", run_children)
    app.router.add_get("/runs/{run_id}/receipt", run_receipt)
    app.router.add_get("/runs/{run_id}/webhooks", run_webhooks)
    app.router.add_post("/runs/{run_id}/cancel", cancel_run)


async def refuse_a_body(request: web.Request) -> None:
    """For a route whose body, if sent, is an empty JSON object: a 400 naming the unknown
    fields of any other (and what ``read_json_object`` refuses)."""
    if request.can_read_body:
        body = await read_json_object(request)
        if body:
            raise _bad_request("invalid_body", f"unknown field(s): "
                                               f"{', '.join(sorted(body))[:200]}; the body is "
                                               "empty or {}")


async def read_json_object(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 naming what is wrong (415 when it is not
    sent as ``application/json``, 408 when it takes longer than ``TOREN_BODY_TIMEOUT``)."""
    if request.content_type != "application/json":
        # a web page can send a form or text/plain to any address without asking first;
        # application/json it cannot
        raise _client_error(web.HTTPUnsupportedMediaType, "unsupported_media_type",
                            "send the body as JSON with `Content-Type: application/json` "
                            f"(this request's is {request.content_type!r})")
    raw = await _read_body(request)
    try:
        # JSON is UTF-8 and has no NaN or Infinity (RFC 8259); nesting too deep for the parser
        # is the client's error too
        body = json.loads(raw.decode("utf-8"), parse_constant=_not_json)
    except (ValueError, RecursionError) as exc:
        raise _bad_request("invalid_json", f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _bad_request("invalid_body", "the request body must be a JSON object")
    # whatever a body holds ends up in the run log (an input, a reason, a message)
    problem = unstorable(body)
    if problem:
        raise _bad_request("unstorable_value", f"the request body cannot be stored: {problem}")
    return body


async def _read_body(request: web.Request) -> bytes:
    """The whole body, within ``TOREN_BODY_TIMEOUT`` seconds: a client that sends it slower
    would hold a connection (and a file descriptor) as long as it likes."""
    timeout_s = request.app[RUNTIME].settings.body_timeout_s
    try:
        async with asyncio.timeout(timeout_s):
            return await request.read()
    except TimeoutError:
        log.info("closing %s %s: the body did not arrive within %gs (TOREN_BODY_TIMEOUT)",
                 request.method, request.path, timeout_s)
        raise _client_error(web.HTTPRequestTimeout, "request_timeout",
                            f"the request body did not arrive within {timeout_s:g} seconds",
                            headers={"Connection": "close"}) from None


def _client_error(kind: type[web.HTTPClientError], code: str, message: str,
                  headers: dict[str, str] | None = None) -> web.HTTPClientError:
    return kind(text=json.dumps({"error": {"code": code, "message": message}}),
                content_type="application/json", headers=headers)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON value")


def _header_text(value: str) -> str:
    """A header's value as text: UTF-8 if its bytes are, else ISO-8859-1 (HTTP's old charset),
    where aiohttp would leave the invalid bytes as unpaired surrogates."""
    raw = value.encode("utf-8", "surrogateescape")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _bad_request(code: str, message: str) -> web.HTTPClientError:
    return _client_error(web.HTTPBadRequest, code, message)


async def read_agent_body(request: web.Request, fields: tuple[str, ...],
                          optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """A body ``{"agent", *fields}`` naming a served agent: exactly those fields (400 for a
    missing or unknown one; ``optional`` ones may be there), the agent served here (404)."""
    body = await read_json_object(request)
    agent = body.get("agent")
    if not isinstance(agent, str) or not agent:
        raise _bad_request("invalid_body", "'agent' is required: the name of a served agent")
    shape = ", ".join(f'"{name}"' for name in ("agent", *fields))
    for name in fields:
        if name not in body:
            raise _bad_request("invalid_body", f"{name!r} is required; the body is {{{shape}}}")
    unknown = set(body) - {"agent", *fields, *optional}
    if unknown:
        raise _bad_request("invalid_body", f"unknown field(s): {', '.join(sorted(unknown))}; "
                                           f"the body is {{{shape}}}")
    if agent not in request.app[RUNTIME].agents:
        raise web.HTTPNotFound(
            text=json.dumps({"error": {"code": "agent_not_found", "message": (
                f"no agent named {agent!r} is served here; see GET /agents")}}),
            content_type="application/json")
    return body


async def create_run(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    body = await read_agent_body(request, ("input",), ("files", "webhook", "priority",
                                                       "subject"))
    note = audit_note(request)
    note.agent = body["agent"]
    if isinstance(body.get("priority"), int) and not isinstance(body["priority"], bool):
        note.details["priority"] = body["priority"]  # the run's own, not its agent's
    run_id = await runtime.start_run(body["agent"], body["input"],
                                     priority=body.get("priority"),
                                     idempotency_key=idempotency_key(request),
                                     files=body.get("files"),
                                     traceparent=parse_traceparent(
                                         request.headers.get("traceparent")),
                                     webhooks=webhooks_of(body),
                                     subject=body.get("subject"))
    record = await runtime.get_run(run_id)
    return web.json_response({"id": record.id, "status": record.status}, status=201)


def webhooks_of(body: dict[str, Any]) -> tuple[WebhookSubscription, ...]:
    """The body's ``webhook`` (a URL, ``{"url", "events"}``, or a list of them), checked;
    400 ``invalid_webhook`` naming the field when malformed."""
    if body.get("webhook") is None:
        return ()
    return parse_subscriptions(body["webhook"], field="webhook")


async def run_webhooks(request: web.Request) -> web.Response:
    """``GET /runs/{id}/webhooks``: the run's completion webhook deliveries and attempts."""
    record = await served_run(request)
    deliveries = await request.app[RUNTIME].webhook_deliveries(record.id)
    return web.json_response({"run_id": record.id,
                              "deliveries": [d.to_json() for d in deliveries]})


def idempotency_key(request: web.Request) -> str | None:
    """The ``Idempotency-Key`` header (same key, same run or session), or a 400."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    key = _header_text(key)
    if not 0 < len(key) <= 255:
        raise _bad_request("invalid_idempotency_key", "Idempotency-Key must be 1 to 255 "
                                                      "characters")
    return key


async def served_run(request: web.Request) -> RunRecord:
    """The run named in the path; 404 when unknown or of an agent not served here."""
    runtime = request.app[RUNTIME]
    run_id = request.match_info["run_id"]
    try:
        # run ids are UUIDs: anything else names no run, and need not reach the store
        record = await runtime.get_run(str(uuid.UUID(run_id)))
    except (ValueError, RunNotFound):
        record = None
    if record is None or record.agent not in runtime.agents:
        raise web.HTTPNotFound(
            text=json.dumps({"error": {"code": "run_not_found",
                                       "message": f"no run {run_id!r} of an agent served here"}}),
            content_type="application/json")
    return record


def list_filters(request: web.Request, statuses: tuple[str, ...], max_page: int
                 ) -> tuple[str | None, str | None, int]:
    """A listing's ``agent`` (404 unless served here), ``status`` (400 unless one of
    ``statuses``) and ``limit`` (400 unless 1 to ``max_page``; default 50) query parameters."""
    query = request.query
    agent = query.get("agent")
    if agent is not None and agent not in request.app[RUNTIME].agents:
        raise _client_error(web.HTTPNotFound, "agent_not_found",
                            f"no agent named {agent!r} is served here")
    status = query.get("status")
    if status is not None and status not in statuses:
        raise _bad_request("invalid_status", f"status must be one of {', '.join(statuses)}")
    try:
        limit = int(query.get("limit", "50"))
    except ValueError:
        raise _bad_request("invalid_limit", "limit must be an integer") from None
    if not 1 <= limit <= max_page:
        raise _bad_request("invalid_limit", f"limit must be between 1 and {max_page}")
    return agent, status, limit


async def list_runs(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    query = request.query
    agent, status, limit = list_filters(request, ev.RUN_STATUSES, MAX_PAGE)
    kind = query.get("kind")
    if kind is not None and kind not in ("run", "session"):
        return json_error(400, "invalid_kind", "kind must be run or session")
    schedule = query.get("schedule")
    if schedule is not None and not SCHEDULE_NAME.match(schedule):
        return json_error(400, "invalid_schedule", "schedule must be a schedule's name: "
                          "lowercase letters, digits, - and _, starting with a letter")
    cursor = decode_runs_cursor(query.get("cursor"))
    if isinstance(cursor, tuple) and not is_uuid(cursor[1]):
        raise InvalidCursor("the page cursor is malformed: pass back the next_cursor that "
                            "Toren returned")
    paging: dict[str, Any] = ({"offset": cursor} if isinstance(cursor, int)
                              else {"before": cursor})
    search = parse_run_search(query, agents=(agent,) if agent else (), status=status,
                              kind=kind, schedule=schedule, limit=limit, **paging)
    if search.before is not None and (search.sort != "created" or not search.descending):
        raise InvalidCursor("this cursor pages runs newest first: pass it back with the "
                            "same sort (or no sort)")
    try:
        page = await runtime.runs.search(search)
    except NotImplementedError as exc:
        return json_error(501, "not_supported", f"{exc}: q, version, since, until and sort "
                          "need a store driver that searches runs, such as postgres")
    next_cursor = (encode_page_cursor(*page.after) if page.after else
                   encode_offset_cursor(page.next_offset) if page.next_offset else None)
    return web.json_response({"runs": [
        run.to_json() | {"totals": page.totals.get(run.id, NO_TOTALS).to_json()}
        for run in page.items], "next_cursor": next_cursor})


async def get_run(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    record = await served_run(request)
    receipt = await runtime.receipt(record.id)
    totals = receipt["totals"]
    return web.json_response(record.to_json() | {
        "why": receipt["why"], "budget": receipt["budget"],
        "totals": {key: totals[key] for key in ("model_calls", "tool_calls", "input_tokens",
                                                "output_tokens", "cost_usd",
                                                "cost_unknown_calls", "retries",
                                                "peer_cost_usd", "cache_read_tokens",
                                                "cache_write_tokens", "cache_saved_usd",
                                                "image_tokens")},
        "pending_approvals": await runtime.approvals.pending(record.id),
        "pending_questions": await runtime.questions.pending(record.id),
        "queue": await runtime.runs.queue_state(record), "fork": receipt["fork"]})


async def run_receipt(request: web.Request) -> web.Response:
    """Every model call (tokens, cost, latency), tool call, peer call and task of a run, the
    totals, why it stopped and its prompts: what ``toren jobs receipt --json`` prints."""
    record = await served_run(request)
    receipt = await request.app[RUNTIME].receipt(record.id)
    return web.json_response(receipt, dumps=lambda data: json.dumps(data, default=str))


async def run_children(request: web.Request) -> web.Response:
    """The runs a run's tasks started (peer calls, background runs), of any agent."""
    record = await served_run(request)
    children = await request.app[RUNTIME].children(record.id)
    return web.json_response({"children": [child.to_json() for child in children]})


async def cancel_run(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    record = await served_run(request)
    reason = "cancelled over HTTP"
    if request.can_read_body:
        body = await read_json_object(request)
        if "reason" in body:
            if not isinstance(body["reason"], str):
                return json_error(400, "invalid_body", "'reason' must be a string")
            reason = body["reason"][:500]
    cancelled = await runtime.cancel_run(record.id, reason)
    return web.json_response(cancelled.to_json())


def is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _event_position(cursor: str | None) -> dict[str, int]:
    """The position an event cursor names, if it is one the run log can have made."""
    position = decode_event_cursor(cursor)
    if any(unstorable(stream) or not 0 <= seq <= MAX_SEQ for stream, seq in position.items()):
        raise InvalidCursor("the event cursor is malformed: pass back a cursor (or SSE event "
                            "id) that Toren returned")
    return position


async def run_events(request: web.Request) -> web.StreamResponse:
    record = await served_run(request)
    accept = request.headers.get("Accept", "")
    if "text/event-stream" in accept:
        after = request.headers.get("Last-Event-ID") or request.query.get("after")
        # decoded before the stream starts: once it has, an error can no longer be a 400
        return await stream_events(request, await _run_reader(request, record), record,
                                   _event_position(after))
    runtime = request.app[RUNTIME]
    position = _event_position(request.query.get("after"))
    events = await runtime.run_events(record, position)
    listed = []
    for event in events:
        position[event.stream] = max(position.get(event.stream, 0), event.seq)
        listed.append(event_json(event, encode_event_cursor(position)))
    return web.json_response({"events": listed, "cursor": encode_event_cursor(position),
                              "status": record.status})


async def _run_reader(request: web.Request, record: RunRecord) -> RunReader:
    """Where the run's events are read from: the store, or an archived run's object (read
    and checked before the stream starts: once it has, a refusal can no longer be a 409)."""
    return await request.app[RUNTIME].runs.reader_for(record)
