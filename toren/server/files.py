"""Files over HTTP: upload (multipart, streamed up to the size cap), list, show, delete."""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import unquote

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from toren.files import FileNotFound, FileTooLarge, check_upload, max_file_bytes
from toren.server.auth import API_KEY
from toren.server.context import RUNTIME
from toren.server.errors import json_error

log = logging.getLogger(__name__)
ONE_PART = ("the form has exactly one part, named 'file', holding the file (its filename is "
            "the file's name), e.g. curl -F file=@report.pdf")
#: Bytes read from the request per chunk while streaming an upload.
CHUNK_BYTES = 256 * 1024


def routes(app: web.Application) -> None:
    app.router.add_post("/files", upload_file)
    app.router.add_get("/files", list_files)
    app.router.add_get("/files/{file_id}", get_file)
    app.router.add_delete("/files/{file_id}", delete_file)


async def upload_file(request: web.Request) -> web.Response:
    """``multipart/form-data`` with one part named ``file`` (its filename is the file's name).

    The body is streamed: reading stops at ``TOREN_MAX_FILE_BYTES`` + 1 bytes with ``413``, so
    a 2 GB upload costs the cap in memory, not 2 GB. Each chunk must arrive within
    ``TOREN_BODY_TIMEOUT`` seconds.
    """
    runtime = request.app[RUNTIME]
    if not request.content_type.startswith("multipart/"):
        return json_error(415, "invalid_body", "send the file as multipart/form-data with a "
                                               "part named 'file', e.g. curl -F file=@report.pdf")
    limit = max_file_bytes()
    timeout_s = runtime.settings.body_timeout_s
    try:
        reader = await request.multipart()
        part = await asyncio.wait_for(reader.next(), timeout_s)
        if not isinstance(part, BodyPartReader) or part.name != "file":
            return json_error(400, "invalid_body", ONE_PART)
        # percent-encoded by some clients (aiohttp's); directories are dropped by check_upload
        name = unquote(part.filename or "")
        data = bytearray()
        while chunk := await asyncio.wait_for(part.read_chunk(CHUNK_BYTES), timeout_s):
            data += chunk
            if len(data) > limit:
                raise FileTooLarge(f"{name or 'the upload'} is larger than {limit:,} bytes, the "
                                   "most an upload may be (TOREN_MAX_FILE_BYTES)")
        if await asyncio.wait_for(reader.next(), timeout_s) is not None:
            return json_error(400, "invalid_body", ONE_PART)
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
    upload = check_upload(name or "upload", bytes(data), max_bytes=limit)
    key = request.get(API_KEY)
    stored = await runtime.store.add_file(
        name=upload.name, content_type=upload.content_type, data=upload.data,
        sha256=upload.sha256, uploaded_by=f"api key {key.name}" if key else "http")
    return web.json_response(stored.to_json(), status=201)


async def list_files(request: web.Request) -> web.Response:
    files = await request.app[RUNTIME].store.list_files()
    return web.json_response({"files": [stored.to_json() for stored in files]})


async def get_file(request: web.Request) -> web.Response:
    stored = await request.app[RUNTIME].store.get_file(request.match_info["file_id"])
    if stored is None:
        raise FileNotFound(f"no file has the id {request.match_info['file_id']!r}")
    return web.json_response(stored.to_json())


async def delete_file(request: web.Request) -> web.Response:
    stored = await request.app[RUNTIME].store.delete_file(request.match_info["file_id"])
    if stored is None:
        raise FileNotFound(f"no file has the id {request.match_info['file_id']!r}")
    return web.json_response({"id": stored.id, "deleted": True})
