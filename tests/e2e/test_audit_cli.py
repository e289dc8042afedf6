"""The audit trail from the CLI as a user runs it (real processes, real Postgres): commands that
change state on the database are recorded once as ``cli:<TOREN_ACTOR or OS user>``, a failed
one with its error's code, and ``toren audit`` reads them back with its filters."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

from tests.conftest import TorenCli, one_line
from toren.testing import write_agent_dir


def test_cli_commands_are_recorded_and_toren_audit_reads_them(
        toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    env = {"DATABASE_URL": database_url, "TOREN_ACTOR": "alice"}
    started = toren_cli("run", "crew", "hi", "--dir", str(crew), "--no-follow", "--json",
                        "--priority", "-3", env=env)
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["id"]
    assert toren_cli("jobs", "cancel", run_id, "--reason", "wrong input", env=env).returncode == 0
    created = json.loads(toren_cli("keys", "create", "ci", "--json", env=env).stdout)
    revoked = toren_cli("keys", "revoke", created["key"], env=env)  # the whole key, typed
    assert revoked.returncode == 0, revoked.stderr
    missing = toren_cli("keys", "revoke", "0123abcd", env=env)
    assert missing.returncode == 1
    # an actor left unset is the OS user
    unset = toren_cli("keys", "create", "bot", "--json", env={"DATABASE_URL": database_url})
    assert unset.returncode == 0

    shown = toren_cli("audit", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    entries = json.loads(shown.stdout)["entries"]
    assert [(e["action"], e["actor"]["name"], e["outcome"]) for e in entries] == [
        ("key.create", f"cli:{getpass.getuser()}", "ok"),
        ("key.revoke", "cli:alice", "key_not_found"),
        ("key.revoke", "cli:alice", "ok"),
        ("key.create", "cli:alice", "ok"),
        ("run.cancel", "cli:alice", "ok"),
        ("run.start", "cli:alice", "ok")]
    assert {e["source"] for e in entries} == {"cli"}
    assert {(e["actor"]["kind"], e["remote"]) for e in entries} == {("cli", None)}
    assert entries[5]["details"].get("priority") == -3  # run.start: the run's own priority
    revoke, create = entries[2], entries[3]
    assert revoke["target"] == create["target"] == created["id"]
    assert created["key"] not in shown.stdout  # a key typed on the command line is never kept
    assert (entries[4]["run_id"], entries[4]["agent"]) == (run_id, "crew")
    assert entries[4]["details"]["reason"] == "wrong input"
    assert (entries[5]["run_id"], entries[5]["agent"]) == (run_id, "crew")

    only = json.loads(toren_cli("audit", "--actor", "cli:alice", "--action", "key",
                                "--outcome", "ok", "--json", env=env).stdout)["entries"]
    assert [e["action"] for e in only] == ["key.revoke", "key.create"]
    assert json.loads(toren_cli("audit", "--run", run_id, "--limit", "1", "--json",
                                env=env).stdout)["entries"][0]["action"] == "run.cancel"
    table = toren_cli("audit", "--action", "run", env=env)
    assert table.returncode == 0
    assert "run.cancel" in table.stdout and "cli:alice" in table.stdout
    assert "key.create" not in table.stdout

    bad = toren_cli("audit", "--since", "last tuesday", env=env)
    assert bad.returncode == 1
    assert "--since" in one_line(bad.stderr) and "ISO 8601" in bad.stderr
