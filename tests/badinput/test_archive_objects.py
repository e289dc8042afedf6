"""Hostile archive objects (issue 35, item 5): a retention archive's objects are files and S3
objects anyone with access to the directory or the bucket can change. A gzip bomb, an object
that claims another run, an edited output, tool manifests that would write outside their
workspace, and a symlink, FIFO or directory at an object's path: each read and restore is
refused with a JSON 409 ``archive_mismatch`` and writes nothing, and the server stays up with
flat memory. Real Postgres, real files, a real server (in-process for the statuses, a
subprocess for its memory)."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
import struct
import time
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp
import boto3
import psycopg
import pytest

from tests.e2e.test_http_api import call, conforms
from toren.core.retention import decode_archive, encode_archive
from toren.errors import ArchiveMismatch
from toren.host.runtime import Runtime
from toren.server.app import create_app
from toren.testing import serve_on_free_port, write_agent_dir

pytestmark = pytest.mark.timeout(300)

TOOLS = '''
from toren import tool

@tool(idempotent=True)
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"
'''
SCHEMA = "agent_crew"
SHA = "ab" * 32


def sql(database_url: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def gzip_bomb(first_line: bytes, newlines: int) -> bytes:
    """A gzip object of ``first_line`` then ``newlines`` newline bytes (a multiple of 1 MiB),
    made in milliseconds: after a full flush, deflate encodes each MiB of newlines to the same
    bytes, so one block is repeated. The trailer's CRC is left zero: a reader that stops at its
    cap never gets that far, and one that does not has run out of memory before."""
    step = 1 << 20
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    head = deflate.compress(first_line) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(b"\n" * step) + deflate.flush(zlib.Z_FULL_FLUSH)
    tail = deflate.flush(zlib.Z_FINISH)
    size = (len(first_line) + newlines) & 0xFFFFFFFF
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + head + block * (newlines // step)
            + tail + struct.pack("<II", 0, size))


def object_path(location: str) -> Path:
    return Path(unquote(urlsplit(location).path))


def rewrite(path: Path, edit: Callable[[list[dict[str, Any]]], None]) -> None:
    """Decompress the object at ``path``, let ``edit`` change its JSON lines, compress it
    again (a well-formed object: only what it says differs)."""
    lines = [json.loads(line) for line in gzip.decompress(path.read_bytes()).split(b"\n")
             if line]
    edit(lines)
    text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    path.write_bytes(gzip.compress(text.encode(), mtime=0))


def forget_digest(database_url: str, run_id: str, *, keep_size: bool = True) -> None:
    """Make an index row look as a Toren before digests wrote it (agent migration 0015)."""
    summary = "summary" if keep_size else "summary - 'bytes'"
    sql(database_url, f"UPDATE {SCHEMA}.archived_runs SET sha256 = NULL, object_bytes = NULL, "
                      f"content_bytes = NULL, summary = {summary} WHERE id = %s", (run_id,))


def resize_legacy(database_url: str, run_id: str, path: Path) -> None:
    """A legacy index row whose recorded size is the object's (as if it had been archived so)."""
    sql(database_url, f"UPDATE {SCHEMA}.archived_runs SET summary = jsonb_set(summary, "
                      "'{bytes}', to_jsonb(%s::bigint)) WHERE id = %s",
        (path.stat().st_size, run_id))


def stored(database_url: str, run_id: str) -> tuple[int, int, int, int]:
    """(hot rows, hot events, tool manifests, index rows) of a run."""
    row = sql(database_url, f"""
        SELECT (SELECT count(*) FROM {SCHEMA}.runs WHERE id = %(id)s),
               (SELECT count(*) FROM {SCHEMA}.events WHERE run_id = %(id)s),
               (SELECT count(*) FROM {SCHEMA}.tool_manifests WHERE run_id = %(id)s),
               (SELECT count(*) FROM {SCHEMA}.archived_runs WHERE id = %(id)s)""",
              {"id": run_id})[0]
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def manifest(seq: int, entries: dict[str, Any], *, parent: int | None = None,
             removed: list[str] | None = None) -> dict[str, Any]:
    return {"scope": "sandbox:main", "seq": seq, "parent_seq": parent, "step": seq + 1,
            "epoch": 1, "call_id": f"c{seq}", "full_state": parent is None,
            "entries": entries, "removed": removed or [], "total_bytes": 2,
            "created_at": "2026-03-04T05:06:07+00:00"}


