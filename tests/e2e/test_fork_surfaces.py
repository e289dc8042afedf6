"""``toren jobs fork``/``toren jobs diff`` as a user runs them, and ``POST /runs/{id}/fork`` and
``GET /runs/{a}/diff/{b}`` over real HTTP against ``toren dev``, hostile inputs included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TorenCli, wait_until
from tests.e2e.test_http_api import call, conforms, finished, start_server
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(240)

TOOLS = '''
from toren import tool

@tool(idempotent=True)
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"

@tool(idempotent=True)
def weigh(topic: str) -> str:
    """Weigh a topic."""
    return f"{topic} weighs a lot"
'''
#: The same tools, but ``weigh`` answers differently: an agent directory changed since the run.
CHANGED_TOOLS = TOOLS.replace('f"{topic} weighs a lot"', 'f"{topic} weighs nothing"')


def test_fork_and_diff_from_the_command_line(toren_cli: TorenCli, database_url: str,
                                             tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_COST_USD": "0.25"}
    crew = write_agent_dir(tmp_path / "v1", "crew", tools_py=TOOLS)
    done = toren_cli("run", "crew", "postgres", "--dir", str(crew), "--json", env=env)
    assert done.returncode == 0, done.stderr
    source = json.loads(done.stdout)
    assert source["status"] == "completed"  # three steps: lookup, weigh, the answer

    # without --dir the fork is only queued, for the agent's workers
    queued = toren_cli("jobs", "fork", source["id"][:8], "--at-step", "1", "--json", env=env)
    assert queued.returncode == 0, queued.stderr
    made = json.loads(queued.stdout)
    assert made["run"]["status"] == "queued" and made["run"]["agent"] == "crew"
    assert made["fork"]["source_run_id"] == source["id"]
    assert (made["fork"]["at_step"], made["fork"]["unit"]) == (1, "step")

    # with --dir this process works it, with the agent as the directory has it now
    changed = write_agent_dir(tmp_path / "v2", "crew", tools_py=CHANGED_TOOLS)
    prompt = tmp_path / "prompt.md"
    prompt.write_text("You are a careful test agent.\n")
    worked = toren_cli("jobs", "fork", source["id"], "--at-step", "1", "--dir", str(changed),
                       "--prompt", str(prompt), "--model", "toren/scripted-careful", env=env)
    assert worked.returncode == 0, worked.stderr
    assert f"a fork of {source['id']} at step 1" in worked.stdout
    assert "model toren/scripted-careful" in worked.stdout
    assert "weighs nothing" in worked.stdout
    assert "forked from" in worked.stdout and "1 model call(s) copied, at no cost" in worked.stdout
    fork_id = worked.stdout.split()[1].rstrip(":")

    receipt = json.loads(toren_cli("jobs", "receipt", fork_id, "--json", env=env).stdout)
    calls = receipt["tasks"][0]["model_calls"]
    assert [(c["step"], c["copied"], c["cost_usd"]) for c in calls] == [
        (1, True, 0.0), (2, False, 0.25), (3, False, 0.25)]
    assert [c["model"] for c in calls] == ["toren/scripted", "toren/scripted-careful",
                                           "toren/scripted-careful"]
    assert receipt["totals"]["cost_usd"] == 0.5 and receipt["fork"]["source_run_id"] == source["id"]
    assert "You are a careful test agent.\n" in receipt["prompts"].values()
    shown = toren_cli("jobs", "receipt", fork_id, env=env).stdout
    assert "copied (fork)" in shown

    diffed = json.loads(toren_cli("jobs", "diff", source["id"], fork_id, "--json",
                                  env=env).stdout)
    assert diffed["first_difference"] == {"task_id": "main", "step": 2,
                                          "differs": "tool_results"}
    assert [s["same"] for s in diffed["tasks"][0]["steps"]] == [True, False, False]
    text = toren_cli("jobs", "diff", source["id"], fork_id, env=env)
    assert text.returncode == 0, text.stderr
    assert "first difference: task main, step 2 (tool results)" in text.stdout
    # both runs' cost and model time, and each step's beside the other's (step 1: copied, so
    # the fork paid nothing for it and waited for nothing)
    assert "cost: A $" in text.stdout and "; model time: A " in text.stdout
    assert "(copied) · $0.0000 · 0 ms" in text.stdout
    assert "weighs a lot" in text.stdout and "weighs nothing" in text.stdout
    same = toren_cli("jobs", "diff", source["id"], source["id"], env=env)
    assert "identical" in same.stdout

    # bad input: one line saying what to do, and nothing created
    def error(*args: str) -> tuple[str, str]:
        failed = toren_cli("jobs", *args, "--json", env=env)
        assert failed.returncode == 1, failed.stdout
        found = json.loads(failed.stdout)["error"]
        return found["code"], found["message"]

    assert error("fork", source["id"], "--at-step", "9")[0] == "invalid_fork_step"
    assert "has 3 step(s)" in error("fork", source["id"], "--at-step", "9")[1]
    assert error("fork", "0b5c3c9e-0000-4000-8000-000000000000", "--at-step", "0")[0] == \
        "run_not_found"
    assert error("fork", source["id"], "--at-step", "1", "--model", "nope/x")[0] == \
        "invalid_fork_override"
    binary = tmp_path / "prompt.bin"
    binary.write_bytes(b"\xff\xfe\x00 not text")
    assert error("fork", source["id"], "--at-step", "1", "--prompt", str(binary)) == (
        "config_error", f"--prompt {binary} is not UTF-8 text: give a file holding the system "
                        "prompt")
    blank = tmp_path / "blank.md"
    blank.write_text("\n\n")
    assert error("fork", source["id"], "--at-step", "1", "--prompt", str(blank))[0] == \
        "invalid_fork_override"
    assert error("fork", source["id"], "--at-step", "1", "--dir", str(changed), "--url",
                 "http://127.0.0.1:9")[0] == "config_error"
    assert error("diff", source["id"], "not-a-run")[0] == "run_not_found"
    negative = toren_cli("jobs", "fork", source["id"], "--at-step", "-1", env=env)
    assert negative.returncode == 2 and "--at-step" in negative.stderr
    missing = toren_cli("jobs", "fork", source["id"], "--at-step", "1", "--prompt",
                        str(tmp_path / "nope.md"), env=env)
    assert missing.returncode == 2 and "nope.md" in missing.stderr
    listed = json.loads(toren_cli("jobs", "list", "--json", env=env).stdout)["runs"]
    assert len(listed) == 3  # the source and the two forks


def test_diff_of_a_fork_with_another_model_and_prompt_is_not_identical(
        toren_cli: TorenCli, database_url: str, tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url}
    crew = write_agent_dir(tmp_path, "crew", tools_py=TOOLS)
    source = json.loads(toren_cli("run", "crew", "postgres", "--dir", str(crew), "--json",
                                  env=env).stdout)["id"]
    prompt = tmp_path / "prompt.md"
    prompt.write_text("You are a careful test agent.\n")
    worked = toren_cli("jobs", "fork", source, "--at-step", "1", "--dir", str(crew), "--prompt",
                       str(prompt), "--model", "toren/scripted-careful", env=env)
    assert worked.returncode == 0, worked.stderr
    fork_id = worked.stdout.split()[1].rstrip(":")

    text = toren_cli("jobs", "diff", source, fork_id, env=env)

    assert text.returncode == 0, text.stderr
    assert "identical" not in text.stdout  # the scripted models answer alike
    assert ("first difference: task main, step 2 (the same output from another model)"
            in text.stdout)
    assert "toren/scripted-careful" in text.stdout
    diffed = json.loads(toren_cli("jobs", "diff", source, fork_id, "--json", env=env).stdout)
    assert [s["differs"] for s in diffed["tasks"][0]["steps"]] == [None, "model", "model"]
    assert not diffed["identical"]


def test_fork_and_diff_over_http(database_url: str, start_toren, toren_cli: TorenCli,
                                 tmp_path: Path) -> None:
    url = start_server(start_toren, database_url, tmp_path)["url"]
    status, created, _ = call(f"{url}/runs", "POST", {"agent": "crew", "input": "postgres"})
    assert status == 201
    source = created["id"]
    assert wait_until(lambda: finished(url, source), 60)

    status, made, _ = call(f"{url}/runs/{source}/fork", "POST", {"at_step": 1})
    assert status == 201, made
    conforms("Forked", made)
    fork_id = made["run"]["id"]
    assert made["fork"]["copied_events"] > 0 and made["fork"]["source_run_id"] == source
    assert wait_until(lambda: finished(url, fork_id), 60)
    status, receipt, _ = call(f"{url}/runs/{fork_id}/receipt")
    conforms("Receipt", receipt)
    assert receipt["totals"]["copied_calls"] == 1
    # the run says what it is a fork of (the console links both ways from it); its source is
    # not a fork
    status, detail, _ = call(f"{url}/runs/{fork_id}")
    conforms("RunDetail", detail)
    assert detail["fork"] == made["fork"]
    assert call(f"{url}/runs/{source}")[1]["fork"] is None

    status, diff, _ = call(f"{url}/runs/{source}/diff/{fork_id}")
    assert status == 200, diff
    conforms("RunDiff", diff)
    assert diff["identical"] and diff["a"]["id"] == source and diff["b"]["id"] == fork_id
    # per step, what it cost this run and how long its model call took: the fork's copied
    # first step cost it nothing and took no time
    first_a, first_b = diff["tasks"][0]["steps"][0]["a"], diff["tasks"][0]["steps"][0]["b"]
    assert first_b["copied"] and first_b["cost_usd"] == 0.0 and first_b["latency_ms"] == 0.0
    assert first_a["latency_ms"] >= 0 and first_a["input_tokens"] == first_b["input_tokens"] > 0

    # the client says the same
    from toren.client import SyncTorenClient

    client = SyncTorenClient(url)
    again = client.fork_run(source, 0, prompt="Be brief.", model="toren/scripted-brief")
    assert again["fork"]["model"] == "toren/scripted-brief" and again["fork"]["at_step"] == 0
    assert client.diff_runs(source, fork_id)["identical"]

    # hostile and wrong inputs: typed 4xx errors, never a 5xx, nothing created
    fork_url = f"{url}/runs/{source}/fork"
    cases = [
        ({"at_step": 99}, 400, "invalid_fork_step"),
        ({"at_step": -1}, 400, "invalid_body"),
        ({"at_step": "1"}, 400, "invalid_body"),
        ({"at_step": True}, 400, "invalid_body"),
        ({"at_step": 1.5}, 400, "invalid_body"),
        ({"at_step": 9.0}, 400, "invalid_fork_step"),
        ({}, 400, "invalid_body"),
        ({"at_step": 1, "extra": 1}, 400, "invalid_body"),
        ({"at_step": 1, "model": 7}, 400, "invalid_body"),
        ({"at_step": 1, "model": "nope/x"}, 400, "invalid_fork_override"),
        ({"at_step": 1, "prompt": " "}, 400, "invalid_fork_override"),
        ({"at_step": 1, "prompt": "a\u0000b"}, 400, "unstorable_value"),
        ({"at_step": 2**62}, 400, "invalid_fork_step"),
        ({"at_step": 2**80}, 400, "unstorable_value"),
    ]
    for body, expected, code in cases:
        status, answer, _ = call(fork_url, "POST", body)
        assert (status, answer["error"]["code"]) == (expected, code), body
    status, answer, _ = call(fork_url, "POST", raw=b"[1, 2")
    assert (status, answer["error"]["code"]) == (400, "invalid_json")
    status, answer, _ = call(fork_url, "POST", raw=b"at_step=1",
                             headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 415
    status, answer, _ = call(fork_url, "POST", {"at_step": 0, "prompt": "x" * (1 << 21)})
    assert status in (400, 413), answer
    for path in ("/runs/not-a-uuid/fork", "/runs/0b5c3c9e-0000-4000-8000-000000000000/fork"):
        status, answer, _ = call(f"{url}{path}", "POST", {"at_step": 0})
        assert (status, answer["error"]["code"]) == (404, "run_not_found")
    status, answer, _ = call(f"{url}/runs/{source}/diff/not-a-uuid")
    assert (status, answer["error"]["code"]) == (404, "run_not_found")
    status, session, _ = call(f"{url}/sessions", "POST", {"agent": "crew"})
    status, answer, _ = call(f"{url}/runs/{session['id']}/fork", "POST", {"at_step": 0})
    assert (status, answer["error"]["code"]) == (409, "fork_refused")
    status, listed, _ = call(f"{url}/runs?kind=run")
    assert len(listed["runs"]) == 3  # the source and the two forks

    # the source lists its forks, oldest first; a fork has none; hostile ids are a 404
    status, forks, _ = call(f"{url}/runs/{source}/forks")
    assert status == 200, forks
    conforms("ForkRunList", forks)
    assert [f["id"] for f in forks["forks"]] == [fork_id, again["run"]["id"]]
    assert client.forks(source) == forks["forks"] and client.forks(fork_id) == []
    for path in ("/runs/not-a-uuid/forks", "/runs/0b5c3c9e-0000-4000-8000-000000000000/forks",
                 "/runs/%00/forks", f"/runs/{source}'--/forks"):
        status, answer, _ = call(f"{url}{path}")
        assert (status, answer["error"]["code"]) == (404, "run_not_found"), path

    # the CLI against the deployment (TOREN_URL): the same documents
    remote = toren_cli("jobs", "fork", source[:8], "--at-step", "1", "--url", url, "--json")
    assert remote.returncode == 0, remote.stderr
    conforms("Forked", json.loads(remote.stdout))
    diffed = toren_cli("jobs", "diff", source, fork_id, "--json", env={"TOREN_URL": url})
    assert diffed.returncode == 0, diffed.stderr
    assert json.loads(diffed.stdout) == call(f"{url}/runs/{source}/diff/{fork_id}")[1]
    refused = toren_cli("jobs", "fork", session["id"], "--at-step", "0", "--url", url, "--json")
    assert refused.returncode == 1
    assert json.loads(refused.stdout)["error"]["code"] == "fork_refused"


def test_fork_routes_need_a_key_when_keys_are_required(database_url: str, start_toren,
                                                       toren_cli: TorenCli,
                                                       tmp_path: Path) -> None:
    created = toren_cli("keys", "create", "ops", "--json", env={"DATABASE_URL": database_url})
    key = json.loads(created.stdout)["key"]
    url = start_server(start_toren, database_url, tmp_path, TOREN_REQUIRE_KEYS="1")["url"]
    auth = {"Authorization": f"Bearer {key}"}
    status, made, _ = call(f"{url}/runs", "POST", {"agent": "crew", "input": "x"}, auth)
    run_id = made["id"]
    assert wait_until(lambda: finished(url, run_id, auth), 60)
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        status, answer, _ = call(f"{url}/runs/{run_id}/fork", "POST", {"at_step": 0}, headers)
        assert status == 401, answer
        status, answer, _ = call(f"{url}/runs/{run_id}/diff/{run_id}", headers=headers)
        assert status == 401, answer
        status, answer, _ = call(f"{url}/runs/{run_id}/forks", headers=headers)
        assert status == 401, answer
    status, made, _ = call(f"{url}/runs/{run_id}/fork", "POST", {"at_step": 0}, auth)
    assert status == 201, made
