"""``GET /files/{id}/content`` over real HTTP (an in-process server on a real socket, real
Postgres): the stored bytes with the stored type, shown inline only for images and PDFs,
ETag/If-None-Match, large files in pieces, the same keys as ``GET /files/{id}``, and the
client's ``file_content``."""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import aiohttp
import pytest

from toren.client import InvalidId, SyncTorenClient, TorenAPIError, TorenClient
from toren.host.runtime import Runtime
from toren.server.app import create_app
from toren.testing import pdf_bytes, png_bytes, serve_on_free_port, write_agent_dir

MakeRuntime = Callable[..., Awaitable[Runtime]]
SAFE_HEADERS = {"X-Content-Type-Options": "nosniff",
                "Content-Security-Policy": "sandbox; default-src 'none'"}


@pytest.fixture
async def served(toren_runtime: MakeRuntime, tmp_path: Path) -> AsyncIterator[tuple[str, Runtime]]:
    runtime = await toren_runtime([write_agent_dir(tmp_path, "reader")])
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=False))
    yield url, runtime
    await runner.cleanup()


async def upload(url: str, name: str, data: bytes,
                 headers: dict[str, str] | None = None) -> dict[str, Any]:
    form = aiohttp.FormData()
    form.add_field("file", io.BytesIO(data), filename=name,
                   content_type="application/octet-stream")
    async with aiohttp.ClientSession() as http, http.post(f"{url}/files", data=form,
                                                          headers=headers or {}) as answer:
        assert answer.status == 201, await answer.text()
        return dict(await answer.json())


async def fetch(url: str, method: str = "GET", headers: dict[str, str] | None = None
                ) -> tuple[int, bytes, Any]:
    async with aiohttp.ClientSession() as http, http.request(
            method, url, headers=headers or {}) as answer:
        return answer.status, await answer.read(), answer.headers


DISPOSITION = re.compile(r'^(inline|attachment); filename="([ !#-\[\]-~]*)"; '
                         r"filename\*=UTF-8''([A-Za-z0-9%._~-]+)$")


def disposition(value: str) -> tuple[str, str]:
    """The disposition type and the file name a client reads from ``value`` (``filename*``
    over ``filename``, as RFC 6266 says); the header's form is checked whole."""
    match = DISPOSITION.match(value)
    assert match, value
    return match.group(1), unquote(match.group(3))


