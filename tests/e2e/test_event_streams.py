"""Live event streams (SSE) against a real `toren dev`: clients that leave, Ctrl-C with streams
open, keys revoked under an open stream, and the cap on streams per key."""

from __future__ import annotations

import asyncio
import http.client
import json
import signal
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TorenCli, TorenProcess, wait_until
from toren.client import TorenAPIError, TorenClient
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(180)

StartToren = Callable[..., TorenProcess]
TOOLS = '''
from toren import tool

@tool(idempotent=True)
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"
'''


class Sse:
    """One event stream over a real connection: frames (``id``, ``event``, ``data``) and
    comments as they arrive."""

    def __init__(self, url: str, path: str, key: str | None = None) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
        headers = {"Accept": "text/event-stream"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.conn.request("GET", path, headers=headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.comments: list[str] = []

    def body(self) -> Any:
        return json.loads(self.response.read())

    def frames(self) -> Iterator[dict[str, str]]:
        """Frames until the server closes the stream."""
        frame: dict[str, str] = {}
        while raw := self.response.readline():
            line = raw.decode().rstrip("\n")
            if not line:
                if frame:
                    yield frame
                    frame = {}
            elif line.startswith(":"):
                self.comments.append(line[1:].strip())
            else:
                name, _, value = line.partition(": ")
                frame[name] = value

    def close(self) -> None:
        self.response.close()
        self.conn.close()


def call(url: str, path: str, method: str = "GET", body: Any = None,
         key: str | None = None) -> tuple[int, Any]:
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def start_dev(start_toren: StartToren, database_url: str, tmp_path: Path,
              **env: str) -> tuple[TorenProcess, str]:
    crews = tmp_path / "crews"
    write_agent_dir(crews, "chat", tools_py=TOOLS)
    dev = start_toren("dev", "--dir", str(crews), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, "TOREN_SCRIPTED_DELAY": "0.2", **env})
    return dev, dev.next_json()["url"]


#: The events of a session just opened (awaiting its first message).
SESSION_OPENED = ["RunCreated", "TaskScheduled", "AgentVersionPinned"]


def open_session(url: str, key: str | None = None) -> str:
    status, created = call(url, "/sessions", "POST", {"agent": "chat"}, key=key)
    assert status == 201, created
    return created["id"]


def test_a_client_leaving_a_stream_is_no_error_and_frees_its_place(
        start_toren: StartToren, database_url: str, tmp_path: Path) -> None:
    dev, url = start_dev(start_toren, database_url, tmp_path, TOREN_MAX_STREAMS_PER_KEY="1")
    status, run = call(url, "/runs", "POST", {"agent": "chat", "input": "postgres"})
    assert status == 201
    first = Sse(url, f"/runs/{run['id']}/events")
    assert first.status == 200
    frames = first.frames()
    assert [next(frames)["event"] for _ in range(2)] == ["RunCreated", "TaskScheduled"]
    first.close()  # mid-run: the server still has events to write to it

    def place_free() -> bool:
        stream = Sse(url, f"/runs/{run['id']}/events")
        try:
            return stream.status == 200
        finally:
            stream.close()

    # the one place the cap allows comes back once the server has noticed the client left
    assert wait_until(place_free, timeout=30)
    assert wait_until(lambda: call(url, f"/runs/{run['id']}")[1]["status"] == "completed",
                      timeout=60)
    assert dev.stop(signal.SIGINT) == 0
    assert "ERROR" not in dev.stderr and "Traceback" not in dev.stderr, dev.stderr


def test_ctrl_c_ends_open_streams_and_exits_within_the_grace(
        start_toren: StartToren, database_url: str, tmp_path: Path) -> None:
    dev, url = start_dev(start_toren, database_url, tmp_path, TOREN_SHUTDOWN_GRACE="3")
    session_id = open_session(url)  # awaits input: its stream never ends by itself
    streams = [Sse(url, f"/runs/{session_id}/events") for _ in range(2)]
    received: list[list[dict[str, str]]] = [[] for _ in streams]

    def read(index: int) -> None:
        received[index].extend(streams[index].frames())

    readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(2)]
    for reader in readers:
        reader.start()
    assert wait_until(lambda: all(len(frames) == len(SESSION_OPENED)  # both attached
                                  for frames in received))

    dev.proc.send_signal(signal.SIGINT)
    # behaviour, not a benchmark: it exits, well before aiohttp's default of minutes
    assert dev.proc.wait(timeout=3 + 30) == 0, dev.stderr
    for reader, stream in zip(readers, streams, strict=True):
        reader.join(timeout=10)
        assert not reader.is_alive()  # the server closed the stream
        assert any("shutting down" in comment for comment in stream.comments)
        stream.close()
    assert [frame["event"] for frame in received[0]] == SESSION_OPENED
    assert "Traceback" not in dev.stderr, dev.stderr


