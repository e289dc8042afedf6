"""Database faults: a connection that breaks with a commit in flight, and a Postgres server
restarted with an immediate shutdown (as a crash) in the middle of runs."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.chaos.proxy import FaultProxy
from tests.conftest import wait_until
from tests.durable import check_log
from tests.e2e.test_http_api import TOOLS as LOOKUP_TOOLS
from tests.e2e.test_http_api import call
from tests.integration.test_leases import started
from toren.client import TorenClient
from toren.core.events import Event, NewEvent
from toren.core.runs import RunRecord
from toren.host.runtime import Runtime
from toren.host.worker import Worker
from toren.seams.model import ModelRequest, ModelResponse
from toren.testing import ScriptedModel, respond_with_tools, write_agent_dir

pytestmark = pytest.mark.timeout(180)
TOOLS = '''
from toren import current_tool_call, tool

@tool(idempotent=True)
def lookup(topic: str) -> str:
    """Look a topic up."""
    import os
    with open(os.environ["EFFECTS_LOG"], "a") as handle:
        handle.write(current_tool_call().idempotency_key + "\\n")
    return f"facts about {topic}"

@tool(idempotent=True)
def count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())
'''


class CallRecorder:
    """The offline model's behaviour, recording each call: the run's input (the first user
    message), the step (from the number of messages) and when the call started."""

    def __init__(self, delay: float) -> None:
        self.calls: list[tuple[str, int, float]] = []
        self.model = ScriptedModel(script=self.respond, delay=delay)

    def respond(self, request: ModelRequest) -> ModelResponse:
        # delay has passed when this runs: subtract it to get the call's start
        step = (len(request.messages) + 1) // 2
        self.calls.append((request.messages[0].text, step, time.time() - self.model.delay))
        return respond_with_tools(request)

    def check(self, records: list[RunRecord], events_by_run: dict[str, list[Event]]) -> int:
        """No call was made for a step whose answer was already recorded (a call repaid
        for an answer the log had); returns how many calls were made again at all."""
        completed_at = {}
        for record in records:
            for event in events_by_run[record.id]:
                if event.type == "ModelCallCompleted":
                    assert event.created_at is not None
                    completed_at[(record.input, event.data["step"])] = (
                        event.created_at.timestamp())
        for text, step, started_at in self.calls:
            # 50 ms: the event's timestamp is its transaction's start, a moment before commit
            assert started_at < completed_at[(text, step)] + 0.05, (
                f"step {step} of {text!r} was called again after its answer was recorded")
        return len(self.calls) - len(completed_at)


async def effects_runtime(make_runtime, tmp_path: Path, monkeypatch, url: str, *,
                          delay: float, **settings: object) -> tuple[Runtime, CallRecorder, Path]:
    """A runtime on ``url`` serving agent ``a`` (a recorded model with ``delay``, tools that
    log their idempotency keys to the returned file)."""
    effects = tmp_path / "effects.log"
    monkeypatch.setenv("EFFECTS_LOG", str(effects))
    recorder = CallRecorder(delay=delay)
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a", tools_py=TOOLS,
                                                       model="test/m")],
                                 models={"m": recorder.model}, database_url=url, **settings)
    return runtime, recorder, effects


@pytest.fixture
async def proxy(database_url: str) -> AsyncIterator[FaultProxy]:
    fault_proxy = FaultProxy(database_url)
    await fault_proxy.start()
    yield fault_proxy
    await fault_proxy.stop()


async def test_a_commit_whose_answer_was_lost_is_recognised_not_doubled(
        proxy: FaultProxy, make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False,
                                 database_url=proxy.url)
    store = runtime.store
    run_id = await runtime.start_run("a", "x")
    lease = await store.acquire_lease(run_id, "task:main", "worker-1", 30)
    assert lease is not None
    # the server commits the append, the connection drops before the worker hears back
    # (only the append statement has an "appended" step: the queue's listener may be talking)
    proxy.arm("after_commit", match=b"appended AS")
    await store.append("a", lease, 1, [started(lease.epoch)], ttl_s=30)
    assert proxy.broken == 1
    # the append was not sent at all: it is made again, once
    proxy.arm("before_send", match=b"appended AS")
    await store.append("a", lease, 2, [NewEvent("ModelCallStarted", {
        "step": 1, "epoch": lease.epoch})], ttl_s=30)
    assert proxy.broken == 2
    events = await store.load_stream("a", run_id, "task:main")
    assert [(e.seq, e.type) for e in events] == [(1, "TaskStarted"), (2, "ModelCallStarted")]
    # the worker goes on at the next number, as if nothing had happened
    await store.append("a", lease, 3, [NewEvent("RetryScheduled", {
        "step": 1, "attempt": 1, "error": {"code": "x", "message": "x"}, "delay_s": 0.0,
        "next_attempt_at": "2026-01-01T00:00:00+00:00", "epoch": lease.epoch})], ttl_s=30)
    assert len(await store.load_stream("a", run_id, "task:main")) == 3


@pytest.mark.parametrize("mode", ["after_commit", "before_send"])
async def test_a_grouped_commit_whose_answer_was_lost_is_recognised_by_each_append(
        proxy: FaultProxy, make_runtime, tmp_path: Path, mode: str) -> None:
    """Group commit: the connection breaks with a batch of appends in flight, after its
    commit or before it was sent; each append finds out from the log, none is doubled or
    lost."""
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], workers=False,
                                 database_url=proxy.url)
    store = runtime.store
    leases = []
    for _ in range(6):
        run_id = await runtime.start_run("a", "x")
        lease = await store.acquire_lease(run_id, "task:main", "worker-1", 30)
        assert lease is not None
        leases.append(lease)
    # the 6 appends of one turn of the event loop go out as one batch: one statement, the
    # first message that calls append_one (each append alone would send its own statement)
    proxy.arm(mode, match=b"append_one\"(")
    await asyncio.gather(*(store.append("a", lease, 1, [started(lease.epoch)], ttl_s=30)
                           for lease in leases))
    assert proxy.broken == 1
    for lease in leases:
        events = await store.load_stream("a", lease.run_id, "task:main")
        assert [(e.seq, e.type) for e in events] == [(1, "TaskStarted")]
        await store.append("a", lease, 2, [NewEvent("ModelCallStarted", {
            "step": 1, "epoch": lease.epoch})], ttl_s=30)


async def test_a_claim_whose_answer_was_lost_hands_its_messages_back_uncounted(
        proxy: FaultProxy, make_runtime, tmp_path: Path, database_url: str) -> None:
    # no workers: this test claims by hand, as a worker's poll loop does
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "a")], database_url=proxy.url,
                                 workers=False)
    worker = Worker(runtime)
    run_id = await runtime.start_run("a", "x")
    # only the claim calls claim_messages (the queue's listener may be talking too)
    proxy.arm("after_commit", match=b"toren_control.claim_messages")
    with pytest.raises(psycopg.OperationalError):
        await runtime.queue.claim(["a"], worker.id, 5, 30, 5)  # type: ignore[union-attr]
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        row = await (await conn.execute(
            "SELECT attempts, claimed_by FROM toren_control.queue WHERE run_id = %s",
            [run_id])).fetchone()
        assert row == (1, worker.id)  # claimed, hidden for 30 s, counted: nobody knows
        worker._claims_unknown = True  # what the poll loop records when a claim fails
        assert await worker._claim(0) == 0
        row = await (await conn.execute(
            "SELECT attempts, claimed_by FROM toren_control.queue WHERE run_id = %s",
            [run_id])).fetchone()
        assert row == (0, None)  # back at once, the unseen delivery not counted


async def test_runs_finish_exactly_once_through_connections_broken_at_commit(
        proxy: FaultProxy, make_runtime, tmp_path: Path, monkeypatch,
        database_url: str) -> None:
    # every statement may be broken here, the handlers' reads too, and a handler that fails
    # on a broken connection is a failed delivery: keep dead-lettering out of this test
    runtime, recorder, effects = await effects_runtime(make_runtime, tmp_path, monkeypatch,
                                                       proxy.url, delay=0.2, max_deliveries=100)
    model = recorder.model
    runs = [await runtime.start_run("a", f"topic {i}") for i in range(8)]

    async def break_commits() -> None:
        while True:
            proxy.arm("after_commit" if proxy.broken % 2 == 0 else "before_send")
            await asyncio.sleep(0.1)

    breaker = asyncio.create_task(break_commits())
    try:
        # watched over a direct connection: any statement through the proxy may be broken
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            for _ in range(900):
                cursor = await conn.execute("SELECT count(*) FROM agent_a.runs "
                                            "WHERE status = 'completed'")
                if (await cursor.fetchone())[0] == len(runs):  # type: ignore[index]
                    break
                await asyncio.sleep(0.1)
    finally:
        breaker.cancel()
        proxy.armed = None
    records = [await runtime.get_run(run_id) for run_id in runs]
    assert proxy.broken >= 5
    assert {r.status for r in records} == {"completed"}
    completed = 0
    events_by_run = {}
    for record in records:
        assert f"facts about {record.input}" in record.output
        events = events_by_run[record.id] = await runtime.events(record.id)
        check_log(events)
        steps = [e.data["step"] for e in events if e.type == "ModelCallCompleted"]
        assert steps == [1, 2, 3]  # no step recorded twice
        completed += len(steps)
    # a call is repaid only when the append recording its answer was lost for good (the
    # handler gave up and the task was redelivered): never more than the connections broken
    assert completed <= model.calls <= completed + proxy.broken
    repaid = recorder.check(records, events_by_run)
    print(f"broken connections {proxy.broken}, model calls {model.calls} for {completed} "
          f"completed ({repaid} made again)")
    keys = effects.read_text().splitlines()
    assert len(set(keys)) == len(runs) and len(keys) - len(set(keys)) <= proxy.broken


# -- a Postgres server restarted as if it had crashed --------------------------------------


@pytest.fixture(scope="module")
def restartable_server() -> Iterator[tuple[str, Path]]:
    """A private Postgres cluster this test may stop and start: (URL, pgdata)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    # not under pytest's tmp_path, whose private permissions the server's user cannot cross
    base = Path(tempfile.mkdtemp(prefix="toren-restartable-"))
    pgdata = base / "pgdata"
    server = pgserver.get_server(pgdata, cleanup_mode="delete")
    url = server.get_uri()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE toren_faults")
    try:
        yield server.get_uri("toren_faults"), pgdata
    finally:
        server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