def add_manifests(database_url: str, run_id: str, manifests: list[dict[str, Any]]) -> None:
    for m in manifests:
        sql(database_url, f"INSERT INTO {SCHEMA}.tool_manifests (run_id, scope, seq, parent_seq, "
                          "step, epoch, call_id, full_state, entries, removed, total_bytes, "
                          "created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (run_id, m["scope"], m["seq"], m["parent_seq"], m["step"], m["epoch"], m["call_id"],
             m["full_state"], json.dumps(m["entries"]), json.dumps(m["removed"]),
             m["total_bytes"], m["created_at"]))


@pytest.fixture
async def served(make_runtime: Any, tmp_path: Path, database_url: str
                 ) -> AsyncIterator[tuple[str, Runtime, list[str]]]:
    """An in-process server over a runtime whose two finished runs of ``crew`` are archived
    to a directory (the first with a legitimate sandbox workspace: a link, a directory and a
    file, then a change)."""
    crew = write_agent_dir(tmp_path, "crew", tools_py=TOOLS, retention="30d")
    runtime = await make_runtime(dirs=[crew], archive_url=(tmp_path / "archive").as_uri(),
                                 archive_max_bytes=8 << 20)
    ids = [await runtime.start_run("crew", f"topic {n}") for n in range(2)]
    for run_id in ids:
        assert (await runtime.wait_for_run(run_id, timeout_s=60)).status == "completed"
    add_manifests(database_url, ids[0], LEGIT_MANIFESTS)
    sql(database_url, f"UPDATE {SCHEMA}.runs SET finished_at = now() - interval '40 days'")
    assert (await runtime.archive_runs())["agents"]["crew"]["archived"] == 2
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=False))
    yield url, runtime, ids
    await runner.cleanup()


#: A workspace as the sandbox records it: a symlink that leaves it (harmless: nothing is
#: written through it), a directory with a file, then a change that replaces the link by a
#: directory with a file beneath it (legitimate: the link is gone in that state).
LEGIT_MANIFESTS = [
    manifest(0, {"out": ["l", "/etc"], "src": ["d"], "src/a.txt": ["f", SHA, 2, False]}),
    manifest(1, {"out": ["d"], "out/b.txt": ["f", SHA, 2, True]}, parent=0),
]


async def get(url: str, path: str, method: str = "GET") -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.request(
            method, url + path, json={} if method == "POST" else None,
            timeout=aiohttp.ClientTimeout(total=60)) as answer:
        return answer.status, await answer.json()


async def assert_refused(url: str, run_id: str, *, restore: bool = True,
                         match: str = "") -> str:
    """Every read of the run's events, and a restore, is a JSON 409 archive_mismatch."""
    message = ""
    for path in (f"/runs/{run_id}/events", f"/runs/{run_id}/receipt", f"/runs/{run_id}"):
        status, body = await get(url, path)
        assert (status, body["error"]["code"]) == (409, "archive_mismatch"), (path, body)
        assert match in body["error"]["message"], body
        message = body["error"]["message"]
    if restore:
        status, body = await get(url, f"/runs/{run_id}/restore", "POST")
        assert (status, body["error"]["code"]) == (409, "archive_mismatch"), body
    return message


