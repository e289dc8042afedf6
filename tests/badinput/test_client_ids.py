"""Hostile ids for ``toren.client`` (issue 35 item 2): every method, async and sync, refuses a
path parameter that is not an id or a name with ``InvalidId`` before it sends anything, and what
it does send goes to its own route. Found by enumerating the clients' methods, so a new method
is covered as it is written. Against a real local HTTP server that records every request; then
the reproduction against `toren dev` serving the approval desk, and the server's own routes
probed with the same paths sent raw."""

from __future__ import annotations

import asyncio
import inspect
import json
import shutil
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.conftest import wait_until
from tests.e2e.test_http_api import call
from toren.agents.loader import NAME_PATTERN
from toren.client import InvalidId, SyncTorenClient, TorenClient, check_id
from toren.errors import TorenError
from toren.server.runs import SCHEDULE_NAME

pytestmark = pytest.mark.timeout(300)
APPROVAL_DESK = Path(__file__).parents[2] / "contrib" / "examples" / "approval-desk"

#: A valid value for each string parameter of the clients' methods (and for the required
#: parameters that are not strings). Distinct values, so that which of them a request's path
#: carries tells which parameters are path parameters.
SAMPLES: dict[str, Any] = {
    "run_id": "3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
    "run_a": "4a1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
    "run_b": "5b1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
    "session_id": "6c1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
    "approval_id": "7d1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
    "question_id": "0a1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
    "file_id": "8e1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
    "agent": "sample-agent", "name": "sample-schedule", "schedule": "other-schedule",
    "input": "sample input", "text": "sample text", "reason": "sample reason",
    "idempotency_key": "sample-key", "prompt": "sample prompt", "model": "sample/model",
    "cursor": "sample-cursor", "after": "sample-after", "status": "completed", "kind": "run",
    "at_step": 1, "digest": "ab" * 32, "answer": "sample answer",
    "arguments": {"sample": 1}, "actor": "cli:sample", "action": "run.start",
    "outcome": "ok", "since": "1h", "until": "2026-12-04T00:00:00Z", "run": "sample-run",
    "period": "week", "q": "sample words", "version": "1.0.0", "sort": "-cost",
    "eval_id": "1e1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
    "eval_a": "2e1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
    "eval_b": "3e1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f", "grader_model": "sample/judge",
    "memory_id": "4e1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f", "subject": "sample-subject",
    "content": "sample memory", "scope": "user", "search": "sample search",
}
PENDING = "9f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
#: What a model (or a user) can put where an id goes: traversal into another route, a query or a
#: fragment of its own, percent-escapes the server would decode, NUL, nothing, far too much.
HOSTILE = [f"../approvals/{PENDING}/approve?x=", "../approvals?status=pending&x=", "a?b", "a#b",
           "?", "#", "%2e%2e", "%2e%2e%2fapprovals", "..%2F..%2Fapprovals", "%2F", "%00", "..",
           ".", "a/b", "/", "a\x00b", "\x00", "", " ", "a\r\nX-Injected: 1", "x" * 5000,
           SAMPLES["run_id"] + "/..", SAMPLES["run_id"] + "?", " " + SAMPLES["run_id"],
           "Crew", "crew.yaml", "crew\n"]


def str_parameters(signature: inspect.Signature) -> list[str]:
    return [name for name, parameter in signature.parameters.items()
            if parameter.annotation in ("str", "str | None")]