async def test_images_and_pdfs_are_inline_and_read_back_byte_for_byte(
        served: tuple[str, Runtime]) -> None:
    url, _ = served
    png, pdf = png_bytes(64, 48, (10, 200, 10)), pdf_bytes("Revenue grew 12%.")
    for name, data, content_type in (("chart.png", png, "image/png"),
                                     ("report.pdf", pdf, "application/pdf")):
        stored = await upload(url, name, data)
        status, body, headers = await fetch(f"{url}/files/{stored['id']}/content")
        assert status == 200 and body == data
        assert headers["Content-Type"] == content_type
        assert int(headers["Content-Length"]) == len(data)
        assert disposition(headers["Content-Disposition"]) == ("inline", name)
        assert headers["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"'
        assert {k: headers[k] for k in SAFE_HEADERS} == SAFE_HEADERS


@pytest.mark.parametrize(("name", "data", "content_type"), [
    ("page.html", b"<html><script>alert(document.cookie)</script></html>", "text/html"),
    ("notes.md", b"# Notes\n", "text/markdown"),
    ("blob.bin", bytes(range(256)), "application/octet-stream"),
])
async def test_every_other_type_is_an_attachment_in_a_sandbox(
        served: tuple[str, Runtime], name: str, data: bytes, content_type: str) -> None:
    url, _ = served
    stored = await upload(url, name, data)
    status, body, headers = await fetch(f"{url}/files/{stored['id']}/content")
    assert (status, body) == (200, data)
    assert headers["Content-Type"] == content_type  # the stored (sniffed) type, nothing guessed
    assert disposition(headers["Content-Disposition"]) == ("attachment", name)
    assert {k: headers[k] for k in SAFE_HEADERS} == SAFE_HEADERS


async def test_names_are_encoded_so_they_cannot_add_parameters_or_headers(
        served: tuple[str, Runtime]) -> None:
    url, _ = served
    name = 'résumé "final"; filename=evil.html 📄.txt'
    stored = await upload(url, name, b"plain text\n")
    _, _, headers = await fetch(f"{url}/files/{stored['id']}/content")
    value = headers["Content-Disposition"]
    assert value.isascii()
    assert value.startswith('attachment; filename="r_sum_ _final__ filename_evil.html _.txt"; ')
    assert disposition(value) == ("attachment", stored["name"])  # filename* gives it back whole


async def test_if_none_match_with_the_etag_is_304_without_a_body(
        served: tuple[str, Runtime]) -> None:
    url, _ = served
    data = png_bytes(8, 8)
    stored = await upload(url, "dot.png", data)
    content = f"{url}/files/{stored['id']}/content"
    etag = f'"{stored["sha256"]}"'
    for header in (etag, f"W/{etag}", f'"nope", {etag}', "*"):
        status, body, headers = await fetch(content, headers={"If-None-Match": header})
        assert (status, body) == (304, b""), header
        assert headers["ETag"] == etag
        assert headers["X-Content-Type-Options"] == "nosniff"
    for header in ('"nope"', stored["sha256"], f'"{"0" * 64}"', ""):  # unquoted: no match
        status, body, _ = await fetch(content, headers={"If-None-Match": header})
        assert (status, body) == (200, data), header


async def test_a_large_file_is_sent_whole_in_pieces_and_head_sends_no_body(
        served: tuple[str, Runtime]) -> None:
    url, _ = served
    data = b"".join(b"line %07d of a long log\n" % n for n in range(120_000))  # ~2.9 MB
    stored = await upload(url, "big.log", data)
    content = f"{url}/files/{stored['id']}/content"
    async with aiohttp.ClientSession() as http, http.get(content) as answer:
        assert answer.status == 200
        pieces = [piece async for piece in answer.content.iter_any()]
    assert b"".join(pieces) == data and len(pieces) > 1
    status, body, headers = await fetch(content, "HEAD")
    assert (status, body) == (200, b"")
    assert int(headers["Content-Length"]) == len(data)


async def test_unknown_malformed_and_deleted_ids_are_404(served: tuple[str, Runtime]) -> None:
    url, _ = served
    stored = await upload(url, "gone.txt", b"soon gone\n")
    async with aiohttp.ClientSession() as http:
        async with http.delete(f"{url}/files/{stored['id']}") as answer:
            assert answer.status == 200
        for file_id in (stored["id"], "00000000-0000-0000-0000-000000000000", "not-an-id",
                        "x" * 5000):
            async with http.get(f"{url}/files/{file_id}/content") as answer:
                assert answer.status == 404
                body = await answer.json()
                assert body["error"]["code"] == "file_not_found"
                assert len(body["error"]["message"]) < 120


async def test_the_same_keys_as_the_files_record(toren_runtime: MakeRuntime,
                                                 tmp_path: Path) -> None:
    runtime = await toren_runtime([write_agent_dir(tmp_path, "reader")])
    _, key = await runtime.keys.create("reader")
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=True))
    try:
        bearer = {"Authorization": f"Bearer {key}"}
        stored = await upload(url, "chart.png", png_bytes(4, 4), bearer)
        for path in (f"/files/{stored['id']}", f"/files/{stored['id']}/content"):
            assert (await fetch(url + path))[0] == 401
            assert (await fetch(url + path, headers={"Authorization": "Bearer wrong"}))[0] == 401
            assert (await fetch(url + path, headers=bearer))[0] == 200
    finally:
        await runner.cleanup()


async def test_the_client_reads_a_files_content(served: tuple[str, Runtime],
                                                tmp_path: Path) -> None:
    url, _ = served
    chart = tmp_path / "chart.png"
    chart.write_bytes(png_bytes(32, 16))
    async with TorenClient(url) as client:
        stored = await client.upload_file(chart)
        assert await client.file_content(stored["id"]) == chart.read_bytes()
        with pytest.raises(TorenAPIError) as missing:
            await client.file_content("00000000-0000-0000-0000-000000000000")
        assert (missing.value.status, missing.value.code) == (404, "file_not_found")
        with pytest.raises(InvalidId):
            await client.file_content("../runs")
    sync = SyncTorenClient(url)  # its own event loop: run it off this one
    assert await asyncio.to_thread(sync.file_content, stored["id"]) == chart.read_bytes()
