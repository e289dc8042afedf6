"""`toren run AGENT INPUT --file PATH` as a real process: the files are uploaded, listed in the
input and the images and PDFs shown to the model, on this machine's database and against a
deployment (TOREN_URL); an uploaded file's id is attached as it is; a missing file, a
directory, a misnamed file, one too large and an unknown id are clear errors."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import TorenCli
from tests.e2e.test_http_api import call
from toren.testing import pdf_bytes, png_bytes, write_agent_dir

pytestmark = pytest.mark.timeout(240)
SHOWN = re.compile(r"📎 chart\.png \(image/png, 64x48 px, \d+ bytes\) shown to the model")


def files(tmp_path: Path) -> dict[str, Path]:
    """A PNG, a PDF and a Markdown note, and the agent ``looker`` under ``crews``."""
    write_agent_dir(tmp_path / "crews", "looker")
    made = {"chart": tmp_path / "chart.png", "report": tmp_path / "report.pdf",
            "notes": tmp_path / "notes.md"}
    made["chart"].write_bytes(png_bytes(64, 48, (200, 30, 30)))
    made["report"].write_bytes(pdf_bytes("Revenue grew 12%."))
    made["notes"].write_text("# Notes\n\nQ3 was good.\n")
    return made


def test_run_with_files_on_this_machines_database(toren_cli: TorenCli, database_url: str,
                                                  tmp_path: Path) -> None:
    made = files(tmp_path)
    env = {"DATABASE_URL": database_url}
    shown = toren_cli("run", "looker", "What do these show?", "--file", str(made["chart"]),
                      "-f", str(made["report"]), "--file", str(made["notes"]),
                      "--dir", str(tmp_path / "crews"), env=env)
    assert shown.returncode == 0, shown.stderr
    # progress on stderr: each upload and what it became
    for name, kind in (("chart.png", "image/png"), ("report.pdf", "application/pdf"),
                       ("notes.md", "text/markdown")):
        assert f"uploading {tmp_path / name}" in shown.stderr
        assert re.search(rf"{re.escape(name)}: {kind}, [\d,]+ bytes, file id [0-9a-f-]{{36}}",
                         shown.stderr)
    assert "only images and PDFs are shown to the model" in shown.stderr  # the note
    # the model saw the image and the PDF (the offline model says what it received) ...
    assert SHOWN.search(shown.stdout)
    assert "📎 report.pdf (application/pdf, 1 page(s)" in shown.stdout
    received = shown.stdout.split("I was shown:")[1].split(" step 1 ")[0]
    assert "- chart.png (image/png, 64x48 px): " in received
    assert f"{made['chart'].stat().st_size:,} bytes received" in received
    assert "- report.pdf (application/pdf): " in received and "notes.md" not in received
    # ... and the input lists all three for read_document
    assert "- notes.md (text/markdown, " in shown.stdout

    as_json = toren_cli("run", "looker", "Again", "--file", str(made["chart"]), "--json",
                        "--dir", str(tmp_path / "crews"), env=env)
    assert as_json.returncode == 0, as_json.stderr
    assert as_json.stderr == ""  # --json: nothing but the document
    run = json.loads(as_json.stdout)
    plain = json.loads(toren_cli("run", "looker", "No files", "--json",
                                 "--dir", str(tmp_path / "crews"), env=env).stdout)
    assert set(run) == set(plain) | {"files"}  # the run's shape, plus the files
    [stored] = run["files"]
    assert (stored["name"], stored["content_type"]) == ("chart.png", "image/png")
    assert stored["uploaded_by"].startswith("cli")
    assert run["status"] == "completed" and stored["id"] in run["input"]

    # an uploaded file's id is attached as it is: nothing is uploaded again
    before = json.loads(toren_cli("files", "list", "--json", env=env).stdout)["files"]
    again = toren_cli("run", "looker", "Once more", "--file", stored["id"], "--json",
                      "--dir", str(tmp_path / "crews"), env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["files"] == [stored]
    assert "I was shown:" in json.loads(again.stdout)["output"]
    after = json.loads(toren_cli("files", "list", "--json", env=env).stdout)["files"]
    assert len(after) == len(before)


def test_bad_files_are_clear_errors(toren_cli: TorenCli, database_url: str,
                                    tmp_path: Path) -> None:
    made = files(tmp_path)
    env = {"DATABASE_URL": database_url}
    fake = tmp_path / "photo.png"
    fake.write_text("not an image")
    unknown = "00000000-0000-0000-0000-000000000000"
    cases = [
        (tmp_path / "absent.png", {}, "bad_file", "absent.png: not a file: nothing is there"),
        (tmp_path / "crews", {}, "bad_file", "crews: not a file but a directory; give the "
                                             "files in it one by one"),
        (fake, {}, "bad_file", "photo.png: the name says PNG but the content is text"),
        (made["chart"], {"TOREN_MAX_FILE_BYTES": "100"}, "file_too_large",
         "uploads may be at most 100 bytes (TOREN_MAX_FILE_BYTES)"),
        (Path(unknown), {}, "file_not_found", f"no file has the id '{unknown}'"),
    ]
    for path, extra, code, message in cases:
        result = toren_cli("run", "looker", "hi", "--file", str(made["chart"]), "--file",
                           str(path), "--json", "--dir", str(tmp_path / "crews"),
                           env=env | extra)
        assert result.returncode == 1, (path, result.stdout, result.stderr)
        error = json.loads(result.stdout)["error"]
        assert error["code"] == code and message in " ".join(error["message"].split()), error
        human = toren_cli("run", "looker", "hi", "--file", str(path),
                          "--dir", str(tmp_path / "crews"), env=env | extra)
        assert human.returncode == 1 and message in " ".join(human.stderr.split())
    # no run was started by any of them
    assert json.loads(toren_cli("jobs", "list", "--json", env=env).stdout)["runs"] == []


def test_run_with_files_against_a_deployment(toren_cli: TorenCli, start_toren,
                                             database_url: str, tmp_path: Path) -> None:
    made = files(tmp_path)
    dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url})
    url = dev.next_json()["url"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # no agent directory and no database here: the files and the run go through the API
    remote = {"TOREN_URL": url, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    shown = toren_cli("run", "looker", "What is this?", "--file", str(made["chart"]),
                      "--file", str(made["notes"]), env=remote, cwd=elsewhere)
    assert shown.returncode == 0, shown.stderr
    assert f"on {url}" in shown.stderr
    assert SHOWN.search(shown.stdout) and "I was shown:" in shown.stdout
    assert "completed (end_turn)" in shown.stdout

    as_json = toren_cli("run", "looker", "Again", "--file", str(made["report"]), "--json",
                        "--url", url, env={"DATABASE_URL": remote["DATABASE_URL"]},
                        cwd=elsewhere)
    assert as_json.returncode == 0, as_json.stderr
    run = json.loads(as_json.stdout)
    assert run["status"] == "completed" and "why" not in run and "totals" not in run
    [stored] = run["files"]
    assert stored["uploaded_by"] == "http"
    with urllib.request.urlopen(f"{url}/files/{stored['id']}/content", timeout=30) as answer:
        assert answer.read() == made["report"].read_bytes()
    assert call(f"{url}/runs/{run['id']}")[1]["input"] == run["input"]

    queued = toren_cli("run", "looker", "Later", "--file", stored["id"], "--no-follow",
                       env=remote, cwd=elsewhere)
    assert queued.returncode == 0, queued.stderr
    assert re.fullmatch(r"[0-9a-f-]{36}\n", queued.stdout)

    refused = toren_cli("run", "looker", "hi", "--file", str(tmp_path / "absent.png"),
                        env=remote, cwd=elsewhere)
    assert refused.returncode == 1
    assert "absent.png: not a file: nothing is there" in " ".join(refused.stderr.split())
