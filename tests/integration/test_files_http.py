"""Files over real HTTP (an in-process server on a real socket, real Postgres): upload, list,
show, delete, content addressing, and hostile uploads that leave the server healthy."""

from __future__ import annotations

import asyncio
import hashlib
import io
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest

from toren.host.runtime import Runtime
from toren.server.app import create_app
from toren.testing import serve_on_free_port, write_agent_dir

MakeRuntime = Callable[..., Awaitable[Runtime]]


@pytest.fixture
async def served(toren_runtime: MakeRuntime, tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[str, Runtime]]:
    monkeypatch.setenv("TOREN_MAX_FILE_BYTES", str(8 * 1024 * 1024))
    runtime = await toren_runtime([write_agent_dir(tmp_path, "reader")])
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=False))
    yield url, runtime
    await runner.cleanup()


@pytest.fixture
def server(served: tuple[str, Runtime]) -> str:
    return served[0]


async def upload(url: str, name: str, data: Any,
                 content_type: str = "application/octet-stream") -> tuple[int, dict[str, Any]]:
    form = aiohttp.FormData()
    form.add_field("file", data, filename=name, content_type=content_type)
    async with aiohttp.ClientSession() as http, http.post(f"{url}/files", data=form) as answer:
        return answer.status, await answer.json()


async def call(url: str, method: str = "GET") -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.request(method, url) as answer:
        return answer.status, await answer.json()


