"""Live model text: the pieces of a model's text reach watchers while the call is running, in
this process and (through Postgres NOTIFY) in another one, over the SSE event stream and the
client; they are never written to the log."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
from aiohttp.test_utils import TestServer
from toren_postgres.live_text import CHANNEL as TEXT_CHANNEL
from toren_postgres.store import PostgresStore

from toren.client import TorenClient
from toren.config import Settings
from toren.core import events as ev
from toren.core.catalog import EVENT_TYPES
from toren.core.events import Event, NewEvent
from toren.default_plugins.scripted import ScriptedModel, text_pieces
from toren.host.live import LiveTextHub
from toren.seams.model import ModelResponse
from toren.seams.shapes import TEXT_DELTA_MAX_CHARS, LeaseBusy, TextDelta
from toren.server.app import create_app
from toren.testing import write_agent_dir
from toren.testing.contracts.support import eventually

ANSWER = "Postgres keeps the log; every piece of this answer streams before it is recorded."


def slow_model(delay: float = 0.8) -> ScriptedModel:
    return ScriptedModel(script=[ModelResponse(text=ANSWER)], delay=delay)


def test_the_offline_model_streams_its_text_in_word_pieces() -> None:
    assert text_pieces("one two  three\n") == ["one ", "two  ", "three\n"]
    assert "".join(text_pieces(ANSWER)) == ANSWER
    assert text_pieces("") == []


async def test_a_runs_text_reaches_a_watcher_in_pieces_before_its_completed_call(
        make_runtime, tmp_path: Path) -> None:
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "talker", model="test/slow")],
                                 models={"slow": slow_model()})
    run_id = await runtime.start_run("talker", "hello")
    seen: list[Event | TextDelta] = [item async for item in runtime.follow_live(run_id)]

    pieces = [item for item in seen if isinstance(item, TextDelta)]
    completed = [item for item in seen if isinstance(item, Event)
                 and item.type == ev.MODEL_CALL_COMPLETED]
    assert len(completed) == 1 and completed[0].data["text"] == ANSWER
    assert len(pieces) == len(text_pieces(ANSWER)) > 5
    assert "".join(piece.text for piece in pieces) == ANSWER
    assert [piece.index for piece in pieces] == list(range(len(pieces)))
    assert {(piece.task_id, piece.step) for piece in pieces} == {("main", 1)}
    assert seen.index(pieces[-1]) < seen.index(completed[0])
    # the log holds the completed call only: no event carries a piece
    log = await runtime.events(run_id)
    assert {event.type for event in log} <= set(EVENT_TYPES)
    assert not any(event.type == ev.MODEL_CALL_COMPLETED and event.data["text"] != ANSWER
                   for event in log)


async def listeners_connected(database_url: str, count: int) -> None:
    """Wait until ``count`` live text listeners of this database have run their LISTEN (the
    last statement ``pg_stat_activity`` shows for their dedicated connections)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        async def listening() -> bool:
            cursor = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query = %s", (f"LISTEN {TEXT_CHANNEL}",))
            row = await cursor.fetchone()
            return row is not None and row[0] >= count

        await eventually(listening, f"{count} live text listener(s) connected")


async def open_store(database_url: str, tmp_path: Path) -> PostgresStore:
    store = PostgresStore(Settings(database_url=database_url, home=tmp_path / "home",
                                   load_plugins=()))
    await store.open()
    return store


async def test_text_crosses_processes_through_notify_for_watched_runs_only(
        database_url: str, tmp_path: Path, make_runtime) -> None:
    await make_runtime(dirs=[write_agent_dir(tmp_path, "talker")])  # migrates the database
    worker_store = await open_store(database_url, tmp_path)
    server_store = await open_store(database_url, tmp_path)
    worker, server = LiveTextHub(worker_store), LiveTextHub(server_store)
    watched, unwatched = str(uuid.uuid4()), str(uuid.uuid4())
    try:
        with server.watch(watched) as heard, server.watch(unwatched) as not_heard, \
                worker.watch(watched) as own:
            await server_store.wait_for_appends({watched}, 0.1)  # an open SSE stream's watch
            await listeners_connected(database_url, 2)  # the server's and the worker's
            # the longest piece, every character escaped in JSON: still within NOTIFY's limit
            # and what a Postgres array literal must escape or quote (publish_texts sends one)
            texts = ["one ", "two ", "\x01" * TEXT_DELTA_MAX_CHARS, 'a "b", {c} \\ NULL ',
                     "é🙂 end"]
            for index, text in enumerate(texts):
                worker.publish(TextDelta(watched, "main", 0, index, text))
                worker.publish(TextDelta(unwatched, "main", 0, index, text))
            got = [await asyncio.wait_for(heard.get(), 10) for _ in texts]
            assert [piece.text for piece in got] == texts
            await asyncio.sleep(0.5)
            assert not_heard.empty()
            # the worker's own watcher had each piece once, in-process (its NOTIFY is skipped)
            assert [own.get_nowait().text for _ in texts] == texts and own.empty()
    finally:
        await worker.close()
        await server.close()
        await worker_store.close()
        await server_store.close()


async def sse_frames(url: str, run_id: str) -> list[dict[str, str]]:
    frames: list[dict[str, str]] = []
    async with aiohttp.ClientSession() as http, http.get(
            f"{url}/runs/{run_id}/events", headers={"Accept": "text/event-stream"}) as response:
        assert response.status == 200
        frame: dict[str, str] = {}
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if not line:
                if frame:
                    frames.append(frame)
                    if frame.get("event") == "end":
                        return frames
                frame = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                frame[name] = value
    return frames


