"""``toren channels pair``: list, approve and deny the codes people got from a chat channel."""

from __future__ import annotations

import json

import psycopg

from tests.conftest import TorenCli


def seed(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        for user, code in (("111", "ABCD2345"), ("222", "WXYZ6789")):
            conn.execute("INSERT INTO toren_control.channel_pairings "
                         "(channel, agent, user_id, chat_id, code, display_name) "
                         "VALUES ('telegram', 'bot', %s, %s, %s, %s)",
                         (user, user, code, f"User {user}"))


def test_pairings_are_listed_and_decided_once(toren_cli: TorenCli, database_url: str) -> None:
    env = {"DATABASE_URL": database_url}
    seed(database_url)
    listed = toren_cli("channels", "pair", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    pairings = json.loads(listed.stdout)["pairings"]
    assert sorted(p["code"] for p in pairings) == ["ABCD2345", "WXYZ6789"]
    assert {p["status"] for p in pairings} == {"pending"}

    approved = toren_cli("channels", "pair", "approve", "abcd-2345", "--json", env=env)
    assert approved.returncode == 0, approved.stderr
    record = json.loads(approved.stdout)
    assert (record["status"], record["user_id"], record["decided_now"]) == ("approved", "111",
                                                                           True)
    assert record["decided_by"].startswith("cli:")
    again = toren_cli("channels", "pair", "deny", "ABCD2345", env=env)
    assert again.returncode == 0 and "already approved" in again.stdout

    denied = toren_cli("channels", "pair", "deny", "WXYZ6789", env=env)
    assert denied.returncode == 0 and "may not talk to bot" in denied.stdout
    table = toren_cli("channels", "pair", "list", "--all", env=env)
    assert "ABCD2345" in table.stdout and "denied" in table.stdout
    assert json.loads(toren_cli("channels", "pair", "list", "--json", env=env).stdout) == {
        "pairings": []}


def test_hostile_codes_and_statuses_are_one_line_errors(toren_cli: TorenCli,
                                                        database_url: str) -> None:
    env = {"DATABASE_URL": database_url}
    for code in ("NOPE2345", "x" * 5000, "'; DROP TABLE x; --", ""):
        result = toren_cli("channels", "pair", "approve", code, "--json", env=env)
        assert result.returncode != 0
        assert "Traceback" not in result.stderr
    unknown = toren_cli("channels", "pair", "approve", "NOPE2345", env=env)
    assert "no pairing has the code NOPE2345" in unknown.stderr
    bad = toren_cli("channels", "pair", "list", "--status", "maybe", env=env)
    assert bad.returncode == 1 and "unknown pairing status 'maybe'" in bad.stderr
