"""Files over HTTP: upload (multipart, spooled to disk in pieces), list (in pages), show,
read the content back, delete; the per-key upload rate and the deployment's storage quota."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from urllib.parse import quote, unquote

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from toren.core.attachments import SHOWABLE_TYPES
from toren.files import (
    FileNotFound,
    FileTooLarge,
    UploadSpool,
    max_file_bytes,
    parse_file_id,
)
from toren.server.auth import API_KEY, request_actor
from toren.server.context import RUNTIME
from toren.server.cursors import InvalidCursor, decode_page_cursor, encode_page_cursor
from toren.server.errors import json_error

log = logging.getLogger(__name__)
ONE_PART = ("the form has exactly one part, named 'file', holding the file (its filename is "
            "the file's name), e.g. curl -F file=@report.pdf")
#: Bytes read from the request per piece while spooling an upload.
CHUNK_BYTES = 256 * 1024
#: Files per page of ``GET /files``: the default, and the most a ``limit`` may ask for.
DEFAULT_PAGE = 100
MAX_PAGE = 1000


class UploadRate:
    """How many uploads each caller (an API key's id; ``""`` without keys) may start: a
    bucket of ``per_minute`` uploads per caller, refilled at ``per_minute`` a minute, so a
    caller may send a burst of that many and then that many a minute. Per server process."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # caller -> (uploads left, when)

    def take(self, caller: str) -> float:
        """``0`` when ``caller`` may start an upload now (and counts it), else the seconds
        until it may."""
        now = self._clock()
        left, then = self._buckets.get(caller, (float(self.per_minute), now))
        left = min(float(self.per_minute), left + (now - then) * self.per_minute / 60)
        if left >= 1:
            self._buckets[caller] = (left - 1, now)
            return 0.0
        self._buckets[caller] = (left, now)
        return (1 - left) * 60 / self.per_minute


UPLOAD_RATE = web.AppKey("upload_rate", UploadRate)


def routes(app: web.Application) -> None:
    app[UPLOAD_RATE] = UploadRate(app[RUNTIME].settings.max_uploads_per_minute)
    app.router.add_post("/files", upload_file)
    app.router.add_get("/files", list_files)
    app.router.add_get("/files/{file_id}", get_file)
    app.router.add_get("/files/{file_id}/content", file_content)
    app.router.add_delete("/files/{file_id}", delete_file)


async def upload_file(request: web.Request) -> web.Response:
    """``multipart/form-data`` with one part named ``file`` (its filename is the file's name).

    The body is spooled to a temporary file a piece at a time, then copied to the store a
    piece at a time: an upload costs a few chunks of memory however large it is. Reading
    stops at ``TOREN_MAX_FILE_BYTES`` + 1 bytes with ``413``; each piece must arrive within
    ``TOREN_BODY_TIMEOUT`` seconds. Past the caller's ``TOREN_MAX_UPLOADS_PER_MINUTE``:
    ``429`` with ``Retry-After``; past the deployment's ``TOREN_MAX_TOTAL_FILE_BYTES``:
    ``507``; either before the body is read.
    """
    runtime = request.app[RUNTIME]
    key = request.get(API_KEY)
    wait_s = request.app[UPLOAD_RATE].take(key.id if key is not None else "")
    if wait_s:
        return too_many_uploads(request.app[UPLOAD_RATE].per_minute, key is not None, wait_s)
    if not request.content_type.startswith("multipart/"):
        return json_error(415, "invalid_body", "send the file as multipart/form-data with a "
                                               "part named 'file', e.g. curl -F file=@report.pdf")
    await runtime.files.check_room("the upload")  # 507 before the body is read
    limit = max_file_bytes()
    timeout_s = runtime.settings.body_timeout_s
    try:
        reader = await request.multipart()
        part = await asyncio.wait_for(reader.next(), timeout_s)
        if not isinstance(part, BodyPartReader) or part.name != "file":
            return json_error(400, "invalid_body", ONE_PART)
        # percent-encoded by some clients (aiohttp's); directories are dropped by the check
        name = unquote(part.filename or "") or "upload"
        async with UploadSpool(name, limit) as spool:
            while chunk := await asyncio.wait_for(part.read_chunk(CHUNK_BYTES), timeout_s):
                await spool.write(chunk)
            if await asyncio.wait_for(reader.next(), timeout_s) is not None:
                return json_error(400, "invalid_body", ONE_PART)
            upload = await spool.check()
            stored = await runtime.files.add(
                upload, uploaded_by=f"api key {request_actor(request).label}" if key else "http")
    except FileTooLarge as exc:
        # the rest of the body is not read: close the connection rather than drain it
        response = json_error(413, exc.code, exc.message)
        response.force_close()
        return response
    except TimeoutError:
        response = json_error(408, "request_timeout", "the upload stalled for more than "
                                                      f"{timeout_s:g} seconds (TOREN_BODY_TIMEOUT)")
        response.force_close()
        return response
    except (ValueError, HttpProcessingError) as exc:  # a malformed multipart body
        return json_error(400, "invalid_body", "the multipart body cannot be read: "
                                               f"{type(exc).__name__}")
    except ConnectionResetError:  # the client went away mid-body: nothing was stored
        log.info("an upload to POST /files ended with its connection, unfinished")
        return json_error(400, "invalid_body", "the connection closed before the upload ended")
    return web.json_response(stored.to_json(), status=201)


def too_many_uploads(per_minute: int, keyed: bool, wait_s: float) -> web.Response:
    whose = "this API key" if keyed else "this server (it has no API keys)"
    retry_after = max(1, math.ceil(wait_s))
    response = json_error(
        429, "too_many_uploads",
        f"{whose} may start {per_minute} uploads a minute (TOREN_MAX_UPLOADS_PER_MINUTE) and "
        f"has started them; try again in {retry_after} s")
    response.headers["Retry-After"] = str(retry_after)
    return response


async def list_files(request: web.Request) -> web.Response:
    """A page of files, newest first: ``limit`` (1 to ``MAX_PAGE``, default 100) and
    ``cursor`` (the ``next_cursor`` of the previous page; ``null`` on the last page)."""
    query = request.query
    try:
        limit = int(query.get("limit", str(DEFAULT_PAGE)))
    except ValueError:
        return json_error(400, "invalid_limit", "limit must be an integer")
    if not 1 <= limit <= MAX_PAGE:
        return json_error(400, "invalid_limit", f"limit must be between 1 and {MAX_PAGE}")
    after = decode_page_cursor(query.get("cursor"))
    if after is not None and parse_file_id(after[1]) is None:
        raise InvalidCursor("the page cursor is malformed: pass back the next_cursor that "
                            "Toren returned")
    page = await request.app[RUNTIME].files.page(limit=limit, before=after)
    next_cursor = encode_page_cursor(*page.after) if page.after else None
    return web.json_response({"files": [stored.to_json() for stored in page.items],
                              "next_cursor": next_cursor})


async def get_file(request: web.Request) -> web.Response:
    stored = await request.app[RUNTIME].files.get(request.match_info["file_id"])
    if stored is None:
        raise no_such_file(request.match_info["file_id"])
    return web.json_response(stored.to_json())


async def delete_file(request: web.Request) -> web.Response:
    stored = await request.app[RUNTIME].files.delete(request.match_info["file_id"])
    if stored is None:
        raise no_such_file(request.match_info["file_id"])
    return web.json_response({"id": stored.id, "deleted": True})


#: Headers of every answer of ``GET /files/{id}/content``: the browser must not guess another
#: type than the stored one, run anything the file holds (an HTML or SVG upload is a page of
#: this origin otherwise), or let another site embed it.
CONTENT_HEADERS = {"X-Content-Type-Options": "nosniff",
                   "Content-Security-Policy": "sandbox; default-src 'none'",
                   "Cross-Origin-Resource-Policy": "same-origin",
                   "Cache-Control": "private, no-cache"}
#: ``If-None-Match`` values longer than this are not looked into (no file's ETag is).
MAX_IF_NONE_MATCH = 4096


async def file_content(request: web.Request) -> web.StreamResponse:
    """The stored bytes with the stored (sniffed) content type, for the console to show an
    image or a PDF and for anyone to download a file.

    Images (PNG, JPEG, GIF, WebP) and PDFs are ``inline``; every other type is an
    ``attachment`` (a browser saves it, never renders it), with the stored name (RFC 6266).
    ``ETag`` is the content's SHA-256: ``If-None-Match`` with it answers ``304``. The body is
    written in pieces of ``CHUNK_BYTES``.
    """
    files = request.app[RUNTIME].files
    file_id = request.match_info["file_id"]
    stored = await files.get(file_id)
    if stored is None:
        raise no_such_file(file_id)
    etag = f'"{stored.sha256}"'
    headers = CONTENT_HEADERS | {"ETag": etag,
                                 "Content-Disposition": content_disposition(
                                     stored.name, stored.content_type)}
    if etag_matches(request.headers.getall("If-None-Match", []), stored.sha256):
        return web.Response(status=304, headers=headers)
    found = await files.read(stored.id)
    if found is None:  # deleted since it was looked up
        raise no_such_file(file_id)
    data = found[1]
    response = web.StreamResponse(status=200, headers=headers)
    response.content_type = stored.content_type
    response.content_length = len(data)
    await response.prepare(request)
    if request.method != "HEAD":
        for start in range(0, len(data), CHUNK_BYTES):
            await response.write(data[start:start + CHUNK_BYTES])
    await response.write_eof()
    return response


def no_such_file(file_id: str) -> FileNotFound:
    """The 404 for ``file_id`` (of any form: it comes from the URL), quoted at most 80
    characters long."""
    shown = repr(file_id)
    return FileNotFound(f"no file has the id {shown if len(shown) <= 80 else shown[:77] + '...'}")


def etag_matches(values: list[str], sha256: str) -> bool:
    """Whether an ``If-None-Match`` (its header lines) names the ETag ``"<sha256>"``: ``*``,
    or the tag in a comma-separated list, weak (``W/``) or strong (RFC 9110 compares weakly
    here)."""
    for value in values:
        if len(value) > MAX_IF_NONE_MATCH:
            continue
        for tag in value.split(","):
            tag = tag.strip()
            if tag == "*" or tag.removeprefix("W/") == f'"{sha256}"':
                return True
    return False


def content_disposition(name: str, content_type: str) -> str:
    """``inline`` for what a browser may show (images, PDF), ``attachment`` for the rest, with
    the name as RFC 6266 has it: an ASCII fallback in ``filename`` (letters, digits and a few
    harmless marks; anything else, quotes, ``;``, ``=`` and ``*`` among them, replaced by
    ``_``, so not even a careless parser finds a second parameter in it) and the name itself
    in ``filename*`` (UTF-8, percent-encoded): no name can add a header or a parameter."""
    kind = "inline" if content_type in SHOWABLE_TYPES else "attachment"
    fallback = "".join(ch if ch.isascii() and (ch.isalnum() or ch in _NAME_MARKS) else "_"
                       for ch in name)
    encoded = quote(name, safe="")
    return f"{kind}; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"


#: What a file name's ASCII fallback keeps besides letters and digits.
_NAME_MARKS = frozenset(" .,_-+()[]@#&!~")
