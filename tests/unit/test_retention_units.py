"""Retention's pure parts: ages, the archive format (round trip, truncation, unknown versions),
the settings, agent.yaml's retention:, and the file backend's refusals."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import os
import socket
import stat
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from toren.config import Settings
from toren.core.events import Event
from toren.core.retention import (
    ArchiveFormatError,
    archive_key,
    archive_summary,
    check_tool_manifests,
    decode_archive,
    encode_archive,
    encode_archive_object,
    parse_age,
    workspace_path_problem,
)
from toren.core.runs import RunRecord
from toren.errors import AgentDefinitionError, ArchiveMismatch, ArchiveUnavailable, ConfigError
from toren.host.file_archive import FileArchive
from toren.host.retention import effective_retention
from toren.seams.archive import archive_scheme
from toren.testing import write_agent_dir

AT = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
RECORD = RunRecord(id="6f1c8f8e-1d0e-4b43-9a55-3f0d2d0a8b11", agent="crew", status="completed",
                   input={"q": "ü ☃"}, output="done", stop_reason="end_turn",
                   created_at=AT, updated_at=AT, finished_at=AT, parent_agent="boss",
                   parent_run_id="0d1c8f8e-1d0e-4b43-9a55-3f0d2d0a8b11", parent_task="main",
                   child_kind="peer", depth=1)
EVENTS = [
    Event(RECORD.id, "run", 1, "RunCreated", {"input": {"q": "ü ☃"}}, AT),
    Event(RECORD.id, "task:main", 1, "ModelCallCompleted",
          {"usage": {"input_tokens": 10, "output_tokens": 5}, "cost_usd": 0.25,
           "big": 2**63 - 1, "float": 0.1 + 0.2, "nested": [None, True, {"a": []}]}, AT),
    Event(RECORD.id, "task:main", 2, "ToolCallCompleted", {"output": "x" * 10_000}, AT),
]

MANIFEST = {"scope": "sandbox:main", "seq": 0, "parent_seq": None, "step": 1, "epoch": 1,
            "call_id": "c1", "full_state": True, "total_bytes": 2, "removed": [],
            "created_at": AT.isoformat(),
            "entries": {"src": ["d"], "src/a.txt": ["f", "ab" * 32, 2, False],
                        "link": ["l", "/etc"]}}


@pytest.mark.parametrize(("text", "seconds"), [
    ("30d", 30 * 86400), ("12h", 43200), ("2w", 1209600), ("90m", 5400), ("45s", 45),
    (" 7D ", 7 * 86400), ("never", None)])
def test_ages(text: str, seconds: float | None) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "0d", "-1d", "30", "d", "1.5d", "3y", "30 d", "1e3d",
                                  "99999999d", "forever"])
def test_bad_ages_say_what_an_age_looks_like(text: str) -> None:
    with pytest.raises(ValueError, match="such as 30d"):
        parse_age(text)


def test_an_archive_round_trips_every_value() -> None:
    manifests = [MANIFEST]
    data = encode_archive(RECORD, EVENTS, manifests)
    assert data == encode_archive(RECORD, EVENTS, manifests)  # same run, same bytes
    back = decode_archive(data, {"archive": {"location": "x"}})
    assert back.events == EVENTS
    assert back.record.to_json() == RECORD.to_json()
    assert back.record.extra == {"archive": {"location": "x"}}
    assert back.tool_manifests == manifests
    assert len(data) < len(json.dumps([e.to_json() for e in EVENTS]))  # compressed


def test_a_truncated_or_foreign_archive_is_refused() -> None:
    data = encode_archive(RECORD, EVENTS)
    lines = gzip.decompress(data).decode().splitlines()
    cases = {
        "truncated (no end line)": "\n".join(lines[:-1]),
        "does not start with the run": "\n".join(lines[1:]),
        "counts 3": "\n".join([*lines[:2], lines[-1]]),
        "format 99": "\n".join([lines[0].replace('"format":1', '"format":99'), *lines[1:]]),
    }
    for reason, text in cases.items():
        with pytest.raises(ArchiveFormatError, match=reason.split(" (")[0]):
            decode_archive(gzip.compress(text.encode()))
    for junk in (b"", b"not gzip", data[: len(data) // 2]):
        with pytest.raises(ArchiveFormatError):
            decode_archive(junk)


def test_keys_and_summaries() -> None:
    assert archive_key(RECORD) == f"crew/2026/03/{RECORD.id}.jsonl.gz"
    assert archive_summary(EVENTS) == {"events": 3, "model_calls": 1, "tool_calls": 1,
                                       "input_tokens": 10, "output_tokens": 5,
                                       "cost_usd": 0.25}


def test_settings() -> None:
    settings = Settings.from_env({"TOREN_ARCHIVE": "s3://b/p", "TOREN_RETENTION": "14d",
                                  "TOREN_ARCHIVE_INTERVAL": "60", "TOREN_ARCHIVE_BATCH": "50"})
    assert (settings.archive_url, settings.default_retention_s, settings.archive_interval_s,
            settings.archive_batch) == ("s3://b/p", 14 * 86400, 60.0, 50)
    defaults = Settings.from_env({})
    assert (defaults.archive_url, defaults.default_retention_s) == (None, None)
    assert Settings.from_env({"TOREN_RETENTION": "never"}).default_retention_s is None
    for name, value in (("TOREN_RETENTION", "soon"), ("TOREN_ARCHIVE_BATCH", "0"),
                        ("TOREN_ARCHIVE_INTERVAL", "-5")):
        with pytest.raises(ConfigError, match=name):
            Settings.from_env({name: value})
    with pytest.raises(ConfigError, match="is not a URL"):
        archive_scheme("/srv/archive")


def test_agent_yaml_retention_and_the_fleet_default(tmp_path: Path) -> None:
    from toren.agents import load_agent

    keep = load_agent(write_agent_dir(tmp_path, "keep", retention="never"))
    month = load_agent(write_agent_dir(tmp_path, "month", retention="30d"))
    plain = load_agent(write_agent_dir(tmp_path, "plain"))
    assert effective_retention(keep, 86400.0) is None
    assert effective_retention(month, 86400.0) == 30 * 86400
    assert effective_retention(plain, 86400.0) == 86400.0
    assert effective_retention(plain, None) is None
    assert month.to_json()["retention"] == "30d"
    for bad in ("30 days", 30, "0d"):
        with pytest.raises(AgentDefinitionError, match="retention"):
            load_agent(write_agent_dir(tmp_path, "bad", retention=bad))


async def test_the_file_backend_stays_in_its_directory(tmp_path: Path) -> None:
    archive = FileArchive((tmp_path / "a").as_uri(), Settings())
    location = await archive.put("crew/2026/03/x.jsonl.gz", b"data")
    assert await archive.get(location, max_bytes=4) == b"data"
    assert not list((tmp_path / "a").rglob("*.tmp"))
    for key in ("../escape", "/etc/passwd", "crew/../../x"):
        with pytest.raises(ArchiveUnavailable, match="leaves the archive directory"):
            await archive.put(key, b"x")
    with pytest.raises(ArchiveUnavailable, match="cannot read"):
        await archive.get((tmp_path / "a" / "gone").as_uri(), max_bytes=4)
    with pytest.raises(ArchiveUnavailable, match="not in a file archive"):
        await archive.get("s3://bucket/key", max_bytes=4)
    for url in ("file://host/dir", "file:relative"):
        with pytest.raises(ConfigError, match="file:///absolute/dir"):
            FileArchive(url, Settings())


def _lines(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gzip.decompress(data).split(b"\n") if line]


def _gzip_lines(lines: list[Any]) -> bytes:
    return gzip.compress("".join(json.dumps(line) + "\n" for line in lines).encode())


def test_a_line_separator_inside_a_string_round_trips() -> None:
    """json.dumps leaves U+2028, U+2029 and U+0085 unescaped; a reader that split lines with
    str.splitlines cut such an event in two, and the run could never be archived."""
    events = [Event(RECORD.id, "run", 1, "RunCreated", {"input": "a\u2028b\u2029c\x85d"}, AT)]
    assert decode_archive(encode_archive(RECORD, events)).events == events


def test_the_digest_binds_the_bytes() -> None:
    encoded = encode_archive_object(RECORD, EVENTS, [MANIFEST])
    assert encoded.digest.sha256 == hashlib.sha256(encoded.data).hexdigest()
    assert encoded.digest.object_bytes == len(encoded.data)
    assert encoded.digest.content_bytes == len(gzip.decompress(encoded.data))
    assert encoded.data == encode_archive(RECORD, EVENTS, [MANIFEST])


def test_decompression_stops_at_the_cap() -> None:
    data = encode_archive(RECORD, EVENTS)
    size = len(gzip.decompress(data))
    assert decode_archive(data, max_content_bytes=size).events == EVENTS
    with pytest.raises(ArchiveFormatError, match=f"decompresses to more than {size - 1} bytes"):
        decode_archive(data, max_content_bytes=size - 1)
    # a valid first line, then a GiB of newlines: refused after the cap, not after the GiB
    first = gzip.decompress(data).split(b"\n")[0] + b"\n"
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = deflate.compress(first) + b"".join(deflate.compress(b"\n" * (1 << 20))
                                              for _ in range(64)) + deflate.flush()
    with pytest.raises(ArchiveFormatError, match="decompresses to more than 1048576 bytes"):
        decode_archive(bomb, max_content_bytes=1 << 20)


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda ls: ls.insert(-1, {"line": "sql", "q": "DROP"}), "unknown kind 'sql'"),
    (lambda ls: ls.append({"line": "event"}), "goes on after its end line"),
    (lambda ls: ls.insert(2, dict(ls[1])), "twice"),
    (lambda ls: ls[1].update(seq=0), "seq outside"),
    (lambda ls: ls[1].update(seq=2**40), "seq outside"),
    (lambda ls: ls[1].update(seq=True), "wrong type"),
    (lambda ls: ls[1].update(stream=7), "wrong type"),
    (lambda ls: ls[1].update(type="Run\u0000Created"), "NUL"),
    (lambda ls: ls[1].update(created_at="yesterday"), "malformed created_at"),
    (lambda ls: ls[1].update(extra=1), "unknown fields"),
    (lambda ls: ls[1].pop("data"), "lacks"),
    (lambda ls: ls[0]["run"].update(id="../x"), "malformed"),
    (lambda ls: ls[0]["run"].update(id=RECORD.id.upper()), "malformed"),
    (lambda ls: ls[0]["run"].update(status="running"), "only finished runs"),
    (lambda ls: ls[0]["run"].update(depth=-1), "out of range"),
    (lambda ls: ls[0]["run"].update(admin=True), "unknown fields"),
    (lambda ls: ls[0]["run"].pop("agent"), "lacks"),
    (lambda ls: ls[0].update(run=[1]), "not a JSON object"),
    (lambda ls: ls.insert(1, [1, 2]), "not a JSON object"),
])
def test_lines_of_the_wrong_shape_are_refused(edit: Any, reason: str) -> None:
    lines = _lines(encode_archive(RECORD, EVENTS))
    edit(lines)
    with pytest.raises(ArchiveFormatError, match=reason):
        decode_archive(_gzip_lines(lines))


def test_what_is_not_one_whole_gzip_json_lines_stream_is_refused() -> None:
    data = encode_archive(RECORD, EVENTS)
    with pytest.raises(ArchiveFormatError, match="data after the end"):
        decode_archive(data + data)
    with pytest.raises(ArchiveFormatError, match="not JSON"):
        decode_archive(gzip.compress(gzip.decompress(data).replace(b"0.25", b"NaN", 1)))
    with pytest.raises(ArchiveFormatError, match="not JSON"):
        decode_archive(gzip.compress(b"[" * 100_000 + b"\n"))
    with pytest.raises(ArchiveFormatError, match="not JSON"):
        decode_archive(gzip.compress(b"\xff\xfe\n"))
    with pytest.raises(ArchiveFormatError, match="truncated"):
        decode_archive(data[:-9])


def _manifest(seq: int, entries: dict[str, Any], *, parent: int | None = None,
              removed: list[str] | None = None) -> dict[str, Any]:
    return MANIFEST | {"seq": seq, "parent_seq": parent, "full_state": parent is None,
                       "entries": entries, "removed": removed or []}


def test_workspace_paths() -> None:
    for good in ("a", "a/b.txt", ".hidden", "...", "a b/c\\d", "ü/☃"):
        assert workspace_path_problem(good) is None, good
    for bad in ("", "/a", "a/../b", "..", ".", "a/", "a//b", "a\x00", 7, None):
        assert workspace_path_problem(bad), bad


def test_legitimate_workspace_histories_pass() -> None:
    f = ["f", "ab" * 32, 2, False]
    check_tool_manifests([
        # a link replaced by a directory, a file beneath it; then a directory by a link after
        # its entries went; a branch from seq 1 (a crashed attempt's state) beside the chain
        _manifest(0, {"l": ["l", "../../etc"], "d": ["d"], "d/x": f}),
        _manifest(1, {"l": ["d"], "l/y": f}, parent=0),
        _manifest(2, {"d": ["l", "/"]}, parent=1, removed=["d/x"]),
        _manifest(3, {"z": f}, parent=1),
        _manifest(4, {"l": ["d"], "d": ["d"], "d/x": f}, parent=2),
        _manifest(5, {"n": ["d"]}) | {"scope": "sandbox:other"},
    ])


def test_a_long_workspace_history_is_checked_in_linear_time() -> None:
    f = ["f", "ab" * 32, 2, False]
    tree = {f"d{n}/sub/file{m}.txt": f for n in range(100) for m in range(100)}
    history = [_manifest(0, tree)] + [
        _manifest(seq, {f"d{seq % 100}/sub/file{seq}.txt": f}, parent=seq - 1,
                  removed=[f"d{seq % 100}/sub/file{seq % 100}.txt"])
        for seq in range(1, 2001)]
    started = time.perf_counter()
    check_tool_manifests(history)
    assert time.perf_counter() - started < 20  # 10,000 entries, 2,000 changes: a blink


async def test_the_file_backend_reads_regular_files_only_and_at_most_the_cap(
        tmp_path: Path) -> None:
    """What stands at an object's path is not trusted: a symlink (or a loop of them), a FIFO
    nobody writes (the read must not wait for a writer), a directory, a socket, a device, a
    file longer than the cap: each refused with archive_mismatch, at once."""
    archive = FileArchive((tmp_path / "a").as_uri(), Settings())
    location = await archive.put("crew/2026/03/x.jsonl.gz", b"data")
    path = tmp_path / "a" / "crew" / "2026" / "03" / "x.jsonl.gz"
    with pytest.raises(ArchiveMismatch, match="holds more than 3 bytes"):
        await archive.get(location, max_bytes=3)
    (tmp_path / "target").write_bytes(b"data")
    listener = socket.socket(socket.AF_UNIX)
    makers = {
        "symlink": lambda: path.symlink_to(tmp_path / "target"),
        "loop": lambda: (path.symlink_to(tmp_path / "other"),
                         (tmp_path / "other").symlink_to(path)),
        "fifo": lambda: os.mkfifo(path),
        "directory": lambda: path.mkdir(),
        "socket": lambda: listener.bind(str(path)),
        "device": lambda: os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5)),  # /dev/zero
    }
    with listener:
        for name, make in makers.items():
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            path.unlink(missing_ok=True)
            (tmp_path / "other").unlink(missing_ok=True)
            try:
                make()
            except PermissionError:
                assert name == "device"  # no CAP_MKNOD here
                continue
            with pytest.raises(ArchiveMismatch, match=r"symbolic link|not a regular file"):
                await asyncio.wait_for(archive.get(location, max_bytes=1 << 20), 10)