async def test_a_legitimate_archive_and_restore_round_trip_with_tool_manifests(
        served: tuple[str, Runtime, list[str]], database_url: str) -> None:
    url, runtime, (first, _second) = served
    record = await runtime.get_run(first)
    assert len(record.extra["archive"]["sha256"]) == 64
    status, listed = await get(url, "/archived-runs")
    conforms("ArchivedRunList", listed)
    assert {run["archive"]["sha256"] for run in listed["runs"]} == {
        (await runtime.get_run(run_id)).extra["archive"]["sha256"] for run_id in (first, _second)}
    status, events = await get(url, f"/runs/{first}/events")
    assert status == 200 and events["events"][0]["type"] == "RunCreated"
    status, restored = await get(url, f"/runs/{first}/restore", "POST")
    assert status == 200 and restored["id"] == first
    assert stored(database_url, first)[2:] == (2, 0)
    rows = sql(database_url, f"SELECT entries FROM {SCHEMA}.tool_manifests WHERE run_id = %s "
                             "ORDER BY seq", (first,))
    assert [row[0] for row in rows] == [m["entries"] for m in LEGIT_MANIFESTS]
    assert (await get(url, f"/runs/{first}/events"))[1]["events"] == events["events"]


async def test_a_gzip_bomb_is_refused_by_its_digest(served: tuple[str, Runtime, list[str]],
                                                    database_url: str) -> None:
    url, runtime, (first, _second) = served
    path = object_path((await runtime.get_run(first)).extra["archive"]["location"])
    line = gzip.decompress(path.read_bytes()).split(b"\n")[0] + b"\n"
    path.write_bytes(gzip_bomb(line, 3 << 30))  # 3 GiB of newlines in 3 MB
    message = await assert_refused(url, first, match="more than")
    assert "bytes" in message
    assert stored(database_url, first) == (0, 0, 0, 1)


async def test_a_gzip_bomb_stops_at_the_cap_without_a_digest(
        served: tuple[str, Runtime, list[str]], database_url: str) -> None:
    """A run archived before digests, whose index row recorded no size either: the read
    stops at TOREN_ARCHIVE_MAX_MB decompressed (8 MiB in ``served``), not at the end of
    3 GiB."""
    url, runtime, (first, _second) = served
    path = object_path((await runtime.get_run(first)).extra["archive"]["location"])
    line = gzip.decompress(path.read_bytes()).split(b"\n")[0] + b"\n"
    path.write_bytes(gzip_bomb(line, 3 << 30))
    forget_digest(database_url, first, keep_size=False)
    await assert_refused(url, first, match=f"decompresses to more than {8 << 20} bytes")
    assert stored(database_url, first) == (0, 0, 0, 1)


@pytest.mark.parametrize("legacy", [False, True], ids=["digest", "no-digest"])
async def test_an_object_that_claims_another_run_overwrites_nothing(
        served: tuple[str, Runtime, list[str]], database_url: str, legacy: bool) -> None:
    url, runtime, (first, second) = served
    other_events = await runtime.events(second)
    other_index = sql(database_url, f"SELECT * FROM {SCHEMA}.archived_runs WHERE id = %s",
                      (second,))
    path = object_path((await runtime.get_run(first)).extra["archive"]["location"])

    def claim(lines: list[dict[str, Any]]) -> None:
        lines[0]["run"]["id"] = second

    rewrite(path, claim)
    if legacy:
        forget_digest(database_url, first)
        resize_legacy(database_url, first, path)
    message = await assert_refused(url, first)
    if legacy:
        assert f"holds run {second}" in message
    # the other run is as it was: still archived, same events, same index row
    assert stored(database_url, second) == (0, 0, 0, 1)
    assert await runtime.events(second) == other_events
    assert sql(database_url, f"SELECT * FROM {SCHEMA}.archived_runs WHERE id = %s",
               (second,)) == other_index
    assert stored(database_url, first) == (0, 0, 0, 1)


@pytest.mark.parametrize("legacy", [False, True], ids=["digest", "no-digest"])
async def test_an_edited_output_is_refused_on_read_and_restore(
        served: tuple[str, Runtime, list[str]], database_url: str, legacy: bool) -> None:
    url, runtime, (first, _second) = served
    path = object_path((await runtime.get_run(first)).extra["archive"]["location"])

    def forge(lines: list[dict[str, Any]]) -> None:
        lines[0]["run"]["output"] = "refund approved"

    rewrite(path, forge)
    if legacy:
        forget_digest(database_url, first)
        resize_legacy(database_url, first, path)
    message = await assert_refused(url, first)
    # (compressed again, the object is seldom the length recorded: then it is refused by its
    # length, before it is hashed)
    assert re.search("differs from the index's in output" if legacy else "SHA-256|more than",
                     message), message
    assert stored(database_url, first) == (0, 0, 0, 1)


