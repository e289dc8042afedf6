"""A typed Python client for Toren's HTTP API (``schemas/openapi.json``), async and sync.

    async with TorenClient("http://127.0.0.1:8420", api_key="toren_...") as client:
        created = await client.create_run("research-crew", "event sourcing")
        async for event in client.stream_events(created["id"]):
            print(event["type"])

Responses are the server's JSON, typed with ``TypedDict``s that mirror the OpenAPI document.
The transport is injectable: pass an ``aiohttp.ClientSession`` (tests, proxies, custom TLS).
``TOREN_URL`` and ``TOREN_API_KEY`` are the defaults for the URL and the key.

``SyncTorenClient`` is derived from ``TorenClient``: each call is defined once, as a method of
the async client, and the sync client binds its blocking twin in one line
(``get_run = _blocking(TorenClient.get_run)``; ``_blocking_stream`` turns an async generator
into a generator). The twin has the coroutine's parameters, docstring and annotations, so
``help()`` and ``inspect.signature`` show the same call. Why a line per method and not a class
decorator or a metaclass that adds them all: type checkers cannot see methods added at run
time, and typing them again in a ``Protocol`` or a ``.pyi`` would be the second copy this
avoids; through ``ParamSpec`` (``Callable[Concatenate[TorenClient, P], Awaitable[T]]`` to
``Callable[Concatenate[SyncTorenClient, P], T]``) mypy strict types each twin from the one
definition. A test fails for an async method left without its line.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, NotRequired, ParamSpec, TypedDict, TypeVar, cast
from urllib.parse import quote

import aiohttp

from toren.errors import TorenError

T = TypeVar("T")
P = ParamSpec("P")
M = TypeVar("M", bound=Callable[..., Any])
DEFAULT_URL = "http://127.0.0.1:8420"


class Created(TypedDict):
    id: str
    status: str


class Run(TypedDict):
    id: str
    agent: str
    kind: str
    status: str
    input: Any
    output: Any
    stop_reason: str | None
    error: dict[str, Any] | None
    idempotency_key: str | None
    created_at: str | None
    updated_at: str | None
    finished_at: str | None
    #: The schedule that started the run, if one did.
    schedule: NotRequired[str | None]
    #: For a child run: ``{"agent", "run_id", "task_id", "kind"}`` of what started it.
    parent: dict[str, Any] | None
    depth: int
    #: The version of its agent's definition the run executes, and its ``version:``.
    agent_version: NotRequired[str | None]
    agent_human_version: NotRequired[str | None]


class Approval(TypedDict):
    """A tool call waiting for a person (``status`` ``pending``), or decided."""

    id: str
    agent: str
    run_id: str
    task_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    status: str
    approvers: list[str]
    requested_at: str | None
    expires_at: str | None
    decided_by: str | None
    decided_at: str | None
    reason: str | None
    #: sha256 of the arguments as canonical JSON: what a decision sends back.
    digest: NotRequired[str]
    #: ``run``: approved always (every later call of the tool with this digest in the run).
    scope: NotRequired[str]
    edited_arguments: NotRequired[dict[str, Any] | None]
    answer: NotRequired[str | None]
    granted_by: NotRequired[str | None]
    parameters: NotRequired[dict[str, Any] | None]
    on_expiry: NotRequired[str]
    escalate_to: NotRequired[list[str]]
    escalation_level: NotRequired[int]
    escalated_at: NotRequired[str | None]
    remind_at: NotRequired[str | None]
    reminded_at: NotRequired[str | None]


class ApprovalList(TypedDict):
    approvals: list[Approval]


class Question(TypedDict):
    """A question a run's agent asked a person (``ask_user``): ``pending``, or settled."""

    id: str
    agent: str
    run_id: str
    task_id: str
    call_id: str
    question: str
    choices: list[str]
    status: str
    asked_at: str | None
    expires_at: str | None
    answer: str | None
    answered_by: str | None
    answered_at: str | None


class QuestionList(TypedDict):
    questions: list[Question]


class RunDetail(Run):
    why: str
    totals: dict[str, Any]
    pending_approvals: list[Approval]
    pending_questions: NotRequired[list[Question]]
    #: Spend against ``limits.maxBudgetUsd`` (``run``) and ``limits.dailyBudgetUsd``
    #: (``daily``), with ``held_usd`` still reserved; ``None`` for an agent without a budget.
    budget: dict[str, Any] | None
    #: Its place in the queue: ``priority``, ``concurrency_key`` and ``waiting`` (``None``,
    #: ``concurrency``, ``queued`` or ``delayed``); ``None`` when the store cannot say.
    queue: NotRequired[dict[str, Any] | None]


class RunTotals(TypedDict):
    """What a listed run's model calls add up to (as its receipt counts them)."""

    model_calls: int
    steps: int
    cost_usd: float
    cost_unknown_calls: int


class ListedRun(Run):
    """A run as ``list_runs`` gives it: with its totals."""

    totals: RunTotals


class RunList(TypedDict):
    runs: list[ListedRun]
    next_cursor: str | None


class ArchivedRun(Run):
    """A run moved to the archive by retention: ``archive`` holds ``location``,
    ``archived_at`` and ``summary`` (events, model_calls, tool_calls, tokens, cost_usd)."""

    archive: dict[str, Any]


class ArchivedRunList(TypedDict):
    runs: list[ArchivedRun]
    next_cursor: str | None


class Schedule(TypedDict):
    """A schedule (``schedules:`` in agent.yaml) and its state: active, paused or removed."""

    agent: str
    name: str
    cron: str
    timezone: str
    input: Any
    missed: str
    catchupLimit: int
    state: str
    next_fire_at: str | None
    last_fired_at: str | None
    last_slot_at: str | None
    skipped_slots: int
    fires: list[dict[str, Any]]


class ScheduleTriggered(TypedDict):
    agent: str
    schedule: str
    run_id: str
    slot_at: str
    trigger: str


class Event(TypedDict):
    run_id: str
    stream: str
    seq: int
    type: str
    data: dict[str, Any]
    created_at: str | None
    cursor: str


class TextPiece(TypedDict):
    """A piece of a model's text as it was generated (an SSE ``text_delta`` event): the call
    is the ``ModelCallCompleted`` of stream ``task:<task_id>`` with this ``step``."""

    run_id: str
    task_id: str
    step: int
    index: int
    text: str


class EventList(TypedDict):
    events: list[Event]
    cursor: str
    status: str


class TurnAccepted(TypedDict, total=False):
    id: str
    status: str
    turn: int
    closing: bool


class Session(TypedDict):
    id: str
    agent: str
    status: str
    stop_reason: str | None
    error: dict[str, Any] | None
    created_at: str | None
    updated_at: str | None
    finished_at: str | None
    #: Entries ``{"role": "user" | "assistant" | "tool", "turn", "at", ...}`` in order.
    transcript: list[dict[str, Any]]
    turns: int
    turns_ended: int
    totals: dict[str, Any]
    pending_approvals: list[Approval]
    pending_questions: NotRequired[list[Question]]
    #: Background runs the session started: ``{"run_id", "agent", "status", "reported",
    #: "started_at"}``.
    background_runs: list[dict[str, Any]]


