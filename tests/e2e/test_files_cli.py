"""`toren files add|list|show|rm` in real subprocesses against real Postgres, with bad files,
a large file and paging."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

from tests.badinput.test_uploads import read_back
from tests.conftest import TorenCli


def test_add_list_show_rm_with_json(toren_cli: TorenCli, database_url: str,
                                    tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url}
    notes = tmp_path / "notes.md"
    notes.write_text("# Plan\n\nShip it.\n")
    added = toren_cli("files", "add", str(notes), "--json", env=env)
    assert added.returncode == 0, added.stderr
    stored = json.loads(added.stdout)
    assert (stored["name"], stored["content_type"]) == ("notes.md", "text/markdown")
    assert stored["sha256"] == hashlib.sha256(notes.read_bytes()).hexdigest()
    assert stored["uploaded_by"].startswith("cli")

    listed = json.loads(toren_cli("files", "list", "--json", env=env).stdout)
    assert [f["id"] for f in listed["files"]] == [stored["id"]]
    assert json.loads(toren_cli("files", "show", stored["id"], "--json", env=env).stdout) == stored
    human = toren_cli("files", "list", env=env)
    assert stored["id"] in human.stdout and "notes.md" in human.stdout

    removed = toren_cli("files", "rm", stored["id"], "--json", env=env)
    assert json.loads(removed.stdout) == {"id": stored["id"], "deleted": True}
    missing = toren_cli("files", "show", stored["id"], "--json", env=env)
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["error"]["code"] == "file_not_found"
    again = toren_cli("files", "rm", stored["id"], "--json", env=env)
    assert again.returncode == 1
    assert json.loads(again.stdout)["error"]["code"] == "file_not_found"

    # each change is in the audit trail, by the CLI's user (TOREN_ACTOR, else the OS user)
    audit = json.loads(toren_cli("audit", "--action", "file", "--json", env=env).stdout)
    assert [(e["action"], e["target"], e["outcome"], e["source"])
            for e in audit["entries"]] == [
        ("file.delete", stored["id"], "file_not_found", "cli"),
        ("file.delete", stored["id"], "ok", "cli"),
        ("file.upload", stored["id"], "ok", "cli")]
    assert audit["entries"][2]["details"] == {"name": "notes.md"}


def test_bad_files_are_refused_before_the_database_starts(toren_cli: TorenCli,
                                                          tmp_path: Path) -> None:
    fake_pdf = tmp_path / "report.pdf"
    fake_pdf.write_text("not a pdf")
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 2048)
    cases = [(fake_pdf, {}, "bad_file", "the name says PDF but the content is text"),
             (big, {"TOREN_MAX_FILE_BYTES": "1024"}, "file_too_large", "at most 1,024 bytes"),
             (tmp_path / "absent.txt", {}, "bad_file", "not a file"),
             (tmp_path, {}, "bad_file", "not a file")]
    for path, env, code, message in cases:
        result = toren_cli("files", "add", str(path), "--json", env=env)
        assert result.returncode == 1, path
        error = json.loads(result.stdout)["error"]
        assert error["code"] == code and message in error["message"], error
    assert not (tmp_path / "toren-home").exists()  # nothing was started


def test_a_large_file_is_added_in_pieces_and_list_pages(toren_cli: TorenCli, database_url: str,
                                                        tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url}
    big = tmp_path / "big.log"
    with big.open("wb") as handle:  # 2.5 MiB: stored as chunks
        for number in range(40_000):
            handle.write(b"line %07d of a long log file, padded out to sixty-six bytes ....\n"
                         % number)
    added = toren_cli("files", "add", str(big), "--json", env=env)
    assert added.returncode == 0, added.stderr
    stored = json.loads(added.stdout)
    assert stored["size_bytes"] == big.stat().st_size
    assert asyncio.run(read_back(database_url, stored["id"])) == hashlib.sha256(
        big.read_bytes()).hexdigest()
    for number in range(4):
        small = tmp_path / f"note{number}.md"
        small.write_text(f"# Note {number}\n")
        assert toren_cli("files", "add", str(small), "--json", env=env).returncode == 0

    first = json.loads(toren_cli("files", "list", "--limit", "2", "--json", env=env).stdout)
    assert [f["name"] for f in first["files"]] == ["note3.md", "note2.md"]
    second = json.loads(toren_cli("files", "list", "--limit", "2", "--cursor",
                                  first["next_cursor"], "--json", env=env).stdout)
    assert [f["name"] for f in second["files"]] == ["note1.md", "note0.md"]
    last = json.loads(toren_cli("files", "list", "--limit", "2", "--cursor",
                                second["next_cursor"], "--json", env=env).stdout)
    assert [f["name"] for f in last["files"]] == ["big.log"] and last["next_cursor"] is None
    every = json.loads(toren_cli("files", "list", "--all", "--limit", "2", "--json",
                                 env=env).stdout)
    assert len(every["files"]) == 5 and every["next_cursor"] is None
    human = toren_cli("files", "list", "--limit", "2", env=env)
    assert f"--cursor {first['next_cursor']}" in human.stdout

    for bad in (["--cursor", "garbage!"], ["--limit", "0"], ["--limit", "1001"]):
        result = toren_cli("files", "list", *bad, "--json", env=env)
        assert result.returncode != 0, bad
    refused = toren_cli("files", "list", "--cursor", "garbage!", "--json", env=env)
    assert json.loads(refused.stdout)["error"]["code"] == "invalid_cursor"