async def test_an_edited_event_is_refused(
        served: tuple[str, Runtime, list[str]], database_url: str) -> None:
    url, runtime, (first, _second) = served
    path = object_path((await runtime.get_run(first)).extra["archive"]["location"])

    def forge(lines: list[dict[str, Any]]) -> None:
        for line in lines:
            if line.get("type") == "RunCompleted":
                line["data"]["output"] = "refund approved"

    rewrite(path, forge)
    message = await assert_refused(url, first)
    assert re.search("SHA-256|more than", message), message
    assert stored(database_url, first) == (0, 0, 0, 1)


async def test_one_byte_changed_is_refused_by_the_digest(
        served: tuple[str, Runtime, list[str]], database_url: str) -> None:
    url, runtime, (first, _second) = served
    path = object_path((await runtime.get_run(first)).extra["archive"]["location"])
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    message = await assert_refused(url, first, match="SHA-256")
    assert f"not the {len(data)} bytes of SHA-256" in message
    assert stored(database_url, first) == (0, 0, 0, 1)


#: Tool manifests that would write outside the workspace when the sandbox materialises them,
#: or that are not what the sandbox writes: (manifests, what the refusal says).
MANIFEST_ATTACKS = [
    ([manifest(0, {"../escape.txt": ["f", SHA, 2, False]})], "'..' component"),
    ([manifest(0, {"a/../../escape": ["d"]})], "'..' component"),
    ([manifest(0, {"/etc/cron.d/x": ["f", SHA, 2, False]})], "is absolute"),
    ([manifest(0, {"a\u0000b": ["d"]})], "NUL"),
    ([manifest(0, {"": ["d"]})], "empty"),
    ([manifest(0, {"a//b": ["d"]})], "'' component"),
    ([manifest(0, {"a/": ["d"]})], "'' component"),
    ([manifest(0, {"./a": ["d"]})], "'.' component"),
    ([manifest(0, {"ok": ["d"]}), manifest(1, {}, parent=0, removed=["../x"])], "'..' component"),
    # an entry beneath a symlink: the link would carry the write out of the workspace
    ([manifest(0, {"l": ["l", "/etc"], "l/cron.d/x": ["f", SHA, 2, False]})],
     "'l' is a symlink with entries beneath it"),
    # the same across two manifests: the link in one state, a file beneath it in the next
    ([manifest(0, {"l": ["l", "/etc"]}), manifest(1, {"l/passwd": ["f", SHA, 2, False]},
                                                   parent=0)],
     "beneath 'l', which is a symlink"),
    # a link put over a directory whose entries stay
    ([manifest(0, {"d": ["d"], "d/x": ["f", SHA, 2, False]}),
      manifest(1, {"d": ["l", "/etc"]}, parent=0)], "'d' is a symlink with entries beneath it"),
    ([manifest(0, {"f": ["f", SHA, 2, False], "f/x": ["d"]})], "'f' is a file with entries"),
    ([manifest(0, {"f/x": ["d"], "f": ["f", SHA, 2, False]})], "beneath 'f', which is a file"),
    ([manifest(0, {"x": ["p", "/dev/sda"]})], "not a file, symlink or directory"),
    ([manifest(0, {"x": ["f", "../../etc/passwd", 2, False]})], "not a file"),
    ([manifest(0, {"x": ["l", "a\u0000"]})], "not a file"),
    ([manifest(1, {"x": ["d"]}, parent=1)], "not an earlier manifest"),
    ([manifest(0, {"x": ["d"]}), manifest(1, {"y": ["d"]}, parent=7)], "not an earlier"),
    ([manifest(0, {"x": ["d"]}), manifest(0, {"y": ["d"]})], "repeat a seq"),
]


@pytest.mark.parametrize(("manifests", "reason"), MANIFEST_ATTACKS,
                         ids=[f"attack{n}" for n in range(len(MANIFEST_ATTACKS))])
