"""Hostile requests for files' content (``GET /files/{id}/content``) against a real `toren dev`:
ids that are SQL, 5,000 digits, emoji, NUL or a path; If-None-Match headers that are long, many,
or garbage; a Range; other methods; pages on other sites and rebound hosts; and hostile files
(HTML, SVG, a PNG with a page after it, names made to forge a header or a parameter). Each gets
a JSON 4xx or the stored bytes, never rendered as anything but what they were stored as; the
server goes on serving."""

from __future__ import annotations

import http.client
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from tests.badinput.test_uploads import dev_server, upload_now
from tests.e2e.test_http_api import call, conforms
from toren.testing import png_bytes

pytestmark = pytest.mark.timeout(180)
ZERO = "00000000-0000-0000-0000-000000000000"
SANDBOX = "sandbox; default-src 'none'"


def raw_get(url: str, path: str, headers: dict[str, str] | None = None,
            method: str = "GET") -> tuple[int, bytes, http.client.HTTPMessage]:
    """``method path`` sent as it is (no client rewriting the path or adding headers)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        connection.putrequest(method, path, skip_host="Host" in (headers or {}),
                              skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read(), response.headers
    finally:
        connection.close()


def error_of(status: int, body: bytes) -> str:
    import json

    found = json.loads(body)
    conforms("Error", found)
    assert len(found["error"]["message"]) < 300, found
    return str(found["error"]["code"])


@pytest.fixture
def served(start_toren: Any, database_url: str, tmp_path: Path) -> dict[str, Any]:
    """`toren dev` (no keys, on loopback) with a PNG uploaded: its URL, the PNG's record and
    bytes."""
    url, dev = dev_server(start_toren, database_url, tmp_path)
    data = png_bytes(16, 16, (1, 2, 3))
    status, stored, _ = upload_now(url, "dot.png", data)
    assert status == 201, stored
    return {"url": url, "dev": dev, "png": stored, "data": data}


IDS = ["'%20OR%201=1%20--", ";DROP%20TABLE%20files", "9" * 5000, "%F0%9F%92%A5", "%00",
       "..%2F..%2Fruns", "..", "%2e%2e", ZERO, ZERO.upper().replace("0", "F"), "a" * 36,
       "00000000-0000-0000-0000-00000000000g"]


def test_hostile_ids_are_404s(served: dict[str, Any]) -> None:
    for file_id in IDS:
        status, body, headers = raw_get(served["url"], f"/files/{file_id}/content")
        assert status == 404, (file_id, body[:200])
        assert error_of(status, body) == "file_not_found", file_id
        assert headers["Content-Type"].startswith("application/json")
    # a path that only looks like another route: no route there, no file read
    status, body, _ = raw_get(served["url"], "/files/../runs/content")
    assert status == 404


def test_hostile_if_none_match_headers_never_fail_the_request(served: dict[str, Any]) -> None:
    url, png, data = served["url"], served["png"], served["data"]
    path = f"/files/{png['id']}/content"
    etag = f'"{png["sha256"]}"'
    not_matching = [
        "x" * 6000,  # longer than any ETag list worth reading: not looked into
        ", ".join(f'"{n:064x}"' for n in range(60)),  # many tags, none this one
        '"', "W/", 'W/"', ",,,,", "*x", '"' + png["sha256"],  # broken tags
        png["sha256"],  # unquoted: not an entity tag
        "é".encode().decode("latin-1"),  # bytes that are not ASCII
        " " * 100,
    ]
    for value in not_matching:
        status, body, headers = raw_get(url, path, {"If-None-Match": value})
        assert (status, body) == (200, data), value[:60]
        assert headers["ETag"] == etag
    # the tag among many others, or weak, still matches
    many = ", ".join([f'"{n:064x}"' for n in range(40)] + [f"W/{etag}"])
    for value in (many, f" {etag} ", "*"):
        status, body, _ = raw_get(url, path, {"If-None-Match": value})
        assert (status, body) == (304, b""), value[:60]
    # a Range is not served: the whole content, every time
    status, body, _ = raw_get(url, path, {"Range": "bytes=0-3"})
    assert (status, body) == (200, data)
    status, body, _ = raw_get(url, path, {"Range": "bytes=-999999999999999999999"})
    assert (status, body) == (200, data)


def test_other_methods_pages_elsewhere_and_rebound_hosts_are_refused(
        served: dict[str, Any]) -> None:
    url, png = served["url"], served["png"]
    path = f"/files/{png['id']}/content"
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, body, _ = raw_get(url, path, method=method)
        assert status == 405, method
        assert error_of(status, body) == "method_not_allowed"
    refusals = [({"Sec-Fetch-Site": "cross-site"}, "cross_site_request"),
                ({"Sec-Fetch-Site": "same-site"}, "cross_site_request"),
                ({"Origin": "https://attacker.example"}, "cross_site_request"),
                ({"Origin": "null"}, "cross_site_request"),
                ({"Host": "attacker.example"}, "host_not_allowed")]
    for headers, code in refusals:
        status, body, _ = raw_get(url, path, headers)
        assert status == 403, headers
        assert error_of(status, body) == code
    # its own page (the console) and scripts are served
    port = urlsplit(url).port
    for headers in ({"Sec-Fetch-Site": "same-origin"}, {"Origin": f"http://127.0.0.1:{port}"},
                    {}):
        assert raw_get(url, path, headers)[0] == 200, headers


def post_named(url: str, name: str, data: bytes, status: int = 201, *,
               raw: bool = False) -> dict[str, Any]:
    """Upload ``data`` as ``name``, percent-encoded in the part's header as clients send it
    (the server decodes it), or ``raw``: written byte for byte (clients refuse to put a line
    break in a part's header; a hostile one does not)."""
    import json

    boundary = "hostile-boundary-7f3a"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; ".encode()
            + b'filename="' + (name if raw else quote(name, safe="")).encode() + b'"\r\n'
            + b"Content-Type: application/octet-stream\r\n\r\n" + data
            + f"\r\n--{boundary}--\r\n".encode())
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        connection.request("POST", "/files", body, {
            "Content-Type": f"multipart/form-data; boundary={boundary}"})
        response = connection.getresponse()
        answer = response.read()
    finally:
        connection.close()
    assert response.status == status, answer
    return dict(json.loads(answer))


