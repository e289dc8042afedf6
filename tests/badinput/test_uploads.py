"""Hostile uploads against a real `toren dev`: large concurrent uploads cost the server a bounded
amount of memory and read back byte for byte; a flood of uploads meets the per-key quota (429,
Retry-After), a full deployment the storage quota (507); `GET /files` pages through everything
exactly once and refuses hostile paging parameters."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import json
import os
import socket
import time
import tracemalloc
import zipfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import psycopg
import pytest
from toren_postgres.files import PostgresFileStore

from tests.conftest import TorenCli, TorenProcess, wait_until
from tests.e2e.test_http_api import TOOLS, call, conforms
from toren.config import Settings
from toren.files import ZIP, BadFile, sniff_type
from toren.server.cursors import encode_page_cursor
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(300)
MIB = 1024 * 1024


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the peak resident set) of a process, in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


async def generated(seed: int, size: int, digest: Any) -> AsyncIterator[bytes]:
    """``size`` bytes of content unique to ``seed`` (text, so it is sniffed as such), made a
    megabyte at a time and fed to ``digest`` as it goes: the test never holds a whole file."""
    for block in range(size // MIB):
        line = f"upload {seed} block {block:06d} ".encode()
        chunk = (line * (MIB // len(line) + 1))[:MIB]
        digest.update(chunk)
        yield chunk


async def post_file(url: str, name: str, data: Any, headers: dict[str, str] | None = None
                    ) -> tuple[int, dict[str, Any], dict[str, str]]:
    form = aiohttp.FormData()
    form.add_field("file", data, filename=name, content_type="application/octet-stream")
    timeout = aiohttp.ClientTimeout(total=240)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.post(
            f"{url}/files", data=form, headers=headers or {}) as answer:
        return answer.status, await answer.json(), dict(answer.headers)


async def read_back(database_url: str, file_id: str) -> str:
    """The SHA-256 of a file's content as the store reads it back (what read_document gets)."""
    store = PostgresFileStore(Settings(database_url=database_url))
    await store.open()
    try:
        found = await store.read_file(file_id)
    finally:
        await store.close()
    assert found is not None
    return hashlib.sha256(found[1]).hexdigest()


def dev_server(start_toren: Any, database_url: str, tmp_path: Path,
               **env: str) -> tuple[str, TorenProcess]:
    """``toren dev`` serving the agent ``crew``: its URL and its process (which serves the
    API)."""
    write_agent_dir(tmp_path / "crews", "crew", tools_py=TOOLS)
    dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, **env})
    return dev.next_json()["url"], dev


def test_four_concurrent_50_mib_uploads_cost_bounded_memory_and_read_back_exactly(
        start_toren: Any, database_url: str, tmp_path: Path) -> None:
    url, dev = dev_server(start_toren, database_url, tmp_path)
    pid = dev.proc.pid
    assert call(f"{url}/healthz")[0] == 200
    before = memory_kib(pid)

    async def upload_four() -> list[tuple[int, dict[str, Any], str]]:
        digests = [hashlib.sha256() for _ in range(4)]
        answers = await asyncio.gather(*(
            post_file(url, f"big-{seed}.txt", generated(seed, 50 * MIB, digests[seed]))
            for seed in range(4)))
        return [(status, body, digest.hexdigest())
                for (status, body, _), digest in zip(answers, digests, strict=True)]

    uploaded = asyncio.run(upload_four())
    after = memory_kib(pid)
    for status, body, sha256 in uploaded:
        assert status == 201, body
        assert (body["size_bytes"], body["sha256"]) == (50 * MIB, sha256)
        assert asyncio.run(read_back(database_url, body["id"])) == sha256
    grown_mib = (after["VmHWM"] - before["VmRSS"]) / 1024
    # 200 MiB went through: the old server held each upload whole (about 700 MB more)
    assert grown_mib < 100, f"the server's peak memory grew by {grown_mib:.0f} MiB"
    assert call(f"{url}/healthz")[0] == 200