def test_a_revoked_key_ends_its_open_streams(
        start_toren: StartToren, toren_cli: TorenCli, database_url: str,
        tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url}
    created = json.loads(toren_cli("keys", "create", "viewer", "--json", env=env).stdout)
    other = json.loads(toren_cli("keys", "create", "other", "--json", env=env).stdout)
    _dev, url = start_dev(start_toren, database_url, tmp_path, TOREN_REQUIRE_KEYS="1")
    session_id = open_session(url, created["key"])
    stream = Sse(url, f"/runs/{session_id}/events", created["key"])
    untouched = Sse(url, f"/runs/{session_id}/events", other["key"])
    assert (stream.status, untouched.status) == (200, 200)
    frames = stream.frames()
    assert [next(frames)["event"] for _ in range(3)] == SESSION_OPENED

    revoked = toren_cli("keys", "revoke", created["prefix"], env=env)
    assert revoked.returncode == 0, revoked.stderr
    rest = list(frames)  # the server ends the stream (the read timeout is 60 s)
    assert [frame["event"] for frame in rest] == ["error"]
    assert json.loads(rest[0]["data"])["error"]["code"] == "api_key_revoked"
    stream.close()

    # a stream of a key still active is not touched: it still gets the session's events
    assert call(url, f"/sessions/{session_id}/messages", "POST", {"text": "postgres"},
                key=other["key"])[0] == 202
    seen = []
    for frame in untouched.frames():
        seen.append(frame["event"])
        if frame["event"] == "TurnEnded":
            break
    untouched.close()
    assert "UserMessage" in seen
    refused = Sse(url, f"/runs/{session_id}/events", created["key"])
    assert refused.status == 401
    refused.close()


def test_the_python_client_raises_when_its_key_is_revoked_mid_stream(
        start_toren: StartToren, toren_cli: TorenCli, database_url: str,
        tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url}
    created = json.loads(toren_cli("keys", "create", "client", "--json", env=env).stdout)
    _dev, url = start_dev(start_toren, database_url, tmp_path, TOREN_REQUIRE_KEYS="1")
    session_id = open_session(url, created["key"])

    async def follow() -> list[str]:
        seen: list[str] = []
        async with TorenClient(url, created["key"]) as client:
            async for event in client.stream_events(session_id):
                seen.append(event["type"])
                if len(seen) == 2:  # then revoke it from another process
                    await asyncio.to_thread(toren_cli, "keys", "revoke", created["prefix"],
                                            env=env)
        return seen

    with pytest.raises(TorenAPIError) as raised:
        asyncio.run(follow())
    assert (raised.value.status, raised.value.code) == (401, "api_key_revoked")


def test_streams_are_capped_per_key(start_toren: StartToren, toren_cli: TorenCli,
                                    database_url: str, tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url}
    first = json.loads(toren_cli("keys", "create", "a", "--json", env=env).stdout)["key"]
    second = json.loads(toren_cli("keys", "create", "b", "--json", env=env).stdout)["key"]
    _dev, url = start_dev(start_toren, database_url, tmp_path, TOREN_REQUIRE_KEYS="1",
                          TOREN_MAX_STREAMS_PER_KEY="2")
    session_id = open_session(url, first)
    path = f"/runs/{session_id}/events"
    held = [Sse(url, path, first), Sse(url, path, first)]
    assert [stream.status for stream in held] == [200, 200]

    refused = Sse(url, path, first)
    assert refused.status == 429
    assert refused.response.getheader("Retry-After") == "5"
    error = refused.body()["error"]
    assert error["code"] == "too_many_streams"
    assert "TOREN_MAX_STREAMS_PER_KEY" in error["message"]
    refused.close()
    # the cap is per key; JSON reads are not streams
    other = Sse(url, path, second)
    assert other.status == 200
    assert call(url, path, key=first)[0] == 200

    def reopen() -> bool:
        stream = Sse(url, path, first)
        if stream.status == 200:
            held.append(stream)
            return True
        stream.close()
        return False

    held.pop().close()
    assert wait_until(reopen, timeout=30)  # a closed stream gives its place back
    for stream in [*held, other]:
        stream.close()