def methods(cls: type) -> list[str]:
    """The public methods of ``cls`` that take a string (an id, a name, a filter, a text)."""
    return [name for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_") and str_parameters(inspect.signature(member))]


ASYNC_METHODS = methods(TorenClient)
SYNC_METHODS = methods(SyncTorenClient)


def arguments(cls: type, method: str) -> dict[str, Any]:
    """Valid arguments for ``method``: every string parameter and every required one."""
    chosen: dict[str, Any] = {}
    for name, parameter in inspect.signature(getattr(cls, method)).parameters.items():
        if name == "self" or (parameter.default is not inspect.Parameter.empty
                              and parameter.annotation not in ("str", "str | None")):
            continue
        assert name in SAMPLES, f"{cls.__name__}.{method}: add a sample value for {name!r}"
        chosen[name] = SAMPLES[name]
    return chosen


class Recorder:
    """A real HTTP server on 127.0.0.1 that records each request (method, path as sent, with
    its query) and answers every one with 200: a JSON body any method can read, or an event
    stream that ends at once."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.url = ""

    def taken(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.requests)

    async def answer(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        with self.lock:
            self.requests.append((request.method, request.raw_path))
        if "text/event-stream" in request.headers.get("Accept", ""):
            return web.Response(text="event: end\ndata: {}\n\n", content_type="text/event-stream")
        return web.json_response({
            "id": SAMPLES["run_id"], "status": "completed", "agents": [], "runs": [],
            "next_cursor": None, "schedules": [], "files": [], "approvals": [],
            "children": [], "forks": [], "events": [], "cursor": "", "questions": [],
            "deliveries": [], "eval": {"status": "finished"}, "evals": [],
            "erased": [], "memories": []})


@pytest.fixture(scope="module")
def recorder() -> Iterator[Recorder]:
    found = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", found.answer)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    found.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def path_of(request: tuple[str, str]) -> str:
    return request[1].partition("?")[0]


def path_parameters(method: str, kwargs: dict[str, Any], sent: list[tuple[str, str]]
                    ) -> set[str]:
    """The parameters whose value the baseline call put in its request's path."""
    assert sent, f"{method} with valid arguments sent no request"
    segments = set(path_of(sent[0]).split("/"))
    return {name for name, value in kwargs.items() if isinstance(value, str)
            and value in segments}


async def call_async(client: TorenClient, method: str, kwargs: dict[str, Any]) -> Any:
    result = getattr(client, method)(**kwargs)
    if inspect.isasyncgen(result):
        return [item async for item in result]
    return await result


def call_sync(client: SyncTorenClient, method: str, kwargs: dict[str, Any]) -> Any:
    result = getattr(client, method)(**kwargs)
    if inspect.isgenerator(result):  # stream_events, stream_live: read to the end
        return list(result)
    return result


def check_outcome(method: str, name: str, value: str, in_path: bool, baseline: str,
                  before: int, outcome: BaseException | None, recorder: Recorder) -> None:
    """What a call with ``value`` in parameter ``name`` must have done."""
    sent = recorder.taken()[before:]
    where = f"{method}({name}={value[:60]!r})"
    if in_path:
        assert isinstance(outcome, InvalidId), f"{where} was not refused: {outcome!r}"
        assert sent == [], f"{where} sent {sent}"
        assert " is not " in outcome.message and len(outcome.message) < 300, outcome.message
        return
    # elsewhere (a query, a header, a body): refused with a typed error before sending, or
    # sent to the method's own route whatever the value
    if outcome is not None:
        assert isinstance(outcome, TorenError), f"{where} raised {outcome!r}"
        assert sent == [], f"{where} sent {sent} and then failed"
        return
    assert sent and all(path_of(request) == baseline for request in sent), (where, sent)


@pytest.mark.parametrize("method", ASYNC_METHODS)
async def test_async_client_refuses_hostile_ids_before_sending(method: str,
                                                               recorder: Recorder) -> None:
    async with TorenClient(recorder.url, "toren_key") as client:
        kwargs = arguments(TorenClient, method)
        before = len(recorder.taken())
        await call_async(client, method, kwargs)
        sent = recorder.taken()[before:]
        in_path = path_parameters(method, kwargs, sent)
        for name in str_parameters(inspect.signature(getattr(TorenClient, method))):
            for value in HOSTILE:
                before = len(recorder.taken())
                outcome: BaseException | None = None
                try:
                    await call_async(client, method, kwargs | {name: value})
                except Exception as exc:  # what was raised is checked below
                    outcome = exc
                check_outcome(method, name, value, name in in_path, path_of(sent[0]), before,
                              outcome, recorder)


@pytest.mark.parametrize("method", SYNC_METHODS)
def test_sync_client_refuses_hostile_ids_before_sending(method: str,
                                                        recorder: Recorder) -> None:
    client = SyncTorenClient(recorder.url, "toren_key")
    kwargs = arguments(SyncTorenClient, method)
    before = len(recorder.taken())
    call_sync(client, method, kwargs)
    sent = recorder.taken()[before:]
    in_path = path_parameters(method, kwargs, sent)
    for name in str_parameters(inspect.signature(getattr(SyncTorenClient, method))):
        for value in HOSTILE:
            before = len(recorder.taken())
            outcome: BaseException | None = None
            try:
                call_sync(client, method, kwargs | {name: value})
            except Exception as exc:  # what was raised is checked below
                outcome = exc
            check_outcome(method, name, value, name in in_path, path_of(sent[0]), before,
                          outcome, recorder)


def test_every_id_parameter_is_checked() -> None:
    """The enumeration above found the methods that put ids in paths (so a rename cannot
    quietly leave one out), and both clients have them."""
    for method, parameter in [("get_run", "run_id"), ("cancel_run", "run_id"),
                              ("approve", "approval_id"), ("deny", "approval_id"),
                              ("get_session", "session_id"), ("delete_file", "file_id"),
                              ("diff_runs", "run_b"), ("pause_schedule", "name"),
                              ("agent_versions", "agent"), ("answer_question", "question_id")]:
        for cls, found in ((TorenClient, ASYNC_METHODS), (SyncTorenClient, SYNC_METHODS)):
            assert method in found, (cls, method)
            assert parameter in str_parameters(inspect.signature(getattr(cls, method)))
    assert {"stream_events", "stream_live", "wait_for_run", "restore_run"} <= set(ASYNC_METHODS)
    assert SYNC_METHODS == ASYNC_METHODS  # the sync client is derived from the async one


async def test_well_formed_ids_are_sent_in_their_canonical_form(recorder: Recorder) -> None:
    upper = SAMPLES["approval_id"].upper()
    async with TorenClient(recorder.url) as client:
        before = len(recorder.taken())
        await client.approve(upper)
        await client.get_run(uuid.UUID(SAMPLES["run_id"]))  # type: ignore[arg-type]
        await client.get_schedule("crew_2", "nightly-backup")
    assert [path_of(r) for r in recorder.taken()[before:]] == [
        f"/approvals/{SAMPLES['approval_id']}/approve", f"/runs/{SAMPLES['run_id']}",
        "/schedules/crew_2/nightly-backup"]


def test_the_client_takes_the_names_the_server_takes() -> None:
    """Agent and schedule names: the client's rule is agent.yaml's and the server's."""
    names = ["a", "crew", "crew-2", "a_b", "a" * 57, "a" * 58, "a" * 64, "a" * 65, "Crew",
             "2crew", "-a", "a.b", "a b", "a/b", "", "ü", "a\x00"]
    for name in names:
        for parameter, rule in (("agent", NAME_PATTERN), ("schedule", SCHEDULE_NAME)):
            try:
                check_id(parameter, name)
                taken = True
            except InvalidId:
                taken = False
            assert taken == bool(rule.match(name)), (parameter, name)


# -- the reproduction, and the server's own routes ---------------------------------------------


def raw_request(url: str, method: str, path: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """``path`` sent as it is (no client normalises or escapes it); status and body."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(method.encode() + b" " + path + b" HTTP/1.1\r\nHost: " + f"{host}:{port}"
                     .encode() + b"\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), rest


#: Each route of the API with an id or a name in its path, and a body it would take.
ROUTES = [("GET", "/runs/{}", b""), ("GET", "/runs/{}/events", b""),
          ("GET", "/runs/{}/children", b""), ("GET", "/runs/{}/receipt", b""),
          ("POST", "/runs/{}/cancel", b"{}"), ("POST", "/runs/{}/upgrade", b"{}"),
          ("POST", "/runs/{}/fork", b'{"at_step": 1}'), ("POST", "/runs/{}/restore", b"{}"),
          ("GET", "/runs/{}/diff/{}", b""), ("GET", "/sessions/{}", b""),
          ("POST", "/sessions/{}/messages", b'{"text": "hi"}'),
          ("POST", "/sessions/{}/messages", b'{"close": true}'),
          ("GET", "/files/{}", b""), ("DELETE", "/files/{}", b""),
          ("GET", "/approvals/{}", b""), ("POST", "/approvals/{}/approve", b"{}"),
          ("POST", "/approvals/{}/deny", b"{}"), ("GET", "/agents/{}", b""),
          ("GET", "/agents/{}/versions", b""), ("GET", "/schedules/{}/nightly", b""),
          ("GET", "/schedules/approval-desk/{}", b""),
          ("POST", "/schedules/approval-desk/{}/trigger", b"{}")]


def test_traversal_ids_decide_nothing(database_url: str, start_toren: Any,
                                      tmp_path: Path) -> None:
    """Issue 35's reproduction: through the client, a run id that walks into the approvals
    routes is refused and the refund stays pending; sent raw, every route with an id in its
    path answers a JSON 4xx for it and never another route's answer."""
    crews = tmp_path / "crews"
    shutil.copytree(APPROVAL_DESK, crews / "approval-desk")
    ledger = tmp_path / "refunds.log"
    dev = start_toren("dev", "--dir", str(crews), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, "REFUNDS_LEDGER": str(ledger)})
    url = dev.next_json()["url"]
    client = SyncTorenClient(url)
    run_id = client.create_run("approval-desk", "A7")["id"]
    assert wait_until(lambda: client.get_run(run_id)["status"] == "awaiting_approval", 60)
    [pending] = client.get_run(run_id)["pending_approvals"]
    approval = pending["id"]

    with pytest.raises(InvalidId) as cancelled:
        client.cancel_run(f"../approvals/{approval}/approve?x=")
    assert cancelled.value.message.startswith(
        f"run id '../approvals/{approval}/approve?x=' is not a run id: run ids are UUIDs")
    with pytest.raises(InvalidId):
        client.get_run("../approvals?status=pending&x=")
    with pytest.raises(InvalidId):
        client.deny(f"{approval}/../../runs/{run_id}/cancel")

    hostile = [b"..%2Fapprovals%2F" + approval.encode() + b"%2Fapprove%3Fx=",
               b"..%2fapprovals%3Fstatus=pending%26x=", b"%2e%2e", b"%2E%2E%2Fapprovals",
               b"..", b".", b"%2F", b"a%3Fb", b"a%23b", b"a%00b", b"%00", b"%252e%252e",
               b"x%2F..%2F..%2Fapprovals%2F" + approval.encode() + b"%2Fapprove"]
    for method, route, body in ROUTES:
        for value in hostile:
            path = route.encode().replace(b"{}", value)
            status, answer = raw_request(url, method, path, body)
            assert 400 <= status < 500, (method, path, status, answer)
            error = json.loads(answer)["error"]
            assert error["code"] and error["message"], (method, path, answer)
            assert "approvals" not in json.loads(answer), (method, path)
        # a NUL byte itself is refused by the HTTP parser, before any route
        status, _ = raw_request(url, method, route.encode().replace(b"{}", b"a\x00b"), body)
        assert status == 400, (method, route)

    assert client.get_approval(approval)["status"] == "pending"
    assert not ledger.exists() or ledger.read_text() == ""
    assert call(f"{url}/healthz")[0] == 200
    # the same approval, given as the client documents it, is decided once
    assert client.approve(approval.upper(), "checked")["status"] == "approved"
