"""`toren files add|list|show|rm` in real subprocesses against real Postgres, with bad files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

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