HOSTILE_FILES = [
    # (name, content, the type it is stored as, disposition)
    ("page.html", b"<!doctype html><script>fetch('/runs')</script>", "text/html", "attachment"),
    ("logo.svg", b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
     "text/plain", "attachment"),
    ("data.json", b'{"a": "<script>alert(1)</script>"}', "application/json", "attachment"),
    # a PNG with a page after it is a PNG: shown as an image, never sniffed as HTML
    ("trick.png", png_bytes(2, 2) + b"<html><script>alert(1)</script></html>", "image/png",
     "inline"),
    ("evil.bin", b"\x00\x01<script>alert(1)</script>", "application/octet-stream",
     "attachment"),
]


def test_hostile_files_are_served_as_stored_in_a_sandbox(served: dict[str, Any]) -> None:
    url = served["url"]
    for name, data, content_type, kind in HOSTILE_FILES:
        stored = post_named(url, name, data)
        assert stored["content_type"] == content_type, name
        status, body, headers = raw_get(url, f"/files/{stored['id']}/content")
        assert (status, body) == (200, data), name
        assert headers["Content-Type"] == content_type
        assert headers["Content-Disposition"].startswith(f"{kind}; filename=")
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Content-Security-Policy"] == SANDBOX
    # names made to forge a header or a parameter: a line break ends the part's header (the
    # form is refused), other control characters are dropped when the file is stored, and
    # quotes, semicolons and the rest are escaped in the header
    refused = post_named(url, "a\r\nSet-Cookie: stolen=1.txt", b"hello\n", status=400, raw=True)
    assert refused["error"]["code"] == "invalid_body"
    for name in ("a\tSet-Cookie: stolen=1.txt", 'x.txt"; filename="evil.html',
                 "x.txt; filename*=UTF-8''evil.html", "\u202etxt.exe"):
        stored = post_named(url, name, b"hello\n")
        status, _, headers = raw_get(url, f"/files/{stored['id']}/content")
        assert status == 200
        assert "Set-Cookie" not in headers
        value = headers["Content-Disposition"]
        assert value.isascii() and "\r" not in value and "\n" not in value
        assert value.count(";") == 2 and value.count('"') == 2, value
        assert value.count("filename*=") == 1 and "evil.html" not in value.split(
            "filename*=")[1].replace("%20", " ").split("''", 1)[0]
    # still serving, and nothing went wrong inside
    assert call(f"{url}/healthz")[0] == 200
    assert "unhandled error" not in served["dev"].stderr