def test_uploads_abandoned_mid_body_leave_nothing_behind(start_toren: Any, database_url: str,
                                                          tmp_path: Path) -> None:
    url, dev = dev_server(start_toren, database_url, tmp_path)
    host, port = url.removeprefix("http://").split(":")
    head = (b"POST /files HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 50000000\r\n"
            b"Content-Type: multipart/form-data; boundary=XX\r\n\r\n--XX\r\n"
            b'Content-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\n')
    for _ in range(4):  # 3 MB of a promised 50 MB, then the client is gone
        with socket.create_connection((host, int(port))) as client:
            client.sendall(head + b"x" * 3_000_000)
            time.sleep(0.2)

    def spooled() -> list[str]:
        """The server's open files that are deleted temporary files (spooled uploads)."""
        names = []
        for entry in Path(f"/proc/{dev.proc.pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                names.append(os.readlink(entry))
        return [name for name in names if "(deleted)" in name]

    assert wait_until(lambda: not spooled(), 10), spooled()
    assert counts(database_url) == (0, 0)
    assert call(f"{url}/healthz")[0] == 200
    assert "unhandled error" not in dev.stderr  # an abandoned upload is no server error
    assert upload_now(url, "after.txt", b"still serving")[0] == 201


def upload_now(url: str, name: str, data: bytes, headers: dict[str, str] | None = None
               ) -> tuple[int, dict[str, Any], dict[str, str]]:
    return asyncio.run(post_file(url, name, data, headers))


def counts(database_url: str) -> tuple[int, int]:
    """Files and distinct contents stored."""
    with psycopg.connect(database_url) as conn:
        files = conn.execute("SELECT count(*) FROM toren_control.files").fetchone()
        blobs = conn.execute("SELECT count(*) FROM toren_control.file_blobs").fetchone()
    assert files is not None and blobs is not None
    return int(files[0]), int(blobs[0])


def test_the_per_key_upload_rate_is_429_with_retry_after_and_spares_other_keys(
        start_toren: Any, toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    keys = {}
    for name in ("flood", "calm"):
        created = toren_cli("keys", "create", name, "--json", env={"DATABASE_URL": database_url})
        assert created.returncode == 0, created.stderr
        keys[name] = {"Authorization": f"Bearer {json.loads(created.stdout)['key']}"}
    url, _ = dev_server(start_toren, database_url, tmp_path, TOREN_REQUIRE_KEYS="1",
                        TOREN_MAX_UPLOADS_PER_MINUTE="3")
    for number in range(3):
        status, body, _ = upload_now(url, f"n{number}.txt", b"note %d" % number, keys["flood"])
        assert status == 201, body
    # the next ones: refused before the body is read, whatever the body
    for name, data in (("n3.txt", b"one too many"), ("n4.pdf", b"not even a pdf")):
        status, body, headers = upload_now(url, name, data, keys["flood"])
        assert (status, body["error"]["code"]) == (429, "too_many_uploads"), body
        conforms("Error", body)
        assert "TOREN_MAX_UPLOADS_PER_MINUTE" in body["error"]["message"]
        assert "this API key" in body["error"]["message"]
        assert 1 <= int(headers["Retry-After"]) <= 60
    assert counts(database_url)[0] == 3
    # another key has its own quota; listing is not an upload
    status, body, _ = upload_now(url, "calm.txt", b"calm", keys["calm"])
    assert status == 201, body
    assert call(f"{url}/files", headers=keys["flood"])[0] == 200


def test_without_keys_the_process_is_one_caller(start_toren: Any, database_url: str,
                                                tmp_path: Path) -> None:
    url, _ = dev_server(start_toren, database_url, tmp_path, TOREN_MAX_UPLOADS_PER_MINUTE="2")
    assert [upload_now(url, f"{n}.txt", b"x%d" % n)[0] for n in range(3)] == [201, 201, 429]
    status, body, headers = upload_now(url, "again.txt", b"again")
    assert status == 429 and "this server" in body["error"]["message"]
    assert int(headers["Retry-After"]) >= 1


def test_the_storage_quota_is_507_counting_distinct_content_once(
        start_toren: Any, toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    url, _ = dev_server(start_toren, database_url, tmp_path, TOREN_MAX_TOTAL_FILE_BYTES="3000")
    status, first, _ = upload_now(url, "a.txt", b"a" * 2000)
    assert status == 201, first
    status, body, _ = upload_now(url, "b.txt", b"b" * 1001)
    assert (status, body["error"]["code"]) == (507, "storage_quota_exceeded")
    conforms("Error", body)
    message = body["error"]["message"]
    assert "b.txt" in message and "TOREN_MAX_TOTAL_FILE_BYTES" in message
    assert "2,000 bytes" in message and "3,000" in message
    # content already stored costs nothing; content that fits exactly is stored
    assert upload_now(url, "copy-of-a.txt", b"a" * 2000)[0] == 201
    assert upload_now(url, "c.txt", b"c" * 1000)[0] == 201
    assert counts(database_url) == (3, 2)
    # full: refused before the body is read
    status, body, _ = upload_now(url, "d.txt", b"d")
    assert (status, body["error"]["code"]) == (507, "storage_quota_exceeded")
    assert "any more" in body["error"]["message"]
    # the CLI writes to the same deployment under the same quota
    extra = tmp_path / "extra.txt"
    extra.write_text("e" * 10)
    added = toren_cli("files", "add", str(extra), "--json", env={
        "DATABASE_URL": database_url, "TOREN_MAX_TOTAL_FILE_BYTES": "3000"})
    assert added.returncode == 1
    assert json.loads(added.stdout)["error"]["code"] == "storage_quota_exceeded"
    # deleting makes room again
    status, _, _ = call(f"{url}/files/{first['id']}", "DELETE")
    assert status == 200 and counts(database_url) == (2, 2)  # its copy keeps the content
    files = call(f"{url}/files")[1]["files"]
    for stored in files:
        call(f"{url}/files/{stored['id']}", "DELETE")
    assert upload_now(url, "d.txt", b"d" * 3000)[0] == 201


def test_concurrent_uploads_cannot_share_the_room_left_for_one(
        start_toren: Any, database_url: str, tmp_path: Path) -> None:
    url, _ = dev_server(start_toren, database_url, tmp_path, TOREN_MAX_TOTAL_FILE_BYTES="3000")

    async def six() -> list[int]:
        answers = await asyncio.gather(*(post_file(url, f"{n}.txt", bytes([65 + n]) * 1000)
                                         for n in range(6)))
        return sorted(status for status, _, _ in answers)

    assert asyncio.run(six()) == [201, 201, 201, 507, 507, 507]
    assert counts(database_url) == (3, 3)


def test_paging_returns_every_file_exactly_once_while_files_are_added(
        start_toren: Any, database_url: str, tmp_path: Path) -> None:
    url, _ = dev_server(start_toren, database_url, tmp_path,
                        TOREN_MAX_UPLOADS_PER_MINUTE="1000")

    async def upload_many(first: int, count: int) -> list[str]:
        ids = []
        async with aiohttp.ClientSession() as http:
            for number in range(first, first + count):
                form = aiohttp.FormData()
                form.add_field("file", b"file %d" % number, filename=f"{number}.txt")
                async with http.post(f"{url}/files", data=form) as answer:
                    assert answer.status == 201, await answer.text()
                    ids.append((await answer.json())["id"])
        return ids

    uploaded = asyncio.run(upload_many(0, 250))
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        query = "?limit=40" + (f"&cursor={quote(cursor)}" if cursor else "")
        status, page, _ = call(f"{url}/files{query}")
        assert status == 200, page
        assert len(page["files"]) <= 40
        seen += [stored["id"] for stored in page["files"]]
        cursor, pages = page["next_cursor"], pages + 1
        if pages == 2:  # files added meanwhile are newer: not in the later pages
            asyncio.run(upload_many(1000, 5))
        if cursor is None:
            break
    assert pages == 7
    assert len(seen) == len(set(seen)) == 250
    assert seen == list(reversed(uploaded))  # newest first
    # the default page is 100, as the list always was
    first = call(f"{url}/files")[1]
    assert len(first["files"]) == 100 and first["next_cursor"]


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


#: Paging parameters no client of Toren sends, and the error code each gets (400).
HOSTILE_PAGING = [
    ("limit=-1", "invalid_limit"),
    ("limit=0", "invalid_limit"),
    ("limit=1001", "invalid_limit"),
    ("limit=99999999999999999999999999", "invalid_limit"),
    ("limit=1e3", "invalid_limit"),
    ("limit=", "invalid_limit"),
    ("limit=%00", "invalid_limit"),
    ("cursor=!!!", "invalid_cursor"),
    ("cursor=" + b64(b"\xff\xfe"), "invalid_cursor"),
    ("cursor=" + b64(b'{"a": 1}'), "invalid_cursor"),
    ("cursor=" + b64(b'["not a date", "x"]'), "invalid_cursor"),
    ("cursor=" + b64(b'["2024-01-01T00:00:00+00:00"]'), "invalid_cursor"),
    ("cursor=" + quote(encode_page_cursor(datetime(2024, 1, 1, tzinfo=UTC),
                                          "'; DROP TABLE toren_control.files; --")),
     "invalid_cursor"),
    ("cursor=" + b64(b"[" * 3000 + b"]" * 3000), "invalid_cursor"),
]


def test_hostile_paging_parameters_are_400(start_toren: Any, database_url: str,
                                           tmp_path: Path) -> None:
    url, _ = dev_server(start_toren, database_url, tmp_path)
    assert upload_now(url, "one.txt", b"one")[0] == 201
    for query, code in HOSTILE_PAGING:
        status, body, _ = call(f"{url}/files?{query}")
        assert (status, body["error"]["code"]) == (400, code), (query, body)
        conforms("Error", body)
    listed = call(f"{url}/files?limit=1000")[1]
    assert len(listed["files"]) == 1 and listed["next_cursor"] is None
    # the runs list and the events share the cursor decoder (deep JSON was a 500 there too)
    deep = b64(b"[" * 3000 + b"]" * 3000)
    for route in ("/runs?cursor=", "/archived-runs?cursor="):
        status, body, _ = call(f"{url}{route}{deep}")
        assert (status, body["error"]["code"]) == (400, "invalid_cursor"), (route, body)


def test_a_zip_of_half_a_million_entries_is_sniffed_in_bounded_memory() -> None:
    """Telling a docx or xlsx from another zip lists the archive's entries: a zip of 50 MiB of
    empty entries would list half a million of them (hundreds of MB in the server)."""
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w") as archive:
        for number in range(200_000):
            archive.writestr(f"{number}", b"")
    data = raw.getvalue()
    tracemalloc.start()
    try:
        assert sniff_type(data[:4096], "many.zip", lambda: io.BytesIO(data)) == ZIP
        with pytest.raises(BadFile, match="the name says DOCX but the content is a zip"):
            sniff_type(data[:4096], "many.docx", lambda: io.BytesIO(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MIB + len(data), f"sniffing took {peak / MIB:.0f} MiB"
