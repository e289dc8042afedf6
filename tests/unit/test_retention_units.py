"""Retention's pure parts: ages, the archive format (round trip, truncation, unknown versions),
the settings, agent.yaml's retention:, and the file backend's refusals."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from toren.config import Settings
from toren.core.events import Event
from toren.core.retention import (
    ArchiveFormatError,
    archive_key,
    archive_summary,
    decode_archive,
    encode_archive,
    parse_age,
)
from toren.core.runs import RunRecord
from toren.errors import AgentDefinitionError, ArchiveUnavailable, ConfigError
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
    manifests = [{"scope": "workspace", "seq": 1, "entries": {"a.txt": "ab12"}}]
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
    assert await archive.get(location) == b"data"
    assert not list((tmp_path / "a").rglob("*.tmp"))
    for key in ("../escape", "/etc/passwd", "crew/../../x"):
        with pytest.raises(ArchiveUnavailable, match="leaves the archive directory"):
            await archive.put(key, b"x")
    with pytest.raises(ArchiveUnavailable, match="cannot read"):
        await archive.get((tmp_path / "a" / "gone").as_uri())
    with pytest.raises(ArchiveUnavailable, match="not in a file archive"):
        await archive.get("s3://bucket/key")
    for url in ("file://host/dir", "file:relative"):
        with pytest.raises(ConfigError, match="file:///absolute/dir"):
            FileArchive(url, Settings())
