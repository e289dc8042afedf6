"""An eval started over HTTP survives its server's SIGKILL: started against ``toren serve
--workers``, the server killed mid-eval, two servers started again on the same database, and
the eval finishes by itself (nobody calls resume): exactly one of the two goes on with it
(its lease), no case run is started twice, and no model call that completed before the kill
is made again (the offline model's call log, kept outside the database, is the evidence)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.test_evals_crash import calls_by_pid, rows
from toren.client import SyncTorenClient
from toren.testing import OutputProcess

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
CASES = 6


def test_an_http_eval_goes_on_by_itself_after_its_server_is_killed(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    agent = tmp_path / "crews" / "evalcrew"
    agent.mkdir(parents=True)
    (agent / "agent.yaml").write_text("name: evalcrew\nmodel: toren/scripted\n")
    (agent / "prompt.md").write_text("Answer briefly.\n")
    calls = tmp_path / "model-calls.jsonl"
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_CALL_LOG": str(calls),
           # slow calls: the kill lands while some are in flight
           "TOREN_SCRIPTED_DELAY": "0.6", "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_LOG_LEVEL": "INFO", "TOREN_LOG_FORMAT": "plain"}
    made = toren_cli("keys", "create", "ops", "--json", env=env)
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)["key"]

    def serve(lease_ttl: str) -> OutputProcess:
        return start_toren("serve", "--dir", str(agent.parent), "--port", "0", "--workers",
                           "--json", env=env | {"TOREN_LEASE_TTL": lease_ttl})

    doomed = serve("1")  # its leases (the eval's, its runs') expire a second after the kill
    url = str(doomed.next_json()["url"])
    started = SyncTorenClient(url, key).start_eval("evalcrew", {"cases": [
        {"id": f"case-{n}", "input": f"question {n}", "graders": [{"contains": f"question {n}"}]}
        for n in range(CASES)]}, concurrency=2)
    eval_id = started["id"]
    graded_query = ("SELECT count(*) FROM toren_control.eval_case_runs "
                    "WHERE grade IS NOT NULL")

    def graded() -> int:
        (count,), = rows(database_url, graded_query)
        assert isinstance(count, int)
        return count

    assert wait_until(lambda: graded() >= 2, 60), doomed.stderr
    doomed.proc.kill()
    assert doomed.proc.wait(timeout=10) == -9

    at_kill = {case: (run_id, graded_at) for case, run_id, graded_at in rows(
        database_url, "SELECT case_id, run_id, graded_at FROM toren_control.eval_case_runs")}
    assert 2 <= sum(1 for _, graded in at_kill.values() if graded) < CASES
    answered = {run_id for (run_id,) in rows(
        database_url, "SELECT DISTINCT run_id::text FROM agent_evalcrew.events "
                      "WHERE type = 'ModelCallCompleted'")}
    unanswered = CASES - sum(1 for run_id, _ in at_kill.values() if run_id in answered)
    paid_before = sum(calls_by_pid(calls).values())

    # two servers share the database: one takes the eval (leases of 3 s: a server starved of
    # CPU for a moment on a loaded machine keeps its lease)
    servers = [serve("3"), serve("3")]
    urls = [str(server.next_json()["url"]) for server in servers]

    def finished() -> bool:
        return rows(database_url, "SELECT status FROM toren_control.evals")[0][0] == "finished"

    assert wait_until(finished, 90), [s.stderr for s in servers]
    report = SyncTorenClient(urls[1], key).eval_report(eval_id)
    assert report["totals"]["complete"] and report["totals"]["pass_rate"] == 1.0
    assert report["eval"]["auto_resume"] is True
    assert [f"going on with eval {eval_id}" in s.stderr
            for s in servers].count(True) == 1
    totals = rows(database_url, "SELECT count(*), count(grade), count(*) FILTER "
                                "(WHERE (grade->>'passed')::boolean) FROM "
                                "toren_control.eval_case_runs")[0]
    assert totals == (CASES, CASES, CASES)

    after = calls_by_pid(calls)
    assert sum(after.values()) - paid_before == unanswered
    assert after.get(doomed.proc.pid, 0) == paid_before
    # one run per case, each with exactly one completed model call
    runs = rows(database_url, "SELECT id::text FROM agent_evalcrew.runs")
    assert len(runs) == CASES
    per_run = rows(database_url, "SELECT run_id::text, count(*) FROM agent_evalcrew.events "
                                 "WHERE type = 'ModelCallCompleted' GROUP BY run_id")
    assert sorted(count for _, count in per_run) == [1] * CASES
    now = dict(rows(database_url, "SELECT case_id, graded_at FROM toren_control.eval_case_runs"))
    for case, (_run_id, graded_at) in at_kill.items():
        if graded_at is not None:
            assert now[case] == graded_at
    # the lease is let go once the eval is done
    assert rows(database_url, "SELECT lease_holder FROM toren_control.evals") == [(None,)]
    for server in servers:  # both at once: each drains its workers for a moment
        server.proc.terminate()
    for server in servers:
        assert server.proc.wait(timeout=60) == 0, server.stderr
