"""Many live streams of one run in one server process: each gets every event once, in log
order, with a cursor that resumes after it; the server reads the run once per notice, not once
per stream."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
from aiohttp import web
from aiohttp.test_utils import TestServer

from toren.default_plugins.scripted import ScriptedModel
from toren.server.app import create_app
from toren.server.cursors import decode_event_cursor
from toren.server.streams import STREAMS
from toren.testing import write_agent_dir
from toren.testing.contracts.support import eventually

SUBSCRIBERS = 20
TOOLS = "\n".join(f'def noop_{i}(text: str) -> str:\n    """Does nothing."""\n    return "ok"\n'
                  for i in range(3))


async def api_without_workers(make_runtime, tmp_path: Path, delay: float
                              ) -> tuple[Path, dict[str, ScriptedModel], Any, web.Application]:
    """An agent of 3 tool steps whose model takes ``delay`` s, and an API over it with no
    worker (the test starts one when its streams are open)."""
    directory = write_agent_dir(tmp_path, "fan", model="test/tools", tools_py=TOOLS)
    models = {"tools": ScriptedModel(delay=delay)}
    api = await make_runtime(dirs=[directory], models=models, workers=False)
    return directory, models, api, create_app(api, require_keys=False)


async def follow(url: str, run_id: str, attached: asyncio.Queue[int]) -> list[dict[str, str]]:
    """The frames of one SSE stream until its ``end``; puts 1 in ``attached`` at its first."""
    frames: list[dict[str, str]] = []
    async with aiohttp.ClientSession() as http, http.get(
            f"{url}/runs/{run_id}/events", headers={"Accept": "text/event-stream"}) as response:
        assert response.status == 200
        frame: dict[str, str] = {}
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if line:
                if not line.startswith(":"):
                    name, _, value = line.partition(": ")
                    frame[name] = value
                continue
            if frame:
                frames.append(frame)
                if len(frames) == 1:
                    attached.put_nowait(1)
                if frame.get("event") == "end":
                    return frames
            frame = {}
    return frames


async def test_many_streams_of_a_run_each_get_every_event_once_from_one_read_per_notice(
        make_runtime, tmp_path: Path) -> None:
    directory, models, api, app = await api_without_workers(make_runtime, tmp_path,
                                                             0.3)
    hub = app[STREAMS]
    async with TestServer(app) as server:
        url = str(server.make_url("")).rstrip("/")
        run_id = await api.start_run("fan", "hello")
        attached: asyncio.Queue[int] = asyncio.Queue()
        streams = [asyncio.create_task(follow(url, run_id, attached))
                   for _ in range(SUBSCRIBERS)]
        for _ in range(SUBSCRIBERS):
            await asyncio.wait_for(attached.get(), 30)
        reads_before, notices_before = sum(hub.reads.made.values()), hub.notices
        writes_before = hub.direct_writes
        await make_runtime(dirs=[directory], models=models)  # the worker: the run starts now
        results = await asyncio.wait_for(asyncio.gather(*streams), 60)
        reads, notices = sum(hub.reads.made.values()) - reads_before, hub.notices - notices_before
        direct_writes = hub.direct_writes - writes_before

    logged = await api.store.load_events("fan", run_id)
    expected: dict[str, list[int]] = {}
    for event in logged:
        expected.setdefault(event.stream, []).append(event.seq)
    final_position = {stream: seqs[-1] for stream, seqs in expected.items()}
    for frames in results:
        assert frames[-1]["event"] == "end"
        assert json.loads(frames[-1]["data"])["status"] == "completed"
        events = [frame for frame in frames if "id" in frame]
        got: dict[str, list[int]] = {}
        for frame in events:
            data = json.loads(frame["data"])
            assert frame["event"] == data["type"]
            assert frame["id"] == data["cursor"]
            got.setdefault(data["stream"], []).append(data["seq"])
        assert got == expected  # every event, once, each stream's in its order
        assert decode_event_cursor(events[-1]["id"]) == final_position
    # a shared read per notice (a held piece of model text may ask for one more), where a
    # read per stream would make SUBSCRIBERS of each
    assert notices >= 3
    assert reads <= notices + 2, (reads, notices)
    # the hub wrote the new events of each notice to the waiting streams itself, without
    # waking their tasks: a write per stream per notice, at least for most of them
    assert direct_writes >= SUBSCRIBERS * (notices - 2), (direct_writes, notices)


async def test_lost_notices_cost_one_shared_look_per_run_not_one_per_stream(
        make_runtime, database_url: str, tmp_path: Path) -> None:
    """With the run's notices lost (its watch gone, so appends NOTIFY nobody), the hub looks at
    the run about every 5 s for all of its streams at once: they get every event and their
    ``end`` from one read per look, where each stream used to look on its own."""
    directory, models, api, app = await api_without_workers(make_runtime, tmp_path,
                                                             0.1)
    hub = app[STREAMS]
    async with TestServer(app) as server:
        url = str(server.make_url("")).rstrip("/")
        run_id = await api.start_run("fan", "hello")
        attached: asyncio.Queue[int] = asyncio.Queue()
        streams = [asyncio.create_task(follow(url, run_id, attached))
                   for _ in range(SUBSCRIBERS)]
        for _ in range(SUBSCRIBERS):
            await asyncio.wait_for(attached.get(), 30)
        with psycopg.connect(database_url, autocommit=True) as conn:
            # the hub records the watch within SSE_WATCH_SYNC_S; then its notices are lost
            async def watched() -> object:
                return conn.execute("SELECT 1 FROM toren_control.watched_runs "
                                    "WHERE run_id = %s", (run_id,)).fetchone()

            await eventually(watched, "the hub records the run's watch")
            conn.execute("DELETE FROM toren_control.watched_runs")
        reads_before, looks_before = hub.reads.made["events"], hub.looks
        notices_before = hub.notices
        await make_runtime(dirs=[directory], models=models)
        results = await asyncio.wait_for(asyncio.gather(*streams), 30)
        reads = hub.reads.made["events"] - reads_before
        looks, notices = hub.looks - looks_before, hub.notices - notices_before

    logged = await api.store.load_events("fan", run_id)
    expected = [(event.stream, event.seq) for event in logged]
    for frames in results:
        assert frames[-1]["event"] == "end"
        got = [(json.loads(f["data"])["stream"], json.loads(f["data"])["seq"])
               for f in frames if "id" in f]
        assert sorted(got) == sorted(expected) and len(got) == len(set(got))
    assert looks >= 1
    # a look reads the run's events once for the 20 streams, then a full read once
    assert reads <= 2 * (looks + notices) + 2, (reads, looks, notices)


async def test_an_http_1_0_stream_is_written_by_its_own_task_and_gets_every_event(
        make_runtime, tmp_path: Path) -> None:
    """HTTP/1.0 has no chunked bodies, so the hub never writes to such a stream (it writes
    chunks): the stream's task writes every event and the ``end``, and closes."""
    directory, models, api, app = await api_without_workers(make_runtime, tmp_path,
                                                             0.2)
    hub = app[STREAMS]
    async with TestServer(app) as server:
        run_id = await api.start_run("fan", "hello")
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(f"GET /runs/{run_id}/events HTTP/1.0\r\nHost: {server.host}\r\n"
                     "Accept: text/event-stream\r\n\r\n".encode())
        await make_runtime(dirs=[directory], models=models)  # the worker
        raw = await asyncio.wait_for(reader.read(), 60)  # until the server closes
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"chunked" not in head.lower()
    frames = [dict(line.split(": ", 1) for line in block.split("\n") if ": " in line)
              for block in body.decode().split("\n\n") if block and not block.startswith(":")]
    assert frames[-1]["event"] == "end"
    got = [(json.loads(f["data"])["stream"], json.loads(f["data"])["seq"])
           for f in frames if "id" in f]
    logged = await api.store.load_events("fan", run_id)
    assert got == [(event.stream, event.seq) for event in logged]
    assert hub.direct_writes == 0
