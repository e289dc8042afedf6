"""`toren chat`'s /attach as a real process driven on stdin: files queued for the next message
are uploaded and sent with it (a message may be files alone), /attach lists the queue and
/detach drops it, the transcript shows which files a message had, locally and against a
deployment (TOREN_URL); a bad path or an unknown id is said and the chat goes on."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import TorenCli
from tests.e2e.test_attach_run import SHOWN, files
from tests.e2e.test_http_api import call

pytestmark = pytest.mark.timeout(240)
RESUME = re.compile(r"Resume it with: \S*toren chat (\S+) .*--session (\S+)")


def test_attach_locally_then_the_transcript_shows_the_files(toren_cli: TorenCli,
                                                            database_url: str,
                                                            tmp_path: Path) -> None:
    made = files(tmp_path)
    env = {"DATABASE_URL": database_url}
    crews = str(tmp_path / "crews")
    script = "\n".join([
        "/attach",  # nothing queued yet
        f"/attach {made['chart']} {made['notes']}",
        "/attach",  # lists both
        "what is this?",
        f"/attach {made['report']}",
        "",  # Enter alone: the PDF by itself
        f"/attach {made['chart']}",
        "/detach",
        "no files this time",
        "/exit"]) + "\n"
    first = toren_cli("chat", "looker", "--dir", crews, env=env, input=script)
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert "No file is attached to your next message. /attach PATH adds one." in out
    listing = out.split("you> /attach\n")[2]  # the second /attach alone
    assert f"📎 {made['chart']}" in listing and f"📎 {made['notes']}" in listing
    turns = out.split("agent> ")
    assert len(turns) == 4, out
    # turn 1: the text and two files; the image was shown, the note listed for read_document
    assert SHOWN.search(turns[0]) and "notes.md: text/markdown" in turns[0]
    assert "- chart.png (image/png, 64x48 px): " in turns[1].split("you>")[0]
    assert "- notes.md (text/markdown" in turns[1]
    # turn 2: files alone
    assert "You said: Attached files (read them with read_document" in turns[2]
    assert "- report.pdf (application/pdf): " in turns[2].split("you>")[0]
    # turn 3: /detach dropped the queued chart
    assert "No file is attached to your next message now." in turns[2]
    assert "You said: no files this time" in turns[3] and "I was shown" not in turns[3]
    _agent, session = RESUME.search(first.stderr).groups()  # type: ignore[union-attr]

    resumed = toren_cli("chat", "looker", "--session", session, "--dir", crews, env=env,
                        input="")
    assert resumed.returncode == 0, resumed.stderr
    replayed = resumed.stdout.split("you> ")
    assert SHOWN.search(replayed[1])  # the first message's image, under it
    assert "📎 report.pdf (application/pdf, 1 page(s)" in replayed[2]
    assert "📎" not in replayed[3]

    as_json = toren_cli("chat", "looker", "--session", session, "--dir", crews, "--json",
                        env=env, input="")
    transcript = json.loads(as_json.stdout.splitlines()[0])["transcript"]
    users = [entry for entry in transcript if entry["role"] == "user"]
    assert [[a["name"] for a in entry.get("attachments", [])] for entry in users] == [
        ["chart.png"], ["report.pdf"], []]


def test_bad_attachments_are_said_and_the_chat_goes_on(toren_cli: TorenCli, database_url: str,
                                                       tmp_path: Path) -> None:
    made = files(tmp_path)
    unknown = "00000000-0000-0000-0000-000000000000"
    script = "\n".join([
        f"/attach {tmp_path / 'absent.png'}",
        f"/attach {tmp_path}",
        f"/attach {unknown}",
        "look at this",  # the unknown id: not sent, still queued
        "/attach",
        "/detach",
        f"/attach {made['chart']}",
        "and this?",
        "/exit"]) + "\n"
    result = toren_cli("chat", "looker", "--dir", str(tmp_path / "crews"),
                       env={"DATABASE_URL": database_url}, input=script)
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "Not attached: " + str(tmp_path / "absent.png") + ": not a file: nothing is there" in out
    assert "Not attached: " + str(tmp_path) + ": not a file but a directory" in out
    assert f"Not sent: no file has the id '{unknown}'" in out
    assert f"📎 file id {unknown}" in out  # still queued after the refusal
    assert out.count("agent> ") == 1 and SHOWN.search(result.stdout)
    assert "You said: and this?" in out and "You said: look at this" not in out


def test_attach_against_a_deployment(toren_cli: TorenCli, start_toren, database_url: str,
                                     tmp_path: Path) -> None:
    made = files(tmp_path)
    dev = start_toren("dev", "--dir", str(tmp_path / "crews"), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url})
    url = dev.next_json()["url"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    remote = {"TOREN_URL": url, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    script = f"/attach {made['chart']}\n/attach {made['report']}\nwhat are these?\n/exit\n"
    result = toren_cli("chat", "looker", env=remote, cwd=elsewhere, input=script)
    assert result.returncode == 0, result.stderr
    assert SHOWN.search(result.stdout)
    assert "- report.pdf (application/pdf): " in result.stdout
    _agent, session = RESUME.search(result.stderr).groups()  # type: ignore[union-attr]
    transcript = call(f"{url}/sessions/{session}")[1]["transcript"]
    [user] = [entry for entry in transcript if entry["role"] == "user"]
    assert [a["name"] for a in user["attachments"]] == ["chart.png", "report.pdf"]
    assert user["attachments"][0]["width"] == 64
