"""An eval killed with SIGKILL mid-way goes on with ``toren eval resume``: every case keeps its
one run (no second run is started for a case that has one), and no model call that completed
before the kill is made again: the offline model's call log, kept outside the database, is the
evidence."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from tests.conftest import wait_until

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
CASES = 8


def calls_by_pid(log: Path) -> dict[int, int]:
    counts: dict[int, int] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        pid = json.loads(line)["pid"]
        counts[pid] = counts.get(pid, 0) + 1
    return counts


def rows(url: str, query: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(query, list(params)).fetchall()


def test_an_eval_killed_mid_way_resumes_without_running_or_paying_a_case_twice(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    agent = tmp_path / "evalcrew"
    agent.mkdir()
    (agent / "agent.yaml").write_text("name: evalcrew\nmodel: toren/scripted\n")
    (agent / "prompt.md").write_text("Answer briefly.\n")
    dataset = tmp_path / "cases.jsonl"
    dataset.write_text("".join(json.dumps({"id": f"case-{n}", "input": f"question {n}",
                                           "graders": [{"contains": f"question {n}"}]}) + "\n"
                               for n in range(CASES)))
    calls = tmp_path / "model-calls.jsonl"
    env = {"DATABASE_URL": database_url, "TOREN_SCRIPTED_CALL_LOG": str(calls),
           # slow calls: the kill lands while some are in flight
           "TOREN_SCRIPTED_DELAY": "0.8", "TOREN_LEASE_TTL": "1", "TOREN_POLL_INTERVAL": "0.2"}

    doomed = start_toren("eval", "run", str(dataset), "--agent", "evalcrew", "--dir",
                         str(agent), "--concurrency", "2", "--json", env=env)
    graded_query = ("SELECT count(*) FROM toren_control.eval_case_runs "
                    "WHERE grade IS NOT NULL")

    def some_graded() -> bool:
        try:
            return int(rows(database_url, graded_query)[0][0]) >= 3  # type: ignore[arg-type]
        except psycopg.errors.UndefinedTable:
            return False  # not migrated yet

    assert wait_until(some_graded, 60), doomed.stderr
    doomed.proc.kill()
    assert doomed.proc.wait(timeout=10) == -9

    (eval_id,), = rows(database_url, "SELECT id::text FROM toren_control.evals")
    at_kill = {case: (run_id, graded_at) for case, run_id, graded_at in rows(
        database_url, "SELECT case_id, run_id, graded_at FROM toren_control.eval_case_runs")}
    assert 3 <= sum(1 for _, graded in at_kill.values() if graded) < CASES
    answered = {run_id for (run_id,) in rows(
        database_url, "SELECT DISTINCT run_id::text FROM agent_evalcrew.events "
                      "WHERE type = 'ModelCallCompleted'")}
    # every case whose model call had not completed (not started, or in flight at the kill)
    # is called once more; no other
    unanswered = CASES - sum(1 for run_id, _ in at_kill.values() if run_id in answered)
    paid_before = sum(calls_by_pid(calls).values())

    done = toren_cli("eval", "resume", eval_id, "--json", "--fail-under", "1", env=env,
                     timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["totals"] == {"case_runs": CASES, "started": CASES, "graded": CASES,
                                "passed": CASES, "failed": 0, "pass_rate": 1.0, "flaky": 0,
                                "complete": True}
    assert report["eval"]["status"] == "finished"

    after = calls_by_pid(calls)
    assert sum(after.values()) - paid_before == unanswered
    assert after.get(doomed.proc.pid, 0) == paid_before  # the log's first part is the kill's
    # one run per case, each with exactly one completed model call
    runs = rows(database_url, "SELECT id::text, idempotency_key FROM agent_evalcrew.runs")
    assert len(runs) == CASES
    assert {run_id for run_id, _ in runs} == {c["run_ids"][0] for c in report["cases"]}
    per_run = rows(database_url, "SELECT run_id::text, count(*) FROM agent_evalcrew.events "
                                 "WHERE type = 'ModelCallCompleted' GROUP BY run_id")
    assert sorted(count for _, count in per_run) == [1] * CASES
    # a case graded before the kill was not graded again
    now = dict(rows(database_url, "SELECT case_id, graded_at FROM toren_control.eval_case_runs"))
    for case, (_run_id, graded_at) in at_kill.items():
        if graded_at is not None:
            assert now[case] == graded_at
