"""memory: end to end in real processes (the support-memory example): a worker SIGKILLed right
after a memory write resumes without writing twice; a person erases a memory with
`toren memory rm` and the agent's next recall no longer finds it; the CLI refuses bad input in
one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg
import pytest

from tests.chaos.helpers import run_events, run_row, start_worker
from tests.conftest import wait_until
from tests.durable import check_log

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
EXAMPLE = Path(__file__).parents[2] / "contrib" / "examples" / "support-memory"
SCHEMA = "agent_support_memory"


def calls(*pairs: tuple[str, dict[str, object]]) -> str:
    """The scripted model's input that makes it call these tools, in order."""
    return json.dumps({"toolCalls": [{"name": name, "arguments": arguments}
                                     for name, arguments in pairs]})


def start(toren_cli, directory: Path, env: dict[str, str], text: str, subject: str) -> str:
    done = toren_cli("run", "support-memory", text, "--no-follow", "--json", "--dir",
                     str(directory), "--subject", subject, env=env)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def output_of(database_url: str, run_id: str) -> str:
    assert wait_until(lambda: run_row(database_url, SCHEMA, run_id)[0] == "completed", 60)
    return str(run_row(database_url, SCHEMA, run_id)[1])


def test_a_memory_written_before_a_sigkill_is_written_once_and_a_person_erases_it(
        database_url: str, start_toren, toren_cli, tmp_path: Path) -> None:
    directory = Path(shutil.copytree(EXAMPLE, tmp_path / "crews" / "support-memory"))
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_CRASH_AT": "after_memory_write",
           "TOREN_CRASH_ONCE": str(tmp_path / "crashed")}
    run_id = start(toren_cli, directory, env, calls(
        ("remember", {"content": "Ann prefers e-mail to phone calls", "pinned": True}),
        ("recall", {"query": "e-mail"})), subject="telegram:ann")
    first = start_worker(start_toren, directory, env)
    # the memory is written, then the worker dies before the call's result is appended
    assert wait_until(lambda: first.proc.poll() is not None, 60), "the crash point was missed"
    assert (tmp_path / "crashed").exists() and first.proc.returncode == -9
    # a `toren dev` takes over: its workers resume the run, its API serves --url below
    dev = start_toren("dev", "--dir", str(directory.parent), "--port", "0", "--json", env=env)
    url = str(dev.next_json()["url"])
    said = output_of(database_url, run_id)

    listed = toren_cli("memory", "list", "--subject", "telegram:ann", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    [memory] = json.loads(listed.stdout)["memories"]  # written once, not twice
    assert (memory["content"], memory["scope"], memory["pinned"], memory["run_id"]) == (
        "Ann prefers e-mail to phone calls", "user", True, run_id)
    assert f"Remembered as memory {memory['id']}." in said and f"[{memory['id']}]" in said
    events = run_events(database_url, SCHEMA, run_id)
    check_log(events)
    remembered = [e.data["output"] for e in events
                  if e.type == "ToolCallCompleted" and e.data["name"] == "remember"]
    assert remembered == [f"Remembered as memory {memory['id']}."]
    with psycopg.connect(database_url) as conn:
        [[writes]] = conn.execute("SELECT count(*) FROM toren_control.memory_writes").fetchall()
    assert writes == 1

    # the next run about Ann has the pinned fact in its prompt and recalls it
    env.pop("TOREN_CRASH_AT")
    again = start(toren_cli, directory, env, calls(("recall", {"query": "phone"})),
                  "telegram:ann")
    assert memory["content"] in output_of(database_url, again)
    [loaded] = [e.data for e in run_events(database_url, SCHEMA, again)
                if e.type == "MemoryLoaded"]
    assert loaded["memory_ids"] == [memory["id"]] and memory["content"] in loaded["pinned"]
    stranger = start(toren_cli, directory, env, calls(("recall", {"query": "phone"})), "bob")
    assert "No memory matches" in output_of(database_url, stranger)

    # a person erases it (over the deployment's API): the agent's next recall no longer
    # finds it
    shown = toren_cli("memory", "show", memory["id"], env=env)
    assert shown.returncode == 0 and "telegram:ann" in shown.stdout, shown.stderr
    erased = toren_cli("memory", "rm", memory["id"], "--json", "--url", url, env=env)
    assert erased.returncode == 0, erased.stderr
    assert json.loads(erased.stdout) == {"erased": [memory["id"]]}
    after = start(toren_cli, directory, env, calls(("recall", {"query": "phone e-mail"})),
                  "telegram:ann")
    said = output_of(database_url, after)
    assert "No memory matches" in said and "prefers e-mail" not in said
    [loaded] = [e.data for e in run_events(database_url, SCHEMA, after)
                if e.type == "MemoryLoaded"]
    assert loaded.get("pinned", "") == ""  # nor is it in the prompt any more
    for where in ((), ("--url", url)):
        gone = toren_cli("memory", "show", memory["id"], *where, env=env)
        assert gone.returncode == 1 and "no memory has the id" in gone.stderr, gone.stderr
    audit = toren_cli("audit", "--json", "--action", "memory.delete", env=env)
    assert audit.returncode == 0, audit.stderr
    [entry] = json.loads(audit.stdout)["entries"]
    assert (entry["target"], entry["source"], entry["outcome"]) == (memory["id"], "http", "ok")


def test_the_memory_commands_refuse_bad_input_in_one_line(database_url: str, toren_cli,
                                                          tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url}
    for args, words in (
            (("list", "--scope", "everyone"), "unknown memory scope 'everyone'"),
            (("list", "--subject", ""), "subject must be a non-empty string"),
            (("show", "'; DROP TABLE x; --"), "no memory has the id"),
            (("rm",), "give memory ids, or --subject"),
            (("rm", "00000000-0000-0000-0000-000000000000", "--subject", "ann"),
             "give memory ids, or --subject"),
            (("rm", "00000000-0000-0000-0000-000000000000"), "no memory has the id"),
            (("edit", "00000000-0000-0000-0000-000000000000"), "nothing to change"),
            (("edit", "00000000-0000-0000-0000-000000000000", "--content", "x" * 4001),
             "a memory holds at most 4000"),
            (("list", "--url", "http://127.0.0.1:9"), "cannot connect to the Toren API")):
        done = toren_cli("memory", *args, env=env)
        assert done.returncode != 0, (args, done.stdout)
        assert words in " ".join(done.stderr.split()), (args, done.stderr)
        assert "Traceback" not in done.stderr
    listed = toren_cli("memory", "list", "--json", env=env)
    assert listed.returncode == 0 and json.loads(listed.stdout) == {"memories": []}