async def test_tool_manifests_that_would_leave_the_workspace_are_refused_whole(
        served: tuple[str, Runtime, list[str]], database_url: str,
        manifests: list[dict[str, Any]], reason: str) -> None:
    """An object without a digest (archived before Toren recorded them), whose run and counts
    match the index, but whose tool manifests attack: refused, nothing written."""
    url, runtime, (_first, second) = served
    path = object_path((await runtime.get_run(second)).extra["archive"]["location"])
    data = decode_archive(path.read_bytes())
    path.write_bytes(encode_archive(data.record, data.events, manifests))
    forget_digest(database_url, second)
    resize_legacy(database_url, second, path)
    await assert_refused(url, second, match=reason)
    assert stored(database_url, second) == (0, 0, 0, 1)


async def test_a_run_whose_stored_manifests_attack_is_not_archived(
        make_runtime: Any, tmp_path: Path, database_url: str) -> None:
    """Manifests written straight into Postgres would make an object no read accepts: the
    pass leaves that run hot (readable) and archives the others."""
    crew = write_agent_dir(tmp_path, "crew", tools_py=TOOLS, retention="30d")
    runtime = await make_runtime(dirs=[crew], archive_url=(tmp_path / "archive").as_uri())
    bad, good = [await runtime.start_run("crew", f"topic {n}") for n in range(2)]
    for run_id in (bad, good):
        await runtime.wait_for_run(run_id, timeout_s=60)
    add_manifests(database_url, bad, [manifest(0, {"../x": ["d"]})])
    sql(database_url, f"UPDATE {SCHEMA}.runs SET finished_at = now() - interval '40 days'")
    report = await runtime.archive_runs()
    assert [run["id"] for run in report["runs"]] == [good]
    assert stored(database_url, bad)[:3] == (1, len(await runtime.events(bad)), 1)
    assert not list((tmp_path / "archive").rglob(f"{bad}*"))


@pytest.mark.parametrize("replacement", ["symlink", "fifo", "directory", "bigger"])
async def test_what_stands_at_an_objects_path_is_never_trusted(
        served: tuple[str, Runtime, list[str]], database_url: str, tmp_path: Path,
        replacement: str) -> None:
    """A symlink (to the other run's object: a valid archive), a FIFO nobody writes (the
    read must not wait for a writer), a directory, or a file longer than what was archived
    at the object's path: refused at once, and the API answers throughout."""
    url, runtime, (first, second) = served
    path = object_path((await runtime.get_run(first)).extra["archive"]["location"])
    other = object_path((await runtime.get_run(second)).extra["archive"]["location"])
    original = path.read_bytes()
    path.unlink()
    if replacement == "symlink":
        path.symlink_to(other)
    elif replacement == "fifo":
        os.mkfifo(path)
    elif replacement == "directory":
        path.mkdir()
    else:
        path.write_bytes(original + b"\0" * 1000)
    started = time.monotonic()
    reads = asyncio.gather(*(assert_refused(url, first, restore=False) for _ in range(3)))
    assert (await get(url, "/healthz"))[0] == 200
    message = (await reads)[0]
    assert time.monotonic() - started < 30
    assert {"symlink": "symbolic link", "fifo": "not a regular file",
            "directory": "not a regular file", "bigger": "more than"}[replacement] in message
    status, body = await get(url, f"/runs/{first}/restore", "POST")
    assert (status, body["error"]["code"]) == (409, "archive_mismatch")
    assert stored(database_url, first) == (0, 0, 0, 1)
    assert stored(database_url, second) == (0, 0, 0, 1)


async def test_a_run_archived_before_digests_still_reads_and_restores(
        served: tuple[str, Runtime, list[str]], database_url: str) -> None:
    """Unverified, as the guide says, but checked against its index row and read whole."""
    url, runtime, (first, _second) = served
    status, events = await get(url, f"/runs/{first}/events")
    forget_digest(database_url, first)
    record = await runtime.get_run(first)
    assert record.extra["archive"]["sha256"] is None
    assert (await get(url, f"/runs/{first}/events"))[1]["events"] == events["events"]
    status, restored = await get(url, f"/runs/{first}/restore", "POST")
    assert status == 200 and restored["id"] == first
    assert stored(database_url, first)[2:] == (2, 0)


