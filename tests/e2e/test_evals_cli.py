"""``toren eval`` from the command line: a dataset run against a directory, against a stored
version and with another model; the report, the comparison, the list; ``--fail-under`` and
``--fail-on-broken`` exit codes for CI; and bad input, which is one line saying what is wrong
and creates nothing."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from tests.conftest import one_line

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

DATASET = """\
name: cli
cases:
  - id: echo
    input: "[bold]echo[/] me"
    graders:
      - contains: "echo"
  - id: exact
    input: "two"
    expected: "You said: two"
  - id: judged
    input: "three"
    graders:
      - function: says_three
  - id: never
    input: "four"
    graders:
      - contains: zebra
"""
EVALS_PY = "def says_three(output):\n    return 'three' in output\n"


def test_run_report_compare_and_list(toren_cli, start_toren, database_url: str,
                                     tmp_path: Path) -> None:
    agent = tmp_path / "clicrew"
    agent.mkdir()
    (agent / "agent.yaml").write_text("name: clicrew\nmodel: toren/scripted\nversion: '1.0'\n")
    (agent / "prompt.md").write_text("Answer.\n")
    (tmp_path / "cases.yaml").write_text(DATASET)
    (tmp_path / "evals.py").write_text(EVALS_PY)  # found next to the dataset
    env = {"DATABASE_URL": database_url}

    first = toren_cli("eval", "run", "cases.yaml", "--agent", "clicrew", "--dir", str(agent),
                      "--repeat", "2", env=env)
    assert first.returncode == 0, first.stderr
    assert "pass rate 75.0% (6/8 case runs; 0 flaky)" in first.stdout
    assert "[bold]echo[/] me" not in first.stdout  # case ids are printed, never inputs
    assert "stopped? go on with: toren eval resume" in first.stderr
    baseline = first.stderr.split("eval ", 1)[1].split(":", 1)[0]

    # the stored version, with another model: a definition of its own that fails "exact"
    (agent / "prompt.md").write_text("Changed on disk: the stored version is what runs.\n")
    second = toren_cli("eval", "run", "cases.yaml", "--agent", "clicrew", "--version", "1.0",
                       "--model", "toren/scripted-b", "--json", "--fail-under", "0.8", env=env)
    assert second.returncode == 3, second.stderr
    candidate = json.loads(second.stdout)
    assert candidate["eval"]["model"] == "toren/scripted-b"
    assert candidate["eval"]["human_version"] == "1.0"
    assert candidate["totals"]["pass_rate"] == 0.75  # the scripted models answer alike

    report = toren_cli("eval", "report", baseline, "--json", env=env)
    assert report.returncode == 0, report.stderr
    found = json.loads(report.stdout)
    assert found["eval"]["version"] != candidate["eval"]["version"]
    assert found["eval"]["dataset"]["hash"] == candidate["eval"]["dataset"]["hash"]

    compared = toren_cli("eval", "compare", baseline, candidate["eval"]["id"], "--json",
                         "--fail-on-broken", env=env)
    assert compared.returncode == 0, compared.stderr
    changes = json.loads(compared.stdout)
    assert changes["same_dataset"] and changes["changes"]["same"] == 4
    text = toren_cli("eval", "compare", baseline, candidate["eval"]["id"], env=env)
    assert "pass rate 75.0% -> 75.0% (+0.0%)" in text.stdout

    listed = json.loads(toren_cli("eval", "list", "--agent", "clicrew", "--json",
                                  env=env).stdout)
    assert [e["id"] for e in listed["evals"]] == [candidate["eval"]["id"], baseline]
    with psycopg.connect(database_url) as conn:
        (runs,) = conn.execute("SELECT count(*) FROM agent_clicrew.runs").fetchone()
    assert runs == 8 + 4

    # the same through a deployment's API (--url)
    served = start_toren("dev", "--dir", str(agent), "--port", "0", "--json", env=env)
    url = str(served.next_json()["url"])
    remote = toren_cli("eval", "report", baseline, "--url", url, "--json", env=env)
    assert remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout)["cases"] == found["cases"]
    remote_list = json.loads(toren_cli("eval", "list", "--url", url, "--json", env=env).stdout)
    assert remote_list == listed
    remote_compare = toren_cli("eval", "compare", baseline, candidate["eval"]["id"], "--url",
                               url, "--json", env=env)
    assert json.loads(remote_compare.stdout) == changes


@pytest.mark.parametrize(("args", "dataset", "words"), [
    (("cases.yaml", "--agent", "clicrew"), "cases:\n  - input: hi\n    grader: x\n",
     "cases.yaml:3: cases[0].grader: unknown field 'grader'"),
    (("cases.yaml", "--agent", "nobody"), DATASET, "agent 'nobody' is not served here"),
    (("cases.yaml", "--agent", "clicrew", "--version", "zz"), DATASET,
     "--version zz: this database has no agent 'clicrew'"),
    (("cases.yaml", "--agent", "clicrew"), DATASET.replace("says_three", "no_such"),
     "has no function 'no_such'"),
    (("cases.yaml", "--agent", "clicrew", "--model", "nowhere/x"), DATASET, "nowhere/x"),
    (("--agent", "clicrew", "--from-runs", "colour=red"), DATASET,
     "unknown filter 'colour'"),
    (("--agent", "clicrew", "--from-runs", "status=completed"), DATASET, "no run matches"),
])
def test_bad_input_is_one_line_and_starts_nothing(toren_cli, database_url: str,
                                                  tmp_path: Path, args: tuple[str, ...],
                                                  dataset: str, words: str) -> None:
    agent = tmp_path / "clicrew"
    agent.mkdir()
    (agent / "agent.yaml").write_text("name: clicrew\nmodel: toren/scripted\n")
    (agent / "prompt.md").write_text("Answer.\n")
    (tmp_path / "cases.yaml").write_text(dataset)
    (tmp_path / "evals.py").write_text(EVALS_PY)
    done = toren_cli("eval", "run", "--dir", str(agent), *args,
                     env={"DATABASE_URL": database_url})
    assert done.returncode == 1, done.stdout
    assert words in one_line(done.stderr)
    with psycopg.connect(database_url) as conn:
        found = conn.execute("SELECT to_regclass('agent_clicrew.runs')").fetchone()[0]
        runs = conn.execute("SELECT count(*) FROM agent_clicrew.runs").fetchone()[0] \
            if found else 0
    assert runs == 0
    with psycopg.connect(database_url) as conn:
        made = conn.execute("SELECT to_regclass('toren_control.evals')").fetchone()[0]
        evals = conn.execute("SELECT count(*) FROM toren_control.evals").fetchone()[0] \
            if made else 0
    assert evals == 0


def test_an_unknown_eval_is_one_line(toren_cli, database_url: str) -> None:
    env = {"DATABASE_URL": database_url}
    for command in (("resume", "'; DROP TABLE toren_control.evals; --"),
                    ("compare", "\x1b[31mred", "00000000-0000-0000-0000-000000000000")):
        done = toren_cli("eval", *command, env=env)
        assert done.returncode == 1
        line = one_line(done.stderr)
        assert "no eval" in line and "\x1b" not in line