def pg_ctl(pgdata: Path, *args: str) -> None:
    """pg_ctl from the embedded Postgres, as the user pgserver runs the server as."""
    from pgserver._commands import pg_ctl as run_pg_ctl

    user = "pgserver" if os.geteuid() == 0 else None  # Postgres refuses to run as root
    run_pg_ctl(list(args), pgdata=pgdata, user=user, timeout=60)


@pytest.mark.slow
async def test_runs_survive_postgres_restarted_mid_run(
        make_runtime, restartable_server: tuple[str, Path], tmp_path: Path,
        monkeypatch) -> None:
    url, pgdata = restartable_server
    runtime, recorder, effects = await effects_runtime(make_runtime, tmp_path, monkeypatch,
                                                       url, delay=0.3)
    model = recorder.model
    runs = [await runtime.start_run("a", f"topic {i}") for i in range(8)]
    for _ in range(600):  # mid-run: a model call in flight (0.3 s each), its lease held
        if model.calls >= 1:
            break
        await asyncio.sleep(0.05)
    assert model.calls >= 1, "no model call started within 30 s"
    # immediate shutdown: no checkpoint, every connection cut, as a crash; then down a while
    await restart_postgres(pgdata, down_s=2.0)
    back = time.monotonic()
    records = [await runtime.wait_for_run(run_id, timeout_s=120) for run_id in runs]
    print(f"all {len(runs)} runs completed {time.monotonic() - back:.1f}s after the restart")
    assert {r.status for r in records} == {"completed"}
    completed = 0
    events_by_run = {}
    for record in records:
        events = events_by_run[record.id] = await runtime.events(record.id)
        check_log(events)
        steps = [e.data["step"] for e in events if e.type == "ModelCallCompleted"]
        assert steps == [1, 2, 3]
        completed += len(steps)
        # every lease was held by one holder at a time: epochs only grow along the stream
        epochs = [e.data["epoch"] for e in sorted(events, key=lambda e: e.seq)
                  if e.stream == "task:main" and "epoch" in e.data]
        assert epochs == sorted(epochs)
    # Calls in flight when the database went are made again (their answers could not be
    # recorded), and so are calls of tasks whose leases expired during the outage while their
    # workers waited; never a call whose answer the log had.
    repaid = recorder.check(records, events_by_run)
    print(f"model calls {model.calls} for {completed} completed ({repaid} made again)")
    keys = effects.read_text().splitlines()
    assert len(set(keys)) == len(runs) and len(keys) - len(set(keys)) <= len(runs)