async def test_values_postgres_refuses_roll_the_restore_back(
        served: tuple[str, Runtime, list[str]], database_url: str) -> None:
    """An unverified object whose events hold what the hot tables cannot store (a NUL in
    JSON text): the restore's one transaction rolls back, and the run stays archived."""
    url, runtime, (_first, second) = served
    path = object_path((await runtime.get_run(second)).extra["archive"]["location"])
    data = decode_archive(path.read_bytes())
    events = list(data.events)
    events[-1] = type(events[-1])(events[-1].run_id, events[-1].stream, events[-1].seq,
                                  events[-1].type, {"text": "a\u0000b"}, events[-1].created_at)
    path.write_bytes(encode_archive(data.record, events))
    forget_digest(database_url, second)
    resize_legacy(database_url, second, path)
    status, body = await get(url, f"/runs/{second}/restore", "POST")
    assert (status, body["error"]["code"]) == (409, "archive_mismatch"), body
    assert "stays archived" in body["error"]["message"]
    assert stored(database_url, second) == (0, 0, 0, 1)


async def test_an_s3_object_changed_in_the_bucket_is_refused(
        make_runtime: Any, tmp_path: Path, database_url: str, moto_endpoint: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"TOREN_S3_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    bucket = f"toren-{os.urandom(6).hex()}"
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    crew = write_agent_dir(tmp_path, "crew", tools_py=TOOLS, retention="30d")
    runtime = await make_runtime(dirs=[crew], archive_url=f"s3://{bucket}/toren")
    first, second = [await runtime.start_run("crew", f"topic {n}") for n in range(2)]
    for run_id in (first, second):
        await runtime.wait_for_run(run_id, timeout_s=60)
    sql(database_url, f"UPDATE {SCHEMA}.runs SET finished_at = now() - interval '40 days'")
    await runtime.archive_runs()
    keys = {run_id: urlsplit((await runtime.get_run(run_id)).extra["archive"]["location"])
            .path.lstrip("/") for run_id in (first, second)}
    own = s3.get_object(Bucket=bucket, Key=keys[first])["Body"].read()
    other = s3.get_object(Bucket=bucket, Key=keys[second])["Body"].read()
    s3.put_object(Bucket=bucket, Key=keys[first], Body=other)  # a valid object, of another run
    with pytest.raises(ArchiveMismatch, match=r"SHA-256|more than"):  # as its length falls
        await runtime.events(first)
    with pytest.raises(ArchiveMismatch):
        await runtime.restore_run(first)
    middle = len(own) // 2  # one byte changed, the length kept
    s3.put_object(Bucket=bucket, Key=keys[first],
                  Body=own[:middle] + bytes([own[middle] ^ 1]) + own[middle + 1:])
    with pytest.raises(ArchiveMismatch, match="SHA-256"):
        await runtime.events(first)
    with pytest.raises(ArchiveMismatch, match="SHA-256"):
        await runtime.restore_run(first)
    s3.put_object(Bucket=bucket, Key=keys[first], Body=gzip_bomb(b"{}\n", 1 << 30))
    with pytest.raises(ArchiveMismatch, match="more than"):
        await runtime.events(first)
    assert stored(database_url, first) == (0, 0, 0, 1)
    assert stored(database_url, second) == (0, 0, 0, 1)


def _peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.parametrize("legacy", [False, True], ids=["digest", "no-digest"])
def test_the_servers_memory_stays_flat_under_a_gzip_bomb(
        database_url: str, start_toren: Any, tmp_path: Path, legacy: bool) -> None:
    """The reproduction against `toren dev`: 3 GiB of newlines after a valid line in 3 MB.
    Without a digest the read stops at TOREN_ARCHIVE_MAX_MB (16 MiB here, with the compressed
    object let through: its index row recorded no size)."""
    write_agent_dir(tmp_path / "crews", "crew", tools_py=TOOLS)
    dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, "TOREN_RETENTION": "30d",
                           "TOREN_ARCHIVE": (tmp_path / "archive").as_uri(),
                           "TOREN_ARCHIVE_MAX_MB": "16"})
    url, pid = dev.next_json()["url"], dev.proc.pid
    status, created, _ = call(f"{url}/runs", "POST", {"agent": "crew", "input": "postgres"})
    assert status == 201
    run_id = created["id"]
    deadline = time.monotonic() + 60
    while call(f"{url}/runs/{run_id}")[1]["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    sql(database_url, "UPDATE agent_crew.runs SET finished_at = now() - interval '40 days'")
    assert call(f"{url}/archive", "POST", {})[1]["agents"]["crew"]["archived"] == 1
    assert call(f"{url}/runs/{run_id}/events")[0] == 200
    path = object_path(call(f"{url}/archived-runs")[1]["runs"][0]["archive"]["location"])
    line = gzip.decompress(path.read_bytes()).split(b"\n")[0] + b"\n"
    path.write_bytes(gzip_bomb(line, 3 << 30))
    if legacy:
        forget_digest(database_url, run_id, keep_size=False)
    before = _peak_rss_bytes(pid)
    for route in ("events", "receipt", "restore"):
        status, body, _ = call(f"{url}/runs/{run_id}/{route}",
                               "POST" if route == "restore" else "GET",
                               {} if route == "restore" else None, timeout_s=120)
        assert (status, body["error"]["code"]) == (409, "archive_mismatch"), body
    assert call(f"{url}/healthz")[0] == 200
    grown = _peak_rss_bytes(pid) - before
    assert grown < 200 * 1024 * 1024, f"the server's peak memory grew by {grown >> 20} MiB"




async def test_the_event_stream_of_a_changed_object_is_a_409_not_an_empty_200(
        served: tuple[str, Runtime, list[str]], database_url: str) -> None:
    """SSE (``Accept: text/event-stream``) reads and checks the object before the stream
    starts: a refusal is a JSON 409, not a 200 that ends with nothing; a good object streams."""
    url, runtime, (first, second) = served
    path = object_path((await runtime.get_run(first)).extra["archive"]["location"])
    path.write_bytes(path.read_bytes()[:-8] + b"\0" * 8)  # the gzip trailer zeroed
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/runs/{first}/events",
                            headers={"Accept": "text/event-stream"}) as answer:
            assert answer.status == 409
            assert (await answer.json())["error"]["code"] == "archive_mismatch"
        async with http.get(f"{url}/runs/{second}/events",
                            headers={"Accept": "text/event-stream"}) as answer:
            assert answer.status == 200
            body = (await answer.read()).decode()
    assert body.count("\nevent: ") == len(await runtime.events(second)) + 1  # and the end
    assert "event: end" in body