class StoredFile(TypedDict):
    id: str
    name: str
    content_type: str
    size_bytes: int
    sha256: str
    created_at: str
    uploaded_by: str | None
    agent: str | None
    run_id: str | None


class FileList(TypedDict):
    files: list[StoredFile]
    #: Pass back as ``cursor`` for the next page; ``None`` on the last page.
    next_cursor: str | None


class Memory(TypedDict):
    """What an agent remembers (``memory:``; docs/guides/memory.md)."""

    id: str
    agent: str
    #: ``user`` (about ``subject``), ``agent`` (the agent's own notes) or ``shared``.
    scope: str
    subject: str | None
    content: str
    pinned: bool
    shared_with: list[str]
    run_id: str | None
    created_at: str | None
    updated_at: str | None
    #: Relevance to the listing's search (``None`` without one).
    score: float | None


class MemoryList(TypedDict):
    memories: list[Memory]


class Health(TypedDict):
    """``status`` and ``version_skew`` for anyone; the rest only with a valid API key (or,
    without keys, from this machine)."""

    status: str
    version_skew: bool
    version: NotRequired[str]
    database: NotRequired[dict[str, Any]]
    workers: NotRequired[list[dict[str, Any]]]
    versions: NotRequired[list[str]]


class Forked(TypedDict):
    """A fork just made (``POST /runs/{id}/fork``): the new run, and what it copied."""

    run: Run
    fork: dict[str, Any]


class CostsReport(TypedDict):
    """What model calls cost per day or week (``GET /costs``): ``buckets`` (every period of
    the window, each with its figures and ``costs`` per agent and model), ``agents`` (each
    with its totals per model), ``totals``, and ``budgets`` (each agent's limits and the UTC
    day's use). Figures are ``calls``, ``cost_usd``, ``unknown_cost_calls``,
    ``input_tokens`` and ``output_tokens``."""

    period: str
    since: str
    until: str
    buckets: list[dict[str, Any]]
    agents: list[dict[str, Any]]
    totals: dict[str, Any]
    budgets: list[dict[str, Any]]


class AgentVersion(TypedDict):
    """One version of an agent's definition (``GET /agents/{name}/versions``)."""

    hash: str
    human_version: str | None
    first_seen: str | None
    runs: int
    active_runs: int
    files: dict[str, str]
    current: bool


class AgentVersions(TypedDict):
    agent: str
    #: The version the deployment serves now.
    current: str | None
    versions: list[AgentVersion]


class RunUpgrade(TypedDict):
    """What ``POST /runs/{id}/upgrade`` did."""

    run_id: str
    agent: str
    from_version: str | None
    version: str
    human_version: str | None
    upgraded: bool


class SignalSent(TypedDict):
    """What ``signal`` returns (``POST /runs/{id}/signals/{name}``)."""

    run_id: str
    name: str
    #: The signal's place on the run's signals stream.
    number: int
    #: ``False``: a signal with the same idempotency key was already recorded (the first one's
    #: number is returned, nothing was sent again).
    created: bool
    status: str


class Eval(TypedDict):
    """An eval (``GET /evals``, ``POST /evals``): a dataset run against a version of an
    agent (docs/guides/evals.md)."""

    id: str
    agent: str
    dataset: dict[str, Any]
    version: str
    human_version: str | None
    model: str | None
    repeat: int
    concurrency: int
    grader_model: str | None
    status: str
    source: str
    functions: str | None
    fork_at: int | None
    created_at: str | None
    finished_at: str | None
    working: NotRequired[bool]
    started: NotRequired[bool]


class EvalList(TypedDict):
    evals: list[Eval]
    next_cursor: str | None


class TorenAPIError(TorenError):
    """The API answered with an error: ``status`` and the body's ``code`` and ``message``."""

    code = "api_error"

    def __init__(self, status: int, code: str, message: str,
                 body: dict[str, Any] | None = None) -> None:
        super().__init__(f"{message} (HTTP {status}, {code})")
        self.status = status
        self.code = code
        self.reason = message
        self.retryable = status >= 500 or status == 429
        #: The whole error body (a 409 ``approval_decided`` has the first decision under
        #: ``approval``).
        self.body = body or {}


class TorenUnreachable(TorenError):
    """No connection to the Toren API could be made."""

    code = "api_unreachable"
    retryable = True


class InvalidId(TorenError):
    """An id, name or key given to the client cannot be sent: a run id that is no UUID, an
    agent name with a ``/`` in it, a header value with a line break. Nothing was sent."""

    code = "invalid_id"


#: The ids the API hands out (runs, sessions, approvals, files) are UUIDs; any case is taken,
#: the canonical lowercase form is sent.
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                   re.IGNORECASE)
_UUID_FORM = "UUIDs such as 3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
#: agent.yaml's ``name`` (toren.agents.loader.NAME_PATTERN) and a schedule's key under
#: ``schedules:`` (toren.server.runs.SCHEDULE_NAME, which a signal's name follows too:
#: toren.execution.signals.SIGNAL_NAME): tests keep them the same.
_AGENT_NAME = re.compile(r"[a-z][a-z0-9_-]{0,56}")
_SCHEDULE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")
_NAME_FORM = "lowercase letters, digits, - and _, starting with a letter (at most {} characters)"

#: Every parameter in the paths of the API's routes: what its value names, the pattern the
#: whole value matches, and that pattern in words.
_PATH_PARAMETERS: dict[str, tuple[str, re.Pattern[str], str]] = {
    "run_id": ("run id", _UUID, _UUID_FORM),
    "other_run_id": ("run id", _UUID, _UUID_FORM),
    "session_id": ("session id", _UUID, _UUID_FORM),
    "approval_id": ("approval id", _UUID, _UUID_FORM),
    "question_id": ("question id", _UUID, _UUID_FORM),
    "file_id": ("file id", _UUID, _UUID_FORM),
    "memory_id": ("memory id", _UUID, _UUID_FORM),
    "eval_id": ("eval id", _UUID, _UUID_FORM),
    "other_eval_id": ("eval id", _UUID, _UUID_FORM),
    "agent": ("agent name", _AGENT_NAME, _NAME_FORM.format(57)),
    "schedule": ("schedule name", _SCHEDULE_NAME, _NAME_FORM.format(64)),
    "signal": ("signal name", _SCHEDULE_NAME, _NAME_FORM.format(64)),
}
#: A route of the API as this module writes it: literal parts and ``{parameter}`` parts.
_ROUTE = re.compile(r"(?:/(?:[a-z][a-z-]*|\{[a-z_]+\}))+")
_PARAMETER = re.compile(r"\{([a-z_]+)\}")
#: What an HTTP header cannot carry (aiohttp refuses them, as header injection).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_id(parameter: str, value: object) -> str:
    """``value`` as the API's paths take it for ``parameter``: a run, session, approval,
    question or file id (``run_id``, ``session_id``, ``approval_id``, ``question_id``,
    ``file_id``) as a lowercase UUID, an ``agent`` or ``schedule`` name as it is.

    Raises:
        InvalidId: ``value`` is not one (``'../approvals' is not a run id: ...``). Every
            method of the client checks its ids so, before it sends anything.
    """
    what, pattern, form = _PATH_PARAMETERS[parameter]
    if isinstance(value, uuid.UUID) and pattern is _UUID:
        value = str(value)
    if not isinstance(value, str) or not pattern.fullmatch(value):
        article = "an" if what[0] in "aeiou" else "a"
        raise InvalidId(f"{what} {_shown(value)} is not {article} {what}: {what}s are {form}")
    return value.lower() if pattern is _UUID else value