@pytest.mark.slow
async def test_a_live_event_stream_waits_out_a_postgres_restart(
        restartable_server: tuple[str, Path], start_toren, tmp_path: Path) -> None:
    url, pgdata = restartable_server
    crews = tmp_path / "crews"
    write_agent_dir(crews, "live", tools_py=LOOKUP_TOOLS)
    dev = start_toren("dev", "--dir", str(crews), "--port", "0", "--json",
                      env={"DATABASE_URL": url, "TOREN_SCRIPTED_DELAY": "0.5",
                           "TOREN_LEASE_TTL": "2"})
    api = dev.next_json()["url"]
    async with TorenClient(api) as client:
        run_id = (await client.create_run("live", "postgres"))["id"]
        seen: list[tuple[str, int]] = []
        restart: asyncio.Task[None] | None = None
        async for event in client.stream_events(run_id, reconnects=10):
            seen.append((event["stream"], event["seq"]))
            if len(seen) == 3:  # mid-run, the stream open: Postgres goes down and comes back
                restart = asyncio.create_task(restart_postgres(pgdata, down_s=2.0))
        assert restart is not None and restart.done()
        logged = await client.events(run_id)
    assert logged["status"] == "completed"
    assert seen == [(e["stream"], e["seq"]) for e in logged["events"]]  # each once, in order