def blob_count(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM toren_control.file_blobs").fetchone()
    return int(row[0]) if row else 0


async def test_upload_list_show_delete_with_content_addressing(server: str,
                                                               database_url: str) -> None:
    text = b"# Notes\n\nQuarterly revenue grew 12%.\n"
    status, first = await upload(server, "../../etc/notes.md", text)
    assert status == 201
    assert (first["name"], first["content_type"], first["size_bytes"]) == (
        "notes.md", "text/markdown", len(text))
    assert first["sha256"] == hashlib.sha256(text).hexdigest()
    assert first["uploaded_by"] == "http"
    status, second = await upload(server, "copy.md", text)
    assert status == 201 and second["id"] != first["id"] and second["sha256"] == first["sha256"]
    assert blob_count(database_url) == 1  # one stored copy for the same content

    status, listed = await call(f"{server}/files")
    assert [f["id"] for f in listed["files"]] == [second["id"], first["id"]]
    assert (await call(f"{server}/files/{first['id']}")) == (200, first)

    assert (await call(f"{server}/files/{first['id']}", "DELETE")) == (
        200, {"id": first["id"], "deleted": True})
    assert blob_count(database_url) == 1  # still used by the copy
    await call(f"{server}/files/{second['id']}", "DELETE")
    assert blob_count(database_url) == 0
    for method in ("GET", "DELETE"):
        status, missing = await call(f"{server}/files/{first['id']}", method)
        assert status == 404 and missing["error"]["code"] == "file_not_found"
        status, _ = await call(f"{server}/files/not-a-uuid", method)
        assert status == 404


@pytest.mark.parametrize("name,data,code", [
    ("report.pdf", b"just text, not a PDF", "bad_file"),
    ("sheet.xlsx", b"%PDF-1.7 a PDF in disguise", "bad_file"),
    ("notes.txt", b"\x00\x01\x02binary\x00", "bad_file"),
    ("empty.txt", b"", "bad_file"),
])
async def test_misnamed_and_empty_uploads_are_refused(server: str, name: str, data: bytes,
                                                      code: str) -> None:
    status, body = await upload(server, name, data)
    assert (status, body["error"]["code"]) == (415, code)
    assert name in body["error"]["message"]
    assert (await call(f"{server}/files"))[1] == {"files": [], "next_cursor": None}


async def test_a_body_that_is_not_multipart_or_has_no_file_part(server: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{server}/files", json={"file": "x"}) as answer:
            assert answer.status == 415
        form = aiohttp.FormData()
        form.add_field("other", b"x", filename="a.txt")
        async with http.post(f"{server}/files", data=form) as answer:
            assert answer.status == 400 and "exactly one part, named 'file'" in (
                await answer.json())["error"]["message"]
        form.add_field("file", b"x", filename="a.txt")
        async with http.post(f"{server}/files", data=form) as answer:
            assert answer.status == 400  # the part before the file
        two = aiohttp.FormData()
        two.add_field("file", b"x", filename="a.txt")
        two.add_field("file", b"y", filename="b.txt")
        async with http.post(f"{server}/files", data=two) as answer:
            assert answer.status == 400


async def test_a_two_gigabyte_upload_is_refused_without_being_read(server: str) -> None:
    sent = 0

    async def two_gigabytes() -> AsyncIterator[bytes]:
        nonlocal sent
        chunk = b"x" * (1024 * 1024)
        for _ in range(2048):
            sent += len(chunk)
            yield chunk

    status: int | None = None
    try:
        status, body = await upload(server, "huge.txt", two_gigabytes())
        assert body["error"]["code"] == "file_too_large"
    except aiohttp.ClientError:
        pass  # the server may close the connection while the client is still sending
    assert status in (413, None)
    assert sent < 64 * 1024 * 1024  # stopped long before 2 GB
    assert (await call(f"{server}/healthz"))[0] == 200
    status, _ = await upload(server, "after.txt", b"the server still works")
    assert status == 201


async def post_json(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as answer:
        return answer.status, await answer.json()


async def test_files_attach_to_a_run_and_to_a_session_message(server: str) -> None:
    _, stored = await upload(server, "brief.md", b"# Brief\n")
    status, run = await post_json(f"{server}/runs", {"agent": "reader", "input": "Summarise",
                                                     "files": [stored["id"]]})
    assert status == 201
    _, events = await call(f"{server}/runs/{run['id']}/events")
    created = events["events"][0]["data"]
    assert created["input"] == ("Summarise\n\nAttached files (read them with read_document, "
                                "passing the id):\n"
                                f"- brief.md (text/markdown, 8 bytes): id {stored['id']}")

    status, missing = await post_json(f"{server}/runs", {"agent": "reader", "input": "x",
                                                         "files": ["nope"]})
    assert (status, missing["error"]["code"]) == (404, "file_not_found")
    status, bad = await post_json(f"{server}/runs", {"agent": "reader", "input": {"a": 1},
                                                     "files": [stored["id"]]})
    assert status == 400 and "text input" in bad["error"]["message"]

    _, session = await post_json(f"{server}/sessions", {"agent": "reader"})
    messages = f"{server}/sessions/{session['id']}/messages"
    status, _ = await post_json(messages, {"text": "Read this", "files": [stored["id"]]})
    assert status == 202
    _, transcript = await call(f"{server}/sessions/{session['id']}")
    assert stored["id"] in transcript["transcript"][0]["text"]
    status, _ = await post_json(messages, {"close": True, "files": [stored["id"]]})
    assert status == 400


async def test_the_client_uploads_lists_attaches_and_deletes(server: str, tmp_path: Path) -> None:
    from toren.client import TorenAPIError, TorenClient

    sheet = tmp_path / "data.csv"
    sheet.write_text("a,b\n1,2\n")
    async with TorenClient(server) as client:
        stored = await client.upload_file(sheet)
        assert (stored["name"], stored["content_type"]) == ("data.csv", "text/csv")
        assert [f["id"] for f in (await client.list_files())["files"]] == [stored["id"]]
        assert await client.get_file(stored["id"]) == stored
        run = await client.create_run("reader", "Sum the columns", files=[stored["id"]])
        events = await client.events(run["id"])
        assert stored["id"] in events["events"][0]["data"]["input"]
        assert await client.delete_file(stored["id"]) == {"id": stored["id"], "deleted": True}
        with pytest.raises(TorenAPIError) as info:
            await client.get_file(stored["id"])
        assert (info.value.status, info.value.code) == (404, "file_not_found")
        misnamed = tmp_path / "x.pdf"
        misnamed.write_text("text")
        with pytest.raises(TorenAPIError) as info:
            await client.upload_file(misnamed)
        assert info.value.status == 415


async def test_malformed_multipart_bodies_are_client_errors(server: str) -> None:
    boundary = "b0undary"
    bodies = [
        # a first part whose name has control and odd characters (schemathesis found a 500)
        (f"--{boundary}\r\nContent-Disposition: form-data; name=\"\u008a\U000b8e20\x01;"
         f"\U000d9bb0\x07\u00b3\"\r\n\r\n-4.07e+16\r\n--{boundary}\r\nContent-Disposition: "
         f"form-data; name=\"file\"; filename=\"file\"\r\n\r\n\r\n--{boundary}--\r\n"
         ).encode(),
        b"--b0undary\r\nno headers end",
        b"not multipart at all",
        b"",
    ]
    async with aiohttp.ClientSession() as http:
        for body in bodies:
            async with http.post(f"{server}/files", data=body, headers={
                    "Content-Type": f"multipart/form-data; boundary={boundary}"}) as answer:
                assert 400 <= answer.status < 500, (body, await answer.text())
        assert (await call(f"{server}/healthz"))[0] == 200


async def test_content_past_one_chunk_is_stored_in_pieces_and_reads_back(
        served: tuple[str, Runtime]) -> None:
    url, runtime = served
    data = bytes(range(256)) * (3 * 4096) + b"!"  # 3 MiB and a byte: four chunks
    # the same content twice at once: one waits for the other's blob, then shares it
    (first_status, first), (second_status, second) = await asyncio.gather(
        upload(url, "a.bin", io.BytesIO(data)), upload(url, "b.bin", io.BytesIO(data)))
    assert (first_status, second_status) == (201, 201)
    assert first["sha256"] == second["sha256"] == hashlib.sha256(data).hexdigest()
    assert first["size_bytes"] == len(data)
    for stored in (first, second):
        found = await runtime.store.read_file(stored["id"])
        assert found is not None and found[1] == data and found[0].id == stored["id"]
    assert await runtime.store.stored_bytes() == len(data)  # kept once
    await call(f"{url}/files/{first['id']}", "DELETE")
    found = await runtime.store.read_file(second["id"])
    assert found is not None and found[1] == data
    await call(f"{url}/files/{second['id']}", "DELETE")
    assert await runtime.store.stored_bytes() == 0
    assert await runtime.store.read_file(second["id"]) is None


async def test_content_stored_whole_by_an_earlier_version_still_reads(
        served: tuple[str, Runtime], database_url: str) -> None:
    """Before uploads were stored in pieces, each blob held its content in one value."""
    url, runtime = served
    data = b"old line\n" * (300 * 1024)  # 2.7 MiB in one bytea, as 0007 stored it
    sha256 = hashlib.sha256(data).hexdigest()
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO toren_control.file_blobs (sha256, size_bytes, data) "
                     "VALUES (%s, %s, %s)", [sha256, len(data), data])
        row = conn.execute(
            "INSERT INTO toren_control.files (name, content_type, size_bytes, sha256) "
            "VALUES ('old.txt', 'text/plain', %s, %s) RETURNING id", [len(data), sha256]
        ).fetchone()
    assert row is not None
    found = await runtime.store.read_file(str(row[0]))
    assert found is not None and found[1] == data
    status, again = await upload(url, "again.txt", io.BytesIO(data))  # the same: shared
    assert status == 201 and again["sha256"] == sha256
    found = await runtime.store.read_file(again["id"])
    assert found is not None and found[1] == data
    assert await runtime.store.stored_bytes() == len(data)
    assert [f["name"] for f in (await call(f"{url}/files"))[1]["files"]] == [
        "again.txt", "old.txt"]
