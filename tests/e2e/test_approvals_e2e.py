"""Approvals end to end with real processes: the example approval-desk served by `toren dev`,
decided over HTTP and with `toren approvals`; and the approved refund runs exactly once when
the worker is SIGKILLed between the decision and the execution and two workers race for it."""

from __future__ import annotations

import asyncio
import getpass
import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.chaos.helpers import create_run, run_events, run_row, start_worker
from tests.conftest import TOREN, wait_until
from tests.durable import check_log
from tests.e2e.test_http_api import call, conforms
from toren.client import SyncTorenClient, TorenAPIError, TorenClient

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
EXAMPLE = Path(__file__).parents[2] / "contrib" / "examples" / "approval-desk"
SCHEMA = "agent_approval_desk"


def desk(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the example, and the refund ledger its tool writes."""
    directory = tmp_path / "crews" / "approval-desk"
    shutil.copytree(EXAMPLE, directory)
    return directory, tmp_path / "refunds.log"


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


def test_decided_over_http_and_the_cli_once_each(database_url: str, start_toren, toren_cli,
                                                 tmp_path: Path) -> None:
    directory, ledger = desk(tmp_path)
    env = {"DATABASE_URL": database_url, "REFUNDS_LEDGER": str(ledger)}
    dev = start_toren("dev", "--dir", str(directory.parent), "--port", "0", "--json", env=env)
    url = dev.next_json()["url"]

    status, created, _ = call(f"{url}/runs", "POST", {"agent": "approval-desk", "input": "A7"})
    assert status == 201
    run_id = created["id"]
    assert wait_until(lambda: call(f"{url}/runs/{run_id}")[1]["status"] == "awaiting_approval",
                      60)
    _, run, _ = call(f"{url}/runs/{run_id}")
    conforms("RunDetail", run)
    [pending] = run["pending_approvals"]
    assert (pending["tool"], pending["arguments"]) == (
        "issue_refund", {"order_id": "A7", "amount_eur": 1})
    assert run["why"] == f"waiting for approval of issue_refund (id {pending['id']})"
    status, listed, _ = call(f"{url}/approvals?status=pending&agent=approval-desk&run={run_id}")
    assert status == 200 and [a["id"] for a in listed["approvals"]] == [pending["id"]]
    conforms("ApprovalList", listed)
    status, one, _ = call(f"{url}/approvals/{pending['id']}")
    assert status == 200 and one["status"] == "pending"
    conforms("Approval", one)

    # hostile input: clear errors, nothing decided
    approve_url = f"{url}/approvals/{pending['id']}/approve"
    for path, code in (("/approvals/nope", 404), ("/approvals/nope/approve", 404),
                       ("/approvals?status=maybe", 400), ("/approvals?run=x", 400),
                       ("/approvals?limit=0", 400), ("/approvals?agent=ghost", 404),
                       ("/approvals/00000000-0000-0000-0000-000000000000", 404)):
        method = "POST" if path.endswith("approve") else "GET"
        status, body, _ = call(url + path, method)
        assert status == code, (path, body)
        conforms("Error", body)
    for bad in ({"reason": 5}, {"reason": None}, {"why": "x"}, {"reason": "x" * 2001},
                {"reason": "a\u0000b"}):
        status, body, _ = call(approve_url, "POST", bad)
        assert status == 400, (bad, body)
    status, _, _ = call(approve_url, "POST", raw=b"{not json")
    assert status == 400
    digest = one["digest"]
    edit_url, answer_url = (f"{url}/approvals/{pending['id']}/{verb}" for verb in ("edit",
                                                                                   "answer"))
    good_args = {"order_id": "A7", "amount_eur": 1}
    for target, bad in (
            (edit_url, {"arguments": good_args}),  # no digest: edit and answer require it
            (answer_url, {"answer": "done"}), (answer_url, {"digest": digest}),
            (edit_url, {"digest": digest, "arguments": [1]}),
            (edit_url, {"digest": "zz", "arguments": good_args}),
            (edit_url, {"digest": digest, "arguments": good_args, "scope": "run"}),
            (answer_url, {"digest": digest, "answer": 5}),
            (answer_url, {"digest": digest, "answer": "  "}),
            (answer_url, {"digest": digest, "answer": "x" * 100_001}),
            (approve_url, {"scope": "forever"}), (approve_url, {"digest": 7}),
            (edit_url, {"digest": digest, "arguments": {"order_id": "a\u0000"}})):
        status, body, _ = call(target, "POST", bad)
        assert status == 400, (target, bad, body)
        conforms("Error", body)
    status, invalid, _ = call(edit_url, "POST", {"digest": digest, "arguments": {
        "order_id": "A7", "amount_eur": "all of it"}})
    assert status == 422 and invalid["field"] == "amount_eur", invalid
    conforms("InvalidArguments", invalid)
    status, stale, _ = call(approve_url, "POST", {"digest": "0" * 64})
    assert status == 409 and stale["error"]["code"] == "approval_stale"
    assert stale["digest"] == digest
    conforms("ApprovalStale", stale)
    assert call(f"{url}/approvals/{pending['id']}")[1]["status"] == "pending"

    # the CLI decides (as cli:<os user>); a second decision over HTTP is a 409 with the first
    done = toren_cli("approvals", "list", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert [a["id"] for a in json.loads(done.stdout)["approvals"]] == [pending["id"]]
    done = toren_cli("approvals", "approve", pending["id"][:8], "--reason", "customer called",
                     "--json", env=env)
    assert done.returncode == 0, done.stderr
    decided = json.loads(done.stdout)
    assert decided["status"] == "approved"
    assert decided["decided_by"] == f"cli:{getpass.getuser()}"
    status, conflict, _ = call(f"{url}/approvals/{pending['id']}/deny", "POST",
                               {"reason": "too late"})
    assert status == 409 and conflict["error"]["code"] == "approval_decided"
    assert conflict["approval"]["status"] == "approved"
    conforms("ApprovalConflict", conflict)
    done = toren_cli("approvals", "deny", pending["id"], env=env)
    assert done.returncode != 0 and "already decided: approved" in done.stderr

    assert wait_until(lambda: call(f"{url}/runs/{run_id}")[1]["status"] == "completed", 60)
    assert len(ledger_lines(ledger)) == 1
    _, run, _ = call(f"{url}/runs/{run_id}")
    assert run["pending_approvals"] == [] and "Refunded 1 EUR" in run["output"]
    done = toren_cli("approvals", "show", pending["id"], "--json", env=env)
    assert json.loads(done.stdout)["reason"] == "customer called"

    # a denial over HTTP (no keys: anonymous) reaches the model with its reason
    _, created, _ = call(f"{url}/runs", "POST", {"agent": "approval-desk", "input": "B12"})
    assert wait_until(lambda: call(f"{url}/runs/{created['id']}")[1]["pending_approvals"], 60)
    approval = call(f"{url}/runs/{created['id']}")[1]["pending_approvals"][0]
    status, denied, _ = call(f"{url}/approvals/{approval['id']}/deny", "POST",
                             {"reason": "over the limit"})
    assert status == 200 and denied["decided_by"] == "anonymous"
    assert wait_until(lambda: call(f"{url}/runs/{created['id']}")[1]["status"] == "completed",
                      60)
    assert "denied it: over the limit" in call(f"{url}/runs/{created['id']}")[1]["output"]
    assert len(ledger_lines(ledger)) == 1

    # the CLI edits the arguments (bound to the digest it read): the refund runs with them
    _, created, _ = call(f"{url}/runs", "POST", {"agent": "approval-desk", "input": "C3"})
    assert wait_until(lambda: call(f"{url}/runs/{created['id']}")[1]["pending_approvals"], 60)
    approval = call(f"{url}/runs/{created['id']}")[1]["pending_approvals"][0]
    done = toren_cli("approvals", "edit", approval["id"], "--args",
                     '{"order_id": "C3", "amount_eur": 2}', env=env)
    assert done.returncode == 0, done.stderr
    assert approval["digest"][:12] in done.stdout and "edited by cli:" in done.stdout
    assert wait_until(lambda: call(f"{url}/runs/{created['id']}")[1]["status"] == "completed",
                      60)
    assert ledger_lines(ledger)[-1].endswith(" C3 2")


def test_sigkill_between_decision_and_execution_and_racing_workers_run_it_once(
        database_url: str, start_toren, toren_cli, tmp_path: Path) -> None:
    directory, ledger = desk(tmp_path)
    env = {"DATABASE_URL": database_url, "REFUNDS_LEDGER": str(ledger),
           "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_CRASH_AT": "after_approval", "TOREN_CRASH_ONCE": str(tmp_path / "crashed")}
    run_ids = [create_run(toren_cli, directory, "approval-desk", order, env)
               for order in ("A7", "B12", "C3")]
    first = start_worker(start_toren, directory, env)
    assert wait_until(lambda: all(run_row(database_url, SCHEMA, r)[0] == "awaiting_approval"
                                  for r in run_ids), 60)
    done = toren_cli("approvals", "list", "--json", env=env)
    pending = json.loads(done.stdout)["approvals"]
    assert len(pending) == 3
    # one of each decision that has an effect: approved, edited (runs with the new arguments)
    # and answered (the answer is recorded once and the tool never runs)
    by_run = {a["run_id"]: a["id"] for a in pending}
    decisions = (("approve",), ("edit", "--args", '{"order_id": "B12", "amount_eur": 3}'),
                 ("answer", "--answer", "C3 was refunded by phone"))
    for run_id, (verb, *rest) in zip(run_ids, decisions, strict=True):
        done = toren_cli("approvals", verb, by_run[run_id], *rest, env=env)
        assert done.returncode == 0, done.stderr
    # the first worker takes a decision up and is killed before it records or runs it
    assert wait_until(lambda: first.proc.poll() is not None, 60), "the crash point was missed"
    assert (tmp_path / "crashed").exists() and first.proc.returncode == -9
    assert ledger_lines(ledger) == []
    # two workers race for what is left
    start_worker(start_toren, directory, env)
    start_worker(start_toren, directory, env)
    assert wait_until(lambda: all(run_row(database_url, SCHEMA, r)[0] == "completed"
                                  for r in run_ids), 90)
    lines = ledger_lines(ledger)
    keys = [line.split()[0] for line in lines]
    assert sorted(line.split()[1:] for line in lines) == [["A7", "1"], ["B12", "3"]], lines
    assert len(set(keys)) == 2  # each refund once, the answered one never
    for run_id, outcome in zip(run_ids, ("approved", "edited", "answered"), strict=True):
        events = run_events(database_url, SCHEMA, run_id)
        check_log(events)
        [decided] = [e.data for e in events if e.type == "ApprovalDecided"]
        assert decided["outcome"] == outcome
        started = [e.data["idempotency_key"] for e in events
                   if e.type == "ToolCallStarted" and e.data["name"] == "issue_refund"]
        results = [e.data["output"] for e in events
                   if e.type == "ToolCallCompleted" and e.data["name"] == "issue_refund"]
        assert len(results) == 1
        if outcome == "answered":
            assert started == [] and results == ["C3 was refunded by phone"]
        else:
            assert len(started) == 1 and started[0] in keys  # the ledger saw the logged call


def test_chat_says_what_it_waits_for_and_goes_on_once_approved(toren_cli, database_url: str,
                                                               tmp_path: Path) -> None:
    directory, _ = desk(tmp_path)
    # toren is not on PATH (a venv's bin not activated): the hint names the executable; the
    # example's ledger goes to the temporary directory, not where the command runs
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    ledger = temporary / "toren-approval-desk" / "refunds.log"
    env = {"DATABASE_URL": database_url, "PATH": "/usr/bin:/bin", "TMPDIR": str(temporary)}
    with ThreadPoolExecutor(1) as pool:
        chat = pool.submit(toren_cli, "chat", "approval-desk", "--dir", str(directory),
                           env=env, input="A7\n", timeout=180)

        def pending() -> list[dict[str, str]]:
            done = toren_cli("approvals", "list", "--json", env=env)
            return json.loads(done.stdout)["approvals"] if done.returncode == 0 else []

        assert wait_until(lambda: bool(pending()), 90)
        [approval] = pending()
        assert toren_cli("approvals", "approve", approval["id"], env=env).returncode == 0
        done = chat.result(timeout=180)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert (f"The agent is waiting for approval of issue_refund (id {approval['id']}). "
            f"Approve it with `{TOREN} approvals approve {approval['id']}`") in said
    assert "Refunded 1 EUR on order A7" in said
    assert len(ledger_lines(ledger)) == 1
    assert not (tmp_path / "refunds.log").exists()  # the command ran in tmp_path


def test_the_cli_refuses_bad_input_in_one_line(toren_cli, database_url: str) -> None:
    env = {"DATABASE_URL": database_url}
    for args, words in (
            (("show", "nope"), "no approval's id starts with 'nope'"),
            (("approve", "00000000-0000-0000-0000-000000000000"), "no approval"),
            (("deny", "ab", "--reason", "x"), "no approval's id starts with 'ab'"),
            (("list", "--status", "maybe"), "unknown approval status 'maybe'"),
            (("edit", "ab", "--args", "{nope"), "--args is not JSON"),
            (("edit", "ab", "--args", "[1]"), "--args must be a JSON object"),
            (("answer", "ab", "--answer", "x"), "no approval's id starts with 'ab'")):
        done = toren_cli("approvals", *args, env=env)
        assert done.returncode != 0, args
        assert words in done.stderr and "Traceback" not in done.stderr, done.stderr
    done = toren_cli("approvals", "list", "--json", env=env)
    assert done.returncode == 0 and json.loads(done.stdout) == {"approvals": []}


async def test_the_client_lists_and_decides_async_and_sync(database_url: str, start_toren,
                                                           tmp_path: Path) -> None:
    directory, ledger = desk(tmp_path)
    env = {"DATABASE_URL": database_url, "REFUNDS_LEDGER": str(ledger)}
    dev = start_toren("dev", "--dir", str(directory.parent), "--port", "0", "--json", env=env)
    url = dev.next_json()["url"]
    async with TorenClient(url) as client:
        runs = [(await client.create_run("approval-desk", order))["id"] for order in ("A7", "B12")]
        for run_id in runs:
            for _ in range(600):
                if (await client.get_run(run_id))["pending_approvals"]:
                    break
                await asyncio.sleep(0.1)
        pending = await client.list_approvals(status="pending", agent="approval-desk")
        assert sorted(a["run_id"] for a in pending) == sorted(runs)
        first = next(a for a in pending if a["run_id"] == runs[0])
        assert (await client.get_approval(first["id"]))["tool"] == "issue_refund"
        with pytest.raises(TorenAPIError) as stale:
            await client.approve(first["id"], "ok", digest="f" * 64)
        assert stale.value.status == 409 and stale.value.code == "approval_stale"
        assert stale.value.body["digest"] == first["digest"]
        with pytest.raises(TorenAPIError) as invalid:
            await client.edit_approval(first["id"], {"order_id": 7, "amount_eur": 1},
                                       digest=first["digest"])
        assert (invalid.value.status, invalid.value.body["field"]) == (422, "order_id")
        approved = await client.approve(first["id"], "ok", digest=first["digest"], always=True)
        assert approved["status"] == "approved" and approved["reason"] == "ok"
        assert approved["scope"] == "run"
        with pytest.raises(TorenAPIError) as conflict:
            await client.deny(first["id"])
        assert conflict.value.status == 409 and conflict.value.code == "approval_decided"
        assert conflict.value.body["approval"]["status"] == "approved"
        with pytest.raises(TorenAPIError) as missing:
            await client.get_approval("00000000-0000-0000-0000-000000000000")
        assert missing.value.status == 404
    second = next(a for a in pending if a["run_id"] == runs[1])
    sync = SyncTorenClient(url)
    answered = await asyncio.to_thread(sync.answer_approval, second["id"],
                                       "Refunded by phone already.", digest=second["digest"])
    assert answered["status"] == "answered"
    assert [a["id"] for a in await asyncio.to_thread(sync.list_approvals, run_id=runs[1])] == [
        second["id"]]
    finished = await asyncio.to_thread(sync.wait_for_run, runs[1], timeout_s=60)
    assert finished["status"] == "completed" and "B12" not in "".join(ledger_lines(ledger))
    assert (await asyncio.to_thread(sync.wait_for_run, runs[0], timeout_s=60))["status"] == (
        "completed")
    assert len(ledger_lines(ledger)) == 1