async def restart_postgres(pgdata: Path, *, down_s: float) -> None:
    """Stop Postgres as a crash would (immediate shutdown), wait, start it again."""
    await asyncio.to_thread(pg_ctl, pgdata, "-w", "-m", "immediate", "stop")
    await asyncio.sleep(down_s)
    await asyncio.to_thread(pg_ctl, pgdata, "-w", "restart")  # reuses postmaster.opts


@pytest.mark.slow
async def test_a_database_outage_is_a_quick_503_and_health_returns_with_postgres(
        restartable_server: tuple[str, Path], start_toren, tmp_path: Path) -> None:
    url, pgdata = restartable_server
    crews = tmp_path / "crews"
    write_agent_dir(crews, "outage")
    server = start_toren("serve", "--dir", str(crews), "--port", "0", "--json",
                         env={"DATABASE_URL": url, "TOREN_ALLOW_NO_KEYS": "1",
                              "TOREN_POOL_TIMEOUT": "2"})
    api = server.next_json()["url"]
    run_id = (await asyncio.to_thread(call, f"{api}/runs", "POST",
                                      {"agent": "outage", "input": "x"}))[1]["id"]
    await asyncio.to_thread(pg_ctl, pgdata, "-w", "-m", "immediate", "stop")
    try:
        # Each answer is a 503 to retry, well within the client's timeout (a pool timeout
        # used to be a 500 after 30 s): pooled connections that died, then none to be had.
        for method, path, body in [("GET", f"/runs/{run_id}", None), ("GET", "/runs", None),
                                   ("POST", "/runs", {"agent": "outage", "input": "y"}),
                                   ("POST", f"/runs/{run_id}/cancel", None),
                                   ("GET", f"/runs/{run_id}/events", None)] * 2:
            started = time.monotonic()
            status, answer, headers = await asyncio.to_thread(
                call, f"{api}{path}", method, body, timeout_s=15)
            print(f"{method} {path}: {status} after {time.monotonic() - started:.2f}s")
            assert (status, answer["error"]["code"]) == (503, "database_unavailable"), answer
            assert headers["Retry-After"] == "2"
            assert "retry" in answer["error"]["message"]
        status, health, headers = await asyncio.to_thread(call, f"{api}/healthz")
        assert (status, health["status"], headers["Retry-After"]) == (503, "degraded", "2")
        # the server's log says why, once every 30 s rather than at each of the ten answers
        said = server.stderr.count("answering 503 database_unavailable: the database is "
                                   "unavailable")
        assert 1 <= said < 10, server.stderr[-2000:]
    finally:
        # restart, not start: it reuses postmaster.opts (the private port)
        await asyncio.to_thread(pg_ctl, pgdata, "-w", "restart")
    back = time.monotonic()
    # healthy again as soon as Postgres is (the pool's backoff used to keep it 503 for 24 s)
    assert await asyncio.to_thread(
        wait_until, lambda: call(f"{api}/healthz")[0] == 200, 20, 0.2)
    print(f"/healthz was 200 {time.monotonic() - back:.2f}s after Postgres accepted connections")
    status, _, _ = await asyncio.to_thread(call, f"{api}/runs", "POST",
                                           {"agent": "outage", "input": "z"})
    assert status == 201
    assert "Traceback" not in server.stderr and "internal_error" not in server.stderr