def _header_value(what: str, value: object) -> str:
    """``value`` for an HTTP header, or ``InvalidId`` if a header cannot carry it."""
    if not isinstance(value, str) or _CONTROL.search(value):
        raise InvalidId(f"{what} {_shown(value)} cannot be sent: it must be text without line "
                        "breaks, NUL or other control characters")
    return value


def _unreachable(base_url: str, exc: aiohttp.ClientConnectorError) -> TorenUnreachable:
    reason = (os.strerror(exc.os_error.errno) if exc.os_error.errno
              else str(exc.os_error) or type(exc.os_error).__name__)
    return TorenUnreachable(
        f"cannot connect to the Toren API at {base_url}: {reason}. Is the server running? "
        "Start it with `toren dev`, or set TOREN_URL to where it listens")


class TorenClient:
    """Async client. Use as an async context manager, or call ``aclose()``."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *,
                 session: aiohttp.ClientSession | None = None, timeout_s: float = 30.0,
                 headers: dict[str, str] | None = None) -> None:
        self.base_url = (base_url or os.environ.get("TOREN_URL") or DEFAULT_URL).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("TOREN_API_KEY")
        #: Sent with every request (toren-mcp sends ``X-Toren-Source: mcp``, which the audit
        #: trail records as the call's source).
        self.headers = dict(headers or {})
        self._session = session
        self._owns_session = session is None
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def __aenter__(self) -> TorenClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections the client opened (a ``session=`` you passed stays open)."""
        if self._session is not None and self._owns_session:
            await self._session.close()
        self._session = None

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = self.headers | dict(extra or {})
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
            self._owns_session = True
        return self._session

    def _url(self, route: str, **path: object) -> str:
        """The URL of ``route`` on this server: a path of the API as written in this module
        (``/runs/{run_id}/cancel``), each ``{parameter}`` filled from ``path``, checked by
        ``check_id`` and percent-escaped. Every request's URL is made here, so no method can
        send an id unchecked; ``InvalidId`` before anything is sent."""
        if not _ROUTE.fullmatch(route):
            raise ValueError(f"{route!r} is not a route of the API: write each id as a "
                             "{parameter} and pass its value")

        def fill(match: re.Match[str]) -> str:
            return quote(check_id(match.group(1), path.pop(match.group(1))), safe="")

        filled = _PARAMETER.sub(fill, route)
        if path:
            raise TypeError(f"route {route} has no parameter {', '.join(path)}")
        return self.base_url + filled

    async def _request(self, method: str, route: str, *, body: Any = None,
                       params: dict[str, Any] | None = None,
                       headers: dict[str, str] | None = None, **path: object) -> Any:
        """``method`` on ``route`` (see ``_url``; ``path`` holds its parameters), with
        ``params`` as the query (``None`` values left out); the answer's JSON, or
        ``TorenAPIError``."""
        url = self._url(route, **path)
        query = {k: str(v) for k, v in (params or {}).items() if v is not None}
        try:
            form = isinstance(body, aiohttp.FormData)
            async with self._http().request(
                    method, url, json=None if form else body,
                    data=body if form else None, params=query,
                    headers=self._headers(headers), timeout=self.timeout) as response:
                payload = await response.json(content_type=None)
                if response.status >= 400:
                    raise _api_error(response, payload)
                return payload
        except aiohttp.ClientConnectorError as exc:
            raise _unreachable(self.base_url, exc) from exc

    async def healthz(self) -> Health:
        """Whether the server and its database are up (``GET /healthz``); more with a key."""
        result: Health = await self._request("GET", "/healthz")
        return result

    async def me(self) -> dict[str, Any]:
        """The caller's key: id, name, prefix, role, scopes, agents, expiry (``GET /me``)."""
        result: dict[str, Any] = await self._request("GET", "/me")
        return result

    async def fleet(self) -> dict[str, Any]:
        """Workers, queue, runs in flight and recent failures (``GET /fleet``; ``toren top``)."""
        result: dict[str, Any] = await self._request("GET", "/fleet")
        return result

    async def agents(self) -> list[dict[str, Any]]:
        """The agents the server serves, each as ``GET /agents/{name}`` shows it."""
        result = await self._request("GET", "/agents")
        return list(result["agents"])

    async def create_run(self, agent: str, input: Any, *,
                         idempotency_key: str | None = None,
                         files: list[str] | None = None,
                         webhook: str | dict[str, Any] | list[Any] | None = None,
                         priority: int | None = None, subject: str | None = None) -> Created:
        """Start a run; ``files`` are ids of uploaded files to attach to a text input.
        ``webhook`` is told when the run ends: a URL, ``{"url", "events"}`` or a list of them
        (docs/guides/webhooks.md). ``priority`` (-100..100; ``None``: the agent's) orders
        its work in the queue (docs/guides/flow-control.md). ``subject`` names whom the run
        is about: its agent's ``user`` memories are this subject's (docs/guides/memory.md)."""
        headers = _idempotency(idempotency_key)
        body = ({"agent": agent, "input": input} | ({"files": files} if files else {})
                | ({"webhook": webhook} if webhook is not None else {})
                | ({"priority": priority} if priority is not None else {})
                | ({"subject": subject} if subject is not None else {}))
        result: Created = await self._request("POST", "/runs", body=body, headers=headers)
        return result

    async def get_run(self, run_id: str) -> RunDetail:
        """The run (``GET /runs/{id}``), with ``why`` it is where it is, its ``totals``,
        pending approvals and ``budget``; a hot or an archived run alike."""
        result: RunDetail = await self._request("GET", "/runs/{run_id}", run_id=run_id)
        return result

    async def receipt(self, run_id: str) -> dict[str, Any]:
        """What the run did and cost (``GET /runs/{id}/receipt``): ``run``, ``why``,
        ``totals``, ``budget``, ``tasks`` (every model and tool call with tokens, cost and
        latency), ``peer_calls`` and ``prompts``; what ``toren jobs receipt --json`` prints."""
        result: dict[str, Any] = await self._request("GET", "/runs/{run_id}/receipt",
                                                     run_id=run_id)
        return result

    async def webhooks(self, run_id: str) -> list[dict[str, Any]]:
        """The run's completion webhook deliveries (``GET /runs/{id}/webhooks``), oldest first:
        each with its ``id`` (the event id), ``event``, ``url``, ``state`` (``pending``,
        ``delivered``, ``failed``), ``attempts``, ``last_error`` and ``history`` (every
        attempt's status code, error and duration)."""
        result: dict[str, Any] = await self._request("GET", "/runs/{run_id}/webhooks",
                                                     run_id=run_id)
        return list(result["deliveries"])

    async def children(self, run_id: str) -> list[Run]:
        """The runs the run's tasks started: peer calls and background runs, oldest first."""
        result: dict[str, list[Run]] = await self._request(
            "GET", "/runs/{run_id}/children", run_id=run_id)
        return result["children"]

    async def list_runs(self, *, agent: str | None = None, status: str | None = None,
                        limit: int = 50, cursor: str | None = None,
                        kind: str | None = None, schedule: str | None = None,
                        q: str | None = None, version: str | None = None,
                        since: str | None = None, until: str | None = None,
                        sort: str | None = None) -> RunList:
        """A page of runs, each with its totals (model calls, steps, cost); newest first
        unless ``sort`` says otherwise (``"-cost"``, ``"steps"``, ``"-duration"``...; a
        leading ``-`` for largest first). ``schedule``: only the runs that schedule started;
        ``q``: words all in the input or output; ``version``: an agent version's hash (or a
        prefix of 4 characters or more) or its ``version:``; ``since``/``until``: ISO 8601
        dates or date-times bounding ``created_at``. Pass ``next_cursor`` back as ``cursor``
        with the same filters and sort."""
        result: RunList = await self._request("GET", "/runs", params={
            "agent": agent, "status": status, "limit": limit, "cursor": cursor, "kind": kind,
            "schedule": schedule, "q": q, "version": version, "since": since, "until": until,
            "sort": sort})
        return result

    async def list_schedules(self, *, agent: str | None = None) -> list[Schedule]:
        """The schedules of the agents the server serves (removed ones too)."""
        result = await self._request("GET", "/schedules", params={"agent": agent})
        return list(result["schedules"])

    async def get_schedule(self, agent: str, name: str) -> Schedule:
        """One schedule with its most recent fires."""
        result: Schedule = await self._request(
            "GET", "/schedules/{agent}/{schedule}", agent=agent, schedule=name)
        return result

    async def pause_schedule(self, agent: str, name: str) -> Schedule:
        """Stop the schedule firing until ``resume_schedule`` (``trigger_schedule`` still
        starts a run)."""
        result: Schedule = await self._request(
            "POST", "/schedules/{agent}/{schedule}/pause", agent=agent, schedule=name)
        return result

    async def resume_schedule(self, agent: str, name: str) -> Schedule:
        """Fire again from the next slot; slots that passed while paused are skipped."""
        result: Schedule = await self._request(
            "POST", "/schedules/{agent}/{schedule}/resume", agent=agent, schedule=name)
        return result

    async def trigger_schedule(self, agent: str, name: str) -> ScheduleTriggered:
        """Start a run of the schedule now (even while paused)."""
        result: ScheduleTriggered = await self._request(
            "POST", "/schedules/{agent}/{schedule}/trigger", agent=agent, schedule=name)
        return result

    async def events(self, run_id: str, *, after: str | None = None) -> EventList:
        """The run's events after the cursor ``after`` (``GET /runs/{id}/events``), the
        ``cursor`` to pass next time, and the run's ``status``."""
        result: EventList = await self._request("GET", "/runs/{run_id}/events",
                                                run_id=run_id, params={"after": after})
        return result

    async def cancel_run(self, run_id: str, reason: str | None = None) -> Run:
        """Cancel the run and the runs its tasks started (``POST /runs/{id}/cancel``); the
        run afterwards."""
        result: Run = await self._request("POST", "/runs/{run_id}/cancel", run_id=run_id,
                                          body={"reason": reason} if reason else None)
        return result

    async def signal(self, run_id: str, name: str, payload: Any = None, *,
                     idempotency_key: str | None = None) -> SignalSent:
        """Send signal ``name`` with ``payload`` (any JSON value) to the run
        (``POST /runs/{id}/signals/{name}``); a workflow takes it with
        ``ctx.wait_for_signal(name)``, and every tool waiting in ``toren.wait_for_signal(name)``
        gets it. ``TorenAPIError`` 409 ``run_finished`` once the run has
        finished, 404 for an unknown run, 413 for a payload over 64 KiB of JSON."""
        result: SignalSent = await self._request(
            "POST", "/runs/{run_id}/signals/{signal}", run_id=run_id, signal=name,
            body=payload, headers=_idempotency(idempotency_key))
        return result

    async def wait_for_run(self, run_id: str, *, poll_s: float = 0.5,
                           timeout_s: float | None = None) -> RunDetail:
        """Poll until the run has ended; ``TimeoutError`` after ``timeout_s``."""
        return await _poll(lambda: self.get_run(run_id), _TERMINAL, poll_s, timeout_s,
                           f"run {run_id}")

    async def create_session(self, agent: str, *,
                             idempotency_key: str | None = None,
                             webhook: str | dict[str, Any] | list[Any] | None = None,
                             subject: str | None = None) -> Created:
        """Open a session (status ``awaiting_input``); ``webhook`` and ``subject`` as
        ``create_run``'s."""
        headers = _idempotency(idempotency_key)
        body = ({"agent": agent} | ({"webhook": webhook} if webhook is not None else {})
                | ({"subject": subject} if subject is not None else {}))
        result: Created = await self._request("POST", "/sessions", body=body,
                                              headers=headers)
        return result

    async def get_session(self, session_id: str) -> Session:
        """The session with its transcript, totals and pending approvals."""
        result: Session = await self._request("GET", "/sessions/{session_id}",
                                              session_id=session_id)
        return result

    async def send_message(self, session_id: str, text: str, *,
                           idempotency_key: str | None = None,
                           files: list[str] | None = None) -> TurnAccepted:
        """Start the agent's turn. ``TorenAPIError`` with status 409 and code
        ``session_busy`` while it is mid-turn, ``session_ended`` after the session ended.
        Resending with the same ``idempotency_key`` answers with the turn it started.
        ``files`` are ids of uploaded files to attach to the message."""
        headers = _idempotency(idempotency_key)
        body: dict[str, Any] = {"text": text} | ({"files": files} if files else {})
        result: TurnAccepted = await self._request(
            "POST", "/sessions/{session_id}/messages", session_id=session_id, body=body,
            headers=headers)
        return result

    async def upload_file(self, path: str | Path) -> StoredFile:
        """Upload a file (streamed from disk) for agents to read; its record, with the id."""
        path = Path(path)
        try:
            handle = await asyncio.to_thread(path.open, "rb")
        except OSError as exc:
            raise TorenError(f"{path}: cannot be read: {exc.strerror or exc}") from None
        try:
            form = aiohttp.FormData()
            form.add_field("file", handle, filename=path.name,
                           content_type="application/octet-stream")
            result: StoredFile = await self._request("POST", "/files", body=form)
        finally:
            handle.close()
        return result

    async def list_files(self, *, limit: int = 100, cursor: str | None = None) -> FileList:
        """A page of files, newest first (``GET /files``); ``cursor``: the ``next_cursor`` of
        the previous page, ``None`` on the last."""
        result: FileList = await self._request("GET", "/files", params={
            "limit": limit, "cursor": cursor})
        return result

    async def get_file(self, file_id: str) -> StoredFile:
        """An uploaded file's record (``GET /files/{id}``)."""
        result: StoredFile = await self._request("GET", "/files/{file_id}", file_id=file_id)
        return result

    async def file_content(self, file_id: str) -> bytes:
        """An uploaded file's content as stored (``GET /files/{id}/content``): the bytes a
        model is shown or ``read_document`` reads. ``TorenAPIError`` 404 ``file_not_found``
        for an unknown or deleted file."""
        url = self._url("/files/{file_id}/content", file_id=file_id)
        try:
            async with self._http().get(url, headers=self._headers(),
                                        timeout=self.timeout) as response:
                if response.status >= 400:
                    raise _api_error(response, await response.json(content_type=None))
                return await response.read()
        except aiohttp.ClientConnectorError as exc:
            raise _unreachable(self.base_url, exc) from exc

    async def delete_file(self, file_id: str) -> dict[str, Any]:
        """Delete an uploaded file (``DELETE /files/{id}``): ``{"id", "deleted": true}``."""
        result: dict[str, Any] = await self._request("DELETE", "/files/{file_id}",
                                                     file_id=file_id)
        return result

    async def list_memories(self, *, agent: str | None = None, subject: str | None = None,
                            scope: str | None = None, search: str | None = None,
                            limit: int = 100) -> MemoryList:
        """What agents remember (``GET /memories``), most recently changed first (best match
        first with ``search``), filtered by agent, subject (whom it is about) and scope."""
        result: MemoryList = await self._request("GET", "/memories", params={
            "agent": agent, "subject": subject, "scope": scope, "q": search, "limit": limit})
        return result

    async def get_memory(self, memory_id: str) -> Memory:
        """One memory (``GET /memories/{id}``)."""
        result: Memory = await self._request("GET", "/memories/{memory_id}",
                                             memory_id=memory_id)
        return result

    async def edit_memory(self, memory_id: str, *, content: str | None = None,
                          pinned: bool | None = None) -> Memory:
        """Correct a memory's text or whether it is pinned (``PATCH /memories/{id}``)."""
        body = ({"content": content} if content is not None else {}) | (
            {"pinned": pinned} if pinned is not None else {})
        result: Memory = await self._request("PATCH", "/memories/{memory_id}", body=body,
                                             memory_id=memory_id)
        return result

    async def delete_memory(self, memory_id: str) -> dict[str, Any]:
        """Erase a memory (``DELETE /memories/{id}``): ``{"id", "deleted": true}``."""
        result: dict[str, Any] = await self._request("DELETE", "/memories/{memory_id}",
                                                     memory_id=memory_id)
        return result

    async def erase_subject(self, subject: str, *, agent: str | None = None) -> list[str]:
        """Erase everything agents (or ``agent``) keep about ``subject``
        (``DELETE /memories?subject=``); the ids erased."""
        result = await self._request("DELETE", "/memories",
                                     params={"subject": subject, "agent": agent})
        return list(result["erased"])

    async def close_session(self, session_id: str) -> TurnAccepted:
        """End the session (``{"close": true}``): ``wait_for_turn`` then sees it completed."""
        result: TurnAccepted = await self._request(
            "POST", "/sessions/{session_id}/messages", session_id=session_id,
            body={"close": True})
        return result

    async def wait_for_turn(self, session_id: str, *, poll_s: float = 0.5,
                            timeout_s: float | None = None) -> Session:
        """Poll until the session is no longer mid-turn (it awaits input, or it ended)."""
        return await _poll(lambda: self.get_session(session_id),
                           (*_TERMINAL, "awaiting_input"), poll_s, timeout_s,
                           f"session {session_id}")

    async def list_approvals(self, *, agent: str | None = None, run_id: str | None = None,
                             status: str | None = None, limit: int = 50) -> list[Approval]:
        """Approvals, newest request first; ``status="pending"``: the ones waiting."""
        result: ApprovalList = await self._request("GET", "/approvals", params={
            "agent": agent, "run": run_id, "status": status, "limit": limit})
        return result["approvals"]

    async def list_questions(self, run_id: str, *, status: str | None = None
                             ) -> list[Question]:
        """The questions the run's agent asked (``ask_user``), oldest first;
        ``status="pending"``: the ones waiting for an answer."""
        result: QuestionList = await self._request(
            "GET", "/runs/{run_id}/questions", run_id=run_id, params={"status": status})
        return result["questions"]

    async def answer_question(self, run_id: str, question_id: str, answer: str) -> Question:
        """Answer a question (exactly once); the answer becomes the ``ask_user`` call's result.
        ``TorenAPIError`` 409 ``question_answered`` if it was settled before
        (``.body["question"]`` carries the first answer), 422 ``invalid_answer`` if the answer
        is not among its choices."""
        result: Question = await self._request(
            "POST", "/runs/{run_id}/questions/{question_id}/answer", run_id=run_id,
            question_id=question_id, body={"answer": answer})
        return result

    async def get_approval(self, approval_id: str) -> Approval:
        """One approval, pending or decided (``GET /approvals/{id}``)."""
        result: Approval = await self._request("GET", "/approvals/{approval_id}",
                                               approval_id=approval_id)
        return result

    async def approve(self, approval_id: str, reason: str | None = None, *,
                      digest: str | None = None, always: bool = False) -> Approval:
        """Let the call run (exactly once; ``always``: and every later call of the tool with
        the same arguments in the run, without asking). ``digest``: the approval's digest as
        you saw it (``get_approval``); another is 409 ``approval_stale`` (``.body["digest"]``
        is the current one). ``TorenAPIError`` 409 ``approval_decided`` if it was decided
        before (``.body["approval"]`` is the first decision), 403 if this key is not one of
        the tool's approvers."""
        body = _decision_body(reason=reason, digest=digest,
                              scope="run" if always else None)
        result: Approval = await self._request(
            "POST", "/approvals/{approval_id}/approve", approval_id=approval_id, body=body)
        return result

    async def deny(self, approval_id: str, reason: str | None = None, *,
                   digest: str | None = None) -> Approval:
        """Refuse the call; the model reads the refusal and ``reason``. Errors as ``approve``."""
        result: Approval = await self._request(
            "POST", "/approvals/{approval_id}/deny", approval_id=approval_id,
            body=_decision_body(reason=reason, digest=digest))
        return result

    async def edit_approval(self, approval_id: str, arguments: dict[str, Any], *,
                            digest: str, reason: str | None = None) -> Approval:
        """Let the call run with ``arguments`` instead (the edit approves the edited call);
        the model reads what changed with the result. 422 ``invalid_arguments`` (with
        ``.body["field"]``) when they break the tool's schema; otherwise errors as
        ``approve``."""
        result: Approval = await self._request(
            "POST", "/approvals/{approval_id}/edit", approval_id=approval_id,
            body=_decision_body(reason=reason, digest=digest) | {"arguments": arguments})
        return result

    async def answer_approval(self, approval_id: str, answer: str, *, digest: str,
                              reason: str | None = None) -> Approval:
        """Give the call's result instead of running the tool (it never runs). Errors as
        ``approve``."""
        result: Approval = await self._request(
            "POST", "/approvals/{approval_id}/answer", approval_id=approval_id,
            body=_decision_body(reason=reason, digest=digest) | {"answer": answer})
        return result

    async def stream_events(self, run_id: str, *, after: str | None = None,
                            reconnects: int = 5) -> AsyncIterator[Event]:
        """The run's events live (Server-Sent Events) until it ends, each once.

        A dropped connection is resumed from the last event received (``Last-Event-ID``), up
        to ``reconnects`` times in a row.
        """
        async for item in self.stream_live(run_id, after=after, reconnects=reconnects):
            if "cursor" in item:
                yield cast(Event, item)

    async def stream_live(self, run_id: str, *, after: str | None = None,
                          reconnects: int = 5) -> AsyncIterator[Event | TextPiece]:
        """``stream_events``, with the pieces of model text as they are generated in between
        (``TextPiece``: no ``cursor``; best-effort, never replayed on reconnecting). A call's
        pieces come before its ``ModelCallCompleted``, whose ``text`` is the whole of it.
        """
        url = self._url("/runs/{run_id}/events", run_id=run_id)
        last = after
        failures = 0
        while True:
            headers = self._headers({"Accept": "text/event-stream"})
            if last:
                headers["Last-Event-ID"] = _header_value("event cursor", last)
            try:
                async with self._http().get(url, headers=headers,
                                            timeout=aiohttp.ClientTimeout(total=None)
                                            ) as response:
                    if response.status >= 400:
                        body = await response.json(content_type=None)
                        error = body.get("error", {}) if isinstance(body, dict) else {}
                        raise TorenAPIError(response.status, error.get("code", "http_error"),
                                            error.get("message", "request failed"))
                    async for frame in _frames(response.content):
                        failures = 0
                        if frame.get("event") == "end":
                            return
                        if frame.get("event") == "error":  # e.g. the stream's key was revoked
                            raise _stream_error(frame.get("data", "{}"))
                        if frame.get("event") == "text_delta":
                            piece: TextPiece = json.loads(frame.get("data", "{}"))
                            yield piece
                            continue
                        if "id" in frame:
                            last = frame["id"]
                        event: Event = json.loads(frame.get("data", "{}"))
                        yield event
                # the stream closed before the run ended (the server restarted or lost its
                # database): continue from the last event received
                raise aiohttp.ServerDisconnectedError("the event stream ended early")
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
                failures += 1
                if failures > reconnects:
                    raise
                await asyncio.sleep(min(5.0, 0.2 * 2 ** failures))

    async def fork_run(self, run_id: str, at_step: int, *, prompt: str | None = None,
                       model: str | None = None) -> Forked:
        """Fork a run at a step (``POST /runs/{id}/fork``): a new run whose first ``at_step``
        steps (waves, for a workflow run) are copied from this one's log at no cost, then go
        on live with ``prompt`` (system prompt text) and ``model`` when given."""
        body = {"at_step": at_step} | ({"prompt": prompt} if prompt is not None else {}) | (
            {"model": model} if model is not None else {})
        result: Forked = await self._request("POST", "/runs/{run_id}/fork", run_id=run_id,
                                             body=body)
        return result

    async def forks(self, run_id: str) -> list[Run]:
        """The forks made from a run, oldest first (``GET /runs/{id}/forks``)."""
        result: dict[str, list[Run]] = await self._request(
            "GET", "/runs/{run_id}/forks", run_id=run_id)
        return result["forks"]

    async def diff_runs(self, run_a: str, run_b: str) -> dict[str, Any]:
        """Where two runs diverge (``GET /runs/{a}/diff/{b}``): ``a``, ``b``, ``identical``,
        ``first_difference`` and every task's ``steps`` side by side."""
        result: dict[str, Any] = await self._request(
            "GET", "/runs/{run_id}/diff/{other_run_id}", run_id=run_a, other_run_id=run_b)
        return result

    async def costs(self, *, period: str = "day", since: str | None = None,
                    until: str | None = None, agent: str | None = None) -> CostsReport:
        """What the served agents' model calls cost per ``period`` (``day`` or ``week``) in
        the window ``since``..``until`` (ISO 8601 dates or times, widened to whole periods; by
        default the last 30 days or 12 weeks), per agent and model, with each agent's budgets
        and today's use (``GET /costs``; a fork's copied calls are not counted again)."""
        result: CostsReport = await self._request("GET", "/costs", params={
            "period": period, "since": since, "until": until, "agent": agent})
        return result

    # -- evals (docs/guides/evals.md) ------------------------------------------------------

    async def start_eval(self, agent: str, dataset: dict[str, Any] | None = None, *,
                         repeat: int = 1, concurrency: int = 4,
                         grader_model: str | None = None, version: str | None = None,
                         model: str | None = None, from_runs: dict[str, Any] | None = None,
                         fork_at: int | None = None) -> Eval:
        """Start an eval (``POST /evals``), what ``toren eval run`` does; the deployment works
        it, and goes on with it after a restart.

        Args:
            agent: an agent the deployment serves.
            dataset: ``{"cases": [{"input": ..., "graders": [...]}, ...]}``, as a YAML
                dataset file has it; or give ``from_runs``.
            repeat: runs of every case (1 to 100).
            concurrency: case runs at a time (1 to 64).
            grader_model: the model of rubrics without one of their own.
            version: a kept version of the agent instead of the served one: its hash (4
                characters at least) or its ``version:`` string (``--version``).
            model: run the cases with this model instead of the agent's (``--model``).
            from_runs: a dataset of recorded runs instead of ``dataset``: ``{"status",
                "version", "schedule", "q", "since", "until", "limit", "graders"}``, all
                optional (``--from-runs``, ``--since``, ``--until``, ``--runs-limit``,
                ``--graders``).
            fork_at: with ``from_runs``, replay each run as a fork at this step
                (``--fork-at``).

        ``function:`` graders run the functions of the ``evals.py`` deployed in the agent's
        directory on the server (docs/guides/evals.md)."""
        body: dict[str, Any] = {"agent": agent, "repeat": repeat, "concurrency": concurrency}
        for name, value in (("dataset", dataset), ("grader_model", grader_model),
                            ("version", version), ("model", model),
                            ("from_runs", from_runs), ("fork_at", fork_at)):
            if value is not None:
                body[name] = value
        result: Eval = await self._request("POST", "/evals", body=body)
        return result

    async def list_evals(self, *, agent: str | None = None, limit: int = 50,
                         cursor: str | None = None) -> EvalList:
        """Evals of the served agents, newest first (``GET /evals``)."""
        result: EvalList = await self._request("GET", "/evals", params={
            "agent": agent, "limit": limit, "cursor": cursor})
        return result

    async def eval_report(self, eval_id: str) -> dict[str, Any]:
        """An eval's report (``GET /evals/{id}``): ``eval``, ``totals`` (with ``pass_rate``
        and ``complete``), ``cost_usd`` and ``latency_s`` distributions, ``grader_cost_usd``,
        ``tags``, ``cases`` and ``working``."""
        result: dict[str, Any] = await self._request("GET", "/evals/{eval_id}",
                                                     eval_id=eval_id)
        return result

    async def wait_for_eval(self, eval_id: str, *, poll_s: float = 0.5,
                            timeout_s: float | None = None) -> dict[str, Any]:
        """Poll the eval's report until it is finished; its report."""
        deadline = None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s
        while True:
            report = await self.eval_report(eval_id)
            if report["eval"]["status"] == "finished":
                return report
            if deadline is not None and asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"eval {eval_id} is still running after {timeout_s}s")
            await asyncio.sleep(poll_s)

    async def resume_eval(self, eval_id: str) -> Eval:
        """Go on with a stopped eval on the deployment (``POST /evals/{id}/resume``)."""
        result: Eval = await self._request("POST", "/evals/{eval_id}/resume", eval_id=eval_id)
        return result

    async def compare_evals(self, eval_a: str, eval_b: str) -> dict[str, Any]:
        """What changed from eval A to eval B (``GET /evals/{a}/compare/{b}``): pass rates,
        cost, latency, and the cases fixed, broken and flaky."""
        result: dict[str, Any] = await self._request(
            "GET", "/evals/{eval_id}/compare/{other_eval_id}", eval_id=eval_a,
            other_eval_id=eval_b)
        return result

    # -- agent versions (issue 26 part 2) --------------------------------------------------

    async def agent_versions(self, agent: str) -> AgentVersions:
        """The versions of an agent's definition kept by the deployment, newest first, with
        how many runs are on each (``GET /agents/{name}/versions``)."""
        result: AgentVersions = await self._request(
            "GET", "/agents/{agent}/versions", agent=agent)
        return result

    async def upgrade_run(self, run_id: str) -> RunUpgrade:
        """Move an unfinished run to the version of its agent the deployment serves
        (``POST /runs/{id}/upgrade``); recorded in the run's log."""
        result: RunUpgrade = await self._request("POST", "/runs/{run_id}/upgrade",
                                                 run_id=run_id, body={})
        return result

    async def list_archived_runs(self, *, agent: str | None = None, limit: int = 50,
                                 cursor: str | None = None) -> ArchivedRunList:
        """Archived runs (retention), newest first (``GET /archived-runs``); each is read in
        full by ``get_run``, ``receipt`` and ``events`` as a hot run is."""
        result: ArchivedRunList = await self._request("GET", "/archived-runs", params={
            "agent": agent, "limit": limit, "cursor": cursor})
        return result

    async def archive(self, *, dry_run: bool = False,
                      max_runs: int | None = None) -> dict[str, Any]:
        """Run one archive pass now (``POST /archive``); what ``toren db archive --json``
        prints: ``dry_run``, ``archive``, ``agents`` (counts per agent) and ``runs``."""
        body: dict[str, Any] = {"dry_run": dry_run}
        if max_runs is not None:
            body["max_runs"] = max_runs
        result: dict[str, Any] = await self._request("POST", "/archive", body=body)
        return result

    async def restore_run(self, run_id: str) -> Run:
        """Put an archived run back into the hot tables, whole (``POST /runs/{id}/restore``);
        the run afterwards. ``run_not_archived`` (409) if it is not archived."""
        result: Run = await self._request("POST", "/runs/{run_id}/restore", run_id=run_id,
                                          body={})
        return result

    async def audit(self, *, actor: str | None = None, action: str | None = None,
                    agent: str | None = None, run: str | None = None,
                    outcome: str | None = None, since: str | None = None,
                    until: str | None = None, limit: int = 50,
                    cursor: str | None = None) -> dict[str, Any]:
        """A page of the audit trail, newest first (``GET /audit``; the key needs the
        ``audit:read`` scope): ``{"entries", "next_cursor"}``. ``action`` may be the start of
        one (``approval``); ``since``/``until`` an age (``1h``) or an ISO 8601 time."""
        result: dict[str, Any] = await self._request("GET", "/audit", params={
            "actor": actor, "action": action, "agent": agent, "run": run, "outcome": outcome,
            "since": since, "until": until, "limit": limit, "cursor": cursor})
        return result