async def test_a_restore_whose_idempotency_key_was_reused_is_a_409_not_a_500(
        make_runtime: Any, tmp_path: Path, database_url: str) -> None:
    """Once a run is archived, a new run may take its idempotency key; restoring the old one
    then conflicts: 409 restore_conflict naming the key, and both runs stay as they were."""
    crew = write_agent_dir(tmp_path, "crew", tools_py=TOOLS, retention="30d")
    runtime = await make_runtime(dirs=[crew], archive_url=(tmp_path / "archive").as_uri())
    old = await runtime.start_run("crew", "first", idempotency_key="order-7")
    await runtime.wait_for_run(old, timeout_s=60)
    sql(database_url, f"UPDATE {SCHEMA}.runs SET finished_at = now() - interval '40 days'")
    await runtime.archive_runs()
    new = await runtime.start_run("crew", "second", idempotency_key="order-7")
    assert new != old
    await runtime.wait_for_run(new, timeout_s=60)
    new_events = await runtime.events(new)
    runner, url = await serve_on_free_port(create_app(runtime, require_keys=False))
    try:
        status, body = await get(url, f"/runs/{old}/restore", "POST")
    finally:
        await runner.cleanup()
    assert (status, body["error"]["code"]) == (409, "restore_conflict"), body
    assert "'order-7'" in body["error"]["message"]
    assert stored(database_url, old) == (0, 0, 0, 1)
    assert await runtime.events(new) == new_events
