"""`toren chat` as a real process: a durable session in the terminal, locally and against a
remote deployment (TOREN_URL), resumed with its transcript replayed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.test_http_api import TOOLS, call
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(240)
RESUME = re.compile(r"Resume it with: \S*toren chat (\S+) .*--session (\S+)")


def test_chat_locally_then_resume_with_the_transcript_replayed(toren_cli, database_url: str,
                                                               tmp_path: Path) -> None:
    crews = tmp_path / "crews"
    write_agent_dir(crews, "crew", tools_py=TOOLS)
    write_agent_dir(crews, "other")
    env = {"DATABASE_URL": database_url}
    first = toren_cli("chat", "crew", "--dir", str(crews), env=env,
                      input="postgres\n/exit\n")
    assert first.returncode == 0, first.stderr
    assert "agent> Here is what I found for 'postgres'" in first.stdout
    assert "facts about postgres" in first.stdout
    agent, session = RESUME.search(first.stderr).groups()  # type: ignore[union-attr]
    assert agent == "crew"

    # the resume line works: the transcript comes back, then the conversation goes on
    second = toren_cli("chat", "crew", "--session", session, "--dir", str(crews), env=env,
                       input="and sqlite?\n")  # end of input leaves, like Ctrl-D
    assert second.returncode == 0, second.stderr
    assert "Resuming session" in second.stderr and "1 turn(s) so far" in second.stderr
    replayed, _, new = second.stdout.partition("you> and sqlite?")
    assert "you> postgres" in replayed and "facts about postgres" in replayed
    assert "Here is what I found for 'and sqlite?'" in new
    assert RESUME.search(second.stderr)

    third = toren_cli("chat", "crew", "--session", session, "--dir", str(crews), "--json",
                      env=env, input="/close\n")
    assert third.returncode == 0, third.stderr
    lines = [json.loads(line) for line in third.stdout.splitlines()]
    assert [e["text"] for e in lines[0]["transcript"] if e["role"] == "user"] == [
        "postgres", "and sqlite?"]
    assert lines[-1] == {"session": session, "status": "completed", "resume": None}
    assert any(line.get("type") == "TaskFinished" for line in lines)

    ended = toren_cli("chat", "crew", "--session", session, "--dir", str(crews), env=env,
                      input="hello?\n")
    assert ended.returncode == 0 and "has ended (completed)" in ended.stderr
    wrong = toren_cli("chat", "other", "--session", session, "--dir", str(crews), env=env,
                      input="")
    assert wrong.returncode == 1
    assert f"a session with 'crew', not 'other'; run `toren chat crew --session {session}`" in (
        " ".join(wrong.stderr.split()))


def test_chat_against_a_remote_deployment(toren_cli, start_toren, database_url: str,
                                          tmp_path: Path) -> None:
    crews = tmp_path / "crews"
    write_agent_dir(crews, "crew", tools_py=TOOLS)
    write_agent_dir(crews, "other")
    dev = start_toren("dev", "--dir", str(crews), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url})
    url = dev.next_json()["url"]
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    # no agent directory and no database here: everything goes through the API
    remote = {"TOREN_URL": url, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    first = toren_cli("chat", "crew", env=remote, cwd=empty, input="postgres\n/exit\n")
    assert first.returncode == 0, first.stderr
    assert "facts about postgres" in first.stdout
    _agent, session = RESUME.search(first.stderr).groups()  # type: ignore[union-attr]
    transcript = call(f"{url}/sessions/{session}")[1]["transcript"]
    assert [e["role"] for e in transcript] == ["user", "assistant", "tool", "assistant"]

    second = toren_cli("chat", "crew", "--session", session, env=remote, cwd=empty,
                       input="and sqlite?\n/exit\n")
    assert second.returncode == 0, second.stderr
    assert "you> postgres" in second.stdout and "found for 'and sqlite?'" in second.stdout
    assert call(f"{url}/sessions/{session}")[1]["turns"] == 2

    wrong = toren_cli("chat", "other", "--session", session, env=remote, cwd=empty, input="")
    assert wrong.returncode == 1
    assert f"toren chat crew --session {session}" in wrong.stderr
    missing = toren_cli("chat", "ghost", env=remote, cwd=empty, input="")
    assert missing.returncode == 1 and "no agent named 'ghost'" in missing.stderr


def test_a_message_the_agents_policies_reject_is_not_sent_and_the_chat_goes_on(
        toren_cli, database_url: str, tmp_path: Path) -> None:
    crews = tmp_path / "crews"
    write_agent_dir(crews, "crew", tools_py=TOOLS, policies=[
        {"name": "testplugin", "settings": {"reject_input": "password"}}])
    done = toren_cli("chat", "crew", "--dir", str(crews),
                     env={"DATABASE_URL": database_url, "TOREN_LOAD_PLUGINS": "testplugin"},
                     input="my password is 1234\npostgres\n/exit\n")
    assert done.returncode == 0, done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert ("Not sent: policy testplugin rejected the message to session" in said
            and "the input mentions 'password'" in said)
    assert "agent> Here is what I found for 'postgres'" in done.stdout
    assert "found for 'my password" not in done.stdout