async def test_the_sse_stream_carries_text_from_a_worker_in_another_runtime(
        make_runtime, tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "talker", model="test/slow")
    await make_runtime(dirs=[directory], models={"slow": slow_model(1.5)})  # the worker
    api = await make_runtime(dirs=[directory], models={"slow": slow_model()}, workers=False)
    async with TestServer(create_app(api, require_keys=False)) as server:
        url = str(server.make_url("")).rstrip("/")
        run_id = await api.start_run("talker", "hello")
        frames = await sse_frames(url, run_id)
        async with TorenClient(url) as client:
            replayed: list[Any] = [item async for item in client.stream_live(run_id)]

    kinds = [frame["event"] for frame in frames]
    deltas = [json.loads(f["data"]) for f in frames if f["event"] == "text_delta"]
    assert deltas, kinds
    assert all("id" not in f for f in frames if f["event"] == "text_delta")
    assert "".join(d["text"] for d in deltas) == ANSWER
    assert kinds.index("text_delta") < kinds.index(ev.MODEL_CALL_COMPLETED)
    assert max(i for i, k in enumerate(kinds) if k == "text_delta") < kinds.index(
        ev.MODEL_CALL_COMPLETED)
    # pieces are never replayed: a stream opened after the run ended has only events
    assert replayed and all("cursor" in item for item in replayed)


async def test_one_statement_publishes_the_text_of_many_runs_watched_ones_only(
        database_url: str, tmp_path: Path, make_runtime) -> None:
    """A worker with many runs in model calls sends all their pending pieces in one statement:
    the watched runs' pieces arrive, each run's in order; the others' are not sent, and the
    hub pauses sending for them."""
    await make_runtime(dirs=[write_agent_dir(tmp_path, "talker")])  # migrates the database
    worker_store = await open_store(database_url, tmp_path)
    server_store = await open_store(database_url, tmp_path)
    server = LiveTextHub(server_store)
    watched = [str(uuid.uuid4()) for _ in range(3)]
    unwatched = [str(uuid.uuid4()) for _ in range(50)]
    try:
        queues = [server.watch(run_id) for run_id in watched]
        heard = [q.__enter__() for q in queues]
        await server_store.wait_for_appends(set(watched), 0.1)
        await listeners_connected(database_url, 1)
        payloads = {run_id: [json.dumps({"origin": "w", "run_id": run_id, "task_id": "main",
                                         "step": 1, "index": i, "text": f"{run_id[:4]}-{i}"})
                             for i in range(5)]
                    for run_id in [*unwatched[:25], *watched, *unwatched[25:]]}
        assert await worker_store.publish_texts(payloads) == set(watched)
        for run_id, queue in zip(watched, heard, strict=True):
            got = [await asyncio.wait_for(queue.get(), 10) for _ in range(5)]
            assert [piece.text for piece in got] == [f"{run_id[:4]}-{i}" for i in range(5)]
        assert await worker_store.publish_texts({}) == set()
        assert not await worker_store.publish_text(unwatched[0], ["x"])

        # the hub: one send for every run with pieces; the unwatched ones are paused
        hub = LiveTextHub(worker_store)
        for run_id in [*watched, *unwatched]:
            hub.publish(TextDelta(run_id, "main", 2, 0, "hello "))
        await asyncio.sleep(0.5)
        for queue in heard:
            assert (await asyncio.wait_for(queue.get(), 10)).text == "hello "
        assert set(unwatched) <= set(hub._unwatched_until)
        await hub.close()
        for q in queues:
            q.__exit__(None, None, None)
    finally:
        await server.close()
        await worker_store.close()
        await server_store.close()


async def test_an_append_tells_whether_its_run_is_watched_and_the_hub_sends_accordingly(
        make_runtime, tmp_path: Path) -> None:
    """A leased append finds out whether anyone watches its run (it must, to wake the run's
    streams) and tells the host: the hub then sends no text of an unwatched run for a moment,
    without a statement of its own, and sends a watched run's text at once."""
    runtime = await make_runtime(dirs=[write_agent_dir(tmp_path, "talker")], workers=False)
    store = runtime.store
    told: list[tuple[str, bool]] = []
    store.on_run_watched(lambda run, watched: told.append((run, watched)))
    run_id = await runtime.start_run("talker", "go")
    found = await store.acquire_and_load("talker", run_id, "task:side", "me", 30)
    assert not isinstance(found, LeaseBusy)
    lease, _events = found
    await store.append("talker", lease, 1, [NewEvent("TestNote", {"n": 1})], ttl_s=30)
    await store.wait_for_appends({run_id}, 0.1)  # an SSE stream opens on the run
    await store.append("talker", lease, 2, [NewEvent("TestNote", {"n": 2})], ttl_s=30)
    assert told == [(run_id, False), (run_id, True)]

    hub, sent = LiveTextHub(store), []
    publish_texts = store.publish_texts

    async def counted(payloads: Any) -> set[str]:
        sent.append(set(payloads))
        return await publish_texts(payloads)

    store.publish_texts = counted  # type: ignore[method-assign]
    hub.seen_watched(run_id, False)
    hub.publish(TextDelta(run_id, "side", 0, 0, "unseen "))
    await asyncio.sleep(0.1)
    assert sent == []  # paused: no statement
    hub.seen_watched(run_id, True)
    hub.publish(TextDelta(run_id, "side", 0, 1, "seen "))
    await asyncio.sleep(0.1)
    assert sent == [{run_id}]
    await hub.close()