@pytest.mark.slow
async def test_healthz_answers_503_within_the_pool_timeout_with_a_key_in_an_outage(
        restartable_server: tuple[str, Path], start_toren, toren_cli, tmp_path: Path) -> None:
    """A load balancer's probe gets its 503 within TOREN_POOL_TIMEOUT, a key or none: the
    optional key check and the health query share that time (they used to add up: 7 s)."""
    url, pgdata = restartable_server
    crews = tmp_path / "crews"
    write_agent_dir(crews, "probed")
    created = toren_cli("keys", "create", "probe", "--json", env={"DATABASE_URL": url})
    assert created.returncode == 0, created.stderr
    token = json.loads(created.stdout)["key"]
    pool_timeout_s = 3.0
    server = start_toren("serve", "--dir", str(crews), "--port", "0", "--json",
                         env={"DATABASE_URL": url, "TOREN_POOL_TIMEOUT": str(pool_timeout_s)})
    api = server.next_json()["url"]
    bearer = {"Authorization": f"Bearer {token}"}
    status, health, _ = await asyncio.to_thread(call, f"{api}/healthz", headers=bearer)
    assert (status, health["database"]["reachable"]) == (200, True)
    await asyncio.to_thread(pg_ctl, pgdata, "-w", "-m", "immediate", "stop")
    try:
        # the key's cache entry (5 s) must not answer for it: a fresh key check each time
        await asyncio.sleep(5.5)
        for headers in (bearer, {"Authorization": "Bearer not-a-key"}, {}) * 2:
            started = time.monotonic()
            status, health, answer_headers = await asyncio.to_thread(
                call, f"{api}/healthz", headers=headers, timeout_s=30)
            took = time.monotonic() - started
            print(f"/healthz {sorted(headers)}: {status} after {took:.2f}s")
            assert (status, health["status"], answer_headers["Retry-After"]) == (
                503, "degraded", "2")
            assert "database" not in health  # no key was verified: no details
            # the pool timeout plus a margin for a loaded machine; the two waits added up to
            # 5 s here before (3 s key check + 2 s health query)
            assert took < pool_timeout_s + 1.5, took
    finally:
        await asyncio.to_thread(pg_ctl, pgdata, "-w", "restart")
    assert await asyncio.to_thread(
        wait_until, lambda: call(f"{api}/healthz", headers=bearer)[0] == 200, 20, 0.2)
    assert "Traceback" not in server.stderr