def _api_error(response: aiohttp.ClientResponse, payload: Any) -> TorenAPIError:
    """The ``TorenAPIError`` for an answer of status 400 or more and its JSON body."""
    error = (payload or {}).get("error", {}) if isinstance(payload, dict) else {}
    return TorenAPIError(response.status, error.get("code", "http_error"),
                         error.get("message", response.reason or "request failed"),
                         payload if isinstance(payload, dict) else None)


def _stream_error(data: str) -> TorenAPIError:
    """The error a server ended an event stream with (``event: error``), as the HTTP error it
    stands for: a revoked key would be a 401 on reconnecting."""
    try:
        error = json.loads(data).get("error", {})
    except (ValueError, AttributeError):
        error = {}
    code = str(error.get("code", "stream_error"))
    status = 401 if code == "api_key_revoked" else 500
    return TorenAPIError(status, code, str(error.get("message", "the event stream failed")))


_TERMINAL = ("completed", "stopped", "failed", "cancelled")
R = TypeVar("R", RunDetail, Session)


async def _poll(read: Callable[[], Awaitable[R]], done: tuple[str, ...], poll_s: float,
                timeout_s: float | None, what: str) -> R:
    """``read()`` until its status is one of ``done``; ``TimeoutError`` after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    while True:
        found = await read()
        if found["status"] in done:
            return found
        if deadline is not None and loop.time() > deadline:
            raise TimeoutError(f"{what} is still {found['status']}")
        await asyncio.sleep(poll_s)


async def _frames(stream: aiohttp.StreamReader) -> AsyncIterator[dict[str, str]]:
    frame: dict[str, str] = {}
    async for raw in stream:
        line = raw.decode().rstrip("\r\n")
        if not line:
            if frame:
                yield frame
                frame = {}
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        frame[field] = value[1:] if value.startswith(" ") else value


def _blocking(call: Callable[Concatenate[TorenClient, P], Awaitable[T]]
              ) -> Callable[Concatenate[SyncTorenClient, P], T]:
    """The blocking twin of ``TorenClient``'s coroutine method ``call``: the same parameters,
    docstring and annotations, returning what the coroutine returns (see the module
    docstring for why each twin is bound by one line)."""
    if not inspect.iscoroutinefunction(call):
        raise TypeError(f"{call.__qualname__} is not a coroutine method of TorenClient")

    def method(self: SyncTorenClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(lambda client: call(client, *args, **kwargs))

    return _twin(method, call, inspect.signature(call).return_annotation)


def _blocking_stream(call: Callable[Concatenate[TorenClient, P], AsyncIterator[T]]
                     ) -> Callable[Concatenate[SyncTorenClient, P], Iterator[T]]:
    """The blocking twin of ``TorenClient``'s async generator method ``call``: a generator
    of the same items, the stream held open on a private event loop while it is iterated
    and closed (connection and all) when the iteration ends or is left (``break``)."""
    if not inspect.isasyncgenfunction(call):
        raise TypeError(f"{call.__qualname__} is not an async generator method of TorenClient")

    def method(self: SyncTorenClient, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        end = object()
        with asyncio.Runner() as runner:
            client = self._client()
            items = call(client, *args, **kwargs)

            async def next_item() -> object:
                return await anext(items, end)

            async def close() -> None:
                try:
                    if isinstance(items, AsyncGenerator):
                        await items.aclose()
                finally:
                    await client.aclose()

            try:
                while (item := runner.run(next_item())) is not end:
                    yield cast(T, item)
            finally:
                runner.run(close())

    returns = inspect.signature(call).return_annotation
    if not (isinstance(returns, str) and returns.startswith("AsyncIterator[")):
        raise TypeError(f"{call.__qualname__} must be annotated as an AsyncIterator[...]")
    return _twin(method, call, "Iterator[" + returns.removeprefix("AsyncIterator["))


def _twin(method: M, call: Callable[..., Any], returns: object) -> M:
    """``method`` dressed as ``call``'s twin on ``SyncTorenClient`` for ``help()``,
    ``inspect.signature`` and ``typing.get_type_hints``. No ``__wrapped__``: tools that
    unwrap would find a coroutine function behind a blocking one."""
    method.__name__ = call.__name__
    method.__qualname__ = f"SyncTorenClient.{call.__name__}"
    method.__module__ = call.__module__
    method.__doc__ = call.__doc__
    method.__annotations__ = {**call.__annotations__, "return": returns}
    method.__signature__ = (  # type: ignore[attr-defined]
        inspect.signature(call).replace(return_annotation=returns))
    return method


class SyncTorenClient:
    """The same API, blocking: ``TorenClient``'s methods one for one, each call run on a
    private event loop with a client of its own (so one instance serves any thread)."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *,
                 timeout_s: float = 30.0) -> None:
        self._args = (base_url, api_key, timeout_s)
        self.base_url = (base_url or os.environ.get("TOREN_URL") or DEFAULT_URL).rstrip("/")

    def _client(self) -> TorenClient:
        base_url, api_key, timeout_s = self._args
        return TorenClient(base_url, api_key, timeout_s=timeout_s)

    def _run(self, call: Callable[[TorenClient], Awaitable[T]]) -> T:
        """``call`` on a fresh async client, on an event loop of its own, to the end."""

        async def go() -> T:
            async with self._client() as client:
                return await call(client)

        return asyncio.run(go())

    # One line per call binds TorenClient's definition; tests/unit/test_client_sync_twins.py
    # fails for an async method left without its line here.
    healthz = _blocking(TorenClient.healthz)
    me = _blocking(TorenClient.me)
    fleet = _blocking(TorenClient.fleet)
    agents = _blocking(TorenClient.agents)
    agent_versions = _blocking(TorenClient.agent_versions)
    # runs
    create_run = _blocking(TorenClient.create_run)
    get_run = _blocking(TorenClient.get_run)
    receipt = _blocking(TorenClient.receipt)
    children = _blocking(TorenClient.children)
    forks = _blocking(TorenClient.forks)
    costs = _blocking(TorenClient.costs)
    webhooks = _blocking(TorenClient.webhooks)
    list_runs = _blocking(TorenClient.list_runs)
    events = _blocking(TorenClient.events)
    stream_events = _blocking_stream(TorenClient.stream_events)
    stream_live = _blocking_stream(TorenClient.stream_live)
    cancel_run = _blocking(TorenClient.cancel_run)
    signal = _blocking(TorenClient.signal)
    wait_for_run = _blocking(TorenClient.wait_for_run)
    fork_run = _blocking(TorenClient.fork_run)
    diff_runs = _blocking(TorenClient.diff_runs)
    upgrade_run = _blocking(TorenClient.upgrade_run)
    list_archived_runs = _blocking(TorenClient.list_archived_runs)
    archive = _blocking(TorenClient.archive)
    restore_run = _blocking(TorenClient.restore_run)
    # the audit trail
    audit = _blocking(TorenClient.audit)
    # memories
    list_memories = _blocking(TorenClient.list_memories)
    get_memory = _blocking(TorenClient.get_memory)
    edit_memory = _blocking(TorenClient.edit_memory)
    delete_memory = _blocking(TorenClient.delete_memory)
    erase_subject = _blocking(TorenClient.erase_subject)
    # evals
    start_eval = _blocking(TorenClient.start_eval)
    list_evals = _blocking(TorenClient.list_evals)
    eval_report = _blocking(TorenClient.eval_report)
    wait_for_eval = _blocking(TorenClient.wait_for_eval)
    resume_eval = _blocking(TorenClient.resume_eval)
    compare_evals = _blocking(TorenClient.compare_evals)
    # schedules
    list_schedules = _blocking(TorenClient.list_schedules)
    get_schedule = _blocking(TorenClient.get_schedule)
    pause_schedule = _blocking(TorenClient.pause_schedule)
    resume_schedule = _blocking(TorenClient.resume_schedule)
    trigger_schedule = _blocking(TorenClient.trigger_schedule)
    # sessions
    create_session = _blocking(TorenClient.create_session)
    get_session = _blocking(TorenClient.get_session)
    send_message = _blocking(TorenClient.send_message)
    close_session = _blocking(TorenClient.close_session)
    wait_for_turn = _blocking(TorenClient.wait_for_turn)
    # files
    upload_file = _blocking(TorenClient.upload_file)
    list_files = _blocking(TorenClient.list_files)
    get_file = _blocking(TorenClient.get_file)
    file_content = _blocking(TorenClient.file_content)
    delete_file = _blocking(TorenClient.delete_file)
    # approvals
    list_approvals = _blocking(TorenClient.list_approvals)
    get_approval = _blocking(TorenClient.get_approval)
    approve = _blocking(TorenClient.approve)
    list_questions = _blocking(TorenClient.list_questions)
    answer_question = _blocking(TorenClient.answer_question)
    deny = _blocking(TorenClient.deny)
    edit_approval = _blocking(TorenClient.edit_approval)
    answer_approval = _blocking(TorenClient.answer_approval)


def _decision_body(**fields: str | None) -> dict[str, Any]:
    """A decision's body: the fields given (``None`` ones left out)."""
    return {name: value for name, value in fields.items() if value is not None}


def _idempotency(key: str | None) -> dict[str, str] | None:
    """The ``Idempotency-Key`` header for ``key`` (none for ``None`` or ``""``)."""
    return {"Idempotency-Key": _header_value("idempotency key", key)} if key else None
