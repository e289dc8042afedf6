"""Runtime lanes with real worker processes: ``toren worker --lane short`` and ``--lane long``
(``TOREN_LANE``) on one database each work only their lane's agents (``runtime:`` in
agent.yaml), a long run in hand holds no slot of the short pool, and a long agent's work with
no long-lane worker alive waits visibly in ``toren top``."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import psycopg
import pytest

from tests.chaos.helpers import create_run, run_row
from tests.conftest import wait_until
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(240)

#: The long agent's one tool waits until the test opens its gate (a file), standing in for an
#: hours-long sandbox or document job.
HOLD = '''
import time
from pathlib import Path
from toren import tool

@tool(idempotent=True)
def hold(topic: str) -> str:
    """Work on a topic for a long time."""
    while not Path({gate!r}).exists():
        time.sleep(0.05)
    return f"held {{topic}}"
'''


def lease_holders(url: str, run_id: str) -> set[str]:
    """Every worker that held a stream of the run (leases outlive their release)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT holder FROM toren_control.leases WHERE run_id = %s",
                            [run_id]).fetchall()
    return {holder for (holder,) in rows}


def signed_in(url: str) -> dict[int, tuple[str, str, list[str]]]:
    """Signed-in workers by process id: ``(worker id, lane, agents)``."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT pid, id, lane, agents FROM toren_control.workers").fetchall()
    return {pid: (worker_id, lane, list(agents)) for pid, worker_id, lane, agents in rows}


def top(toren_cli, env: dict[str, str]) -> dict:
    done = toren_cli("top", "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_each_lane_works_only_its_agents_and_a_long_run_holds_no_short_slot(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    crews = tmp_path / "crews"
    write_agent_dir(crews, "quick")
    write_agent_dir(crews, "slow", runtime="long", tools_py=HOLD.format(gate=str(gate)))
    # one slot per pool: a long run taken by the short pool would block every short run
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "2", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_GUARDIAN_INTERVAL": "0.5", "TOREN_CONCURRENCY": "1"}
    short = start_toren("worker", "--dir", str(crews), "--lane", "short", "--json", env=env)
    ready = short.next_json()
    assert (ready["event"], ready["lane"], ready["lane_agents"]) == ("ready", "short", ["quick"])
    long = start_toren("worker", "--dir", str(crews), "--json", env=env | {"TOREN_LANE": "long"})
    ready = long.next_json()
    assert (ready["lane"], ready["lane_agents"]) == ("long", ["slow"])
    workers = signed_in(database_url)
    short_id, long_id = workers[short.proc.pid][0], workers[long.proc.pid][0]
    assert workers[short.proc.pid][1:] == ("short", ["quick"])
    assert workers[long.proc.pid][1:] == ("long", ["slow"])

    slow_run = create_run(toren_cli, crews, "slow", "the archive", env)
    assert wait_until(lambda: run_row(database_url, "agent_slow", slow_run)[0] == "running", 60)
    quick_runs = [create_run(toren_cli, crews, "quick", f"question {i}", env) for i in range(3)]
    assert wait_until(lambda: all(run_row(database_url, "agent_quick", run_id)[0] == "completed"
                                  for run_id in quick_runs), 90), short.stderr
    # the short pool finished its runs while the long run was still in hand
    assert run_row(database_url, "agent_slow", slow_run)[0] == "running"

    snapshot = top(toren_cli, {"DATABASE_URL": database_url})
    assert {w["id"]: w["lane"] for w in snapshot["workers"]} == {short_id: "short",
                                                                 long_id: "long"}
    assert {name: (info["lane"], info["served_by"])
            for name, info in snapshot["agents"].items()} == {"quick": ("short", 1),
                                                              "slow": ("long", 1)}
    assert snapshot["unserved"] == []

    gate.touch()
    assert wait_until(lambda: run_row(database_url, "agent_slow", slow_run)[0] == "completed",
                      60), long.stderr
    assert "held the archive" in json.dumps(run_row(database_url, "agent_slow", slow_run)[1])
    assert lease_holders(database_url, slow_run) == {long_id}
    for run_id in quick_runs:
        assert lease_holders(database_url, run_id) == {short_id}
    assert short.stop(signal.SIGTERM) == 0
    assert long.stop(signal.SIGTERM) == 0


def test_a_long_agent_without_a_long_worker_waits_visibly_until_one_starts(
        start_toren, toren_cli, database_url: str, tmp_path: Path) -> None:
    crews = tmp_path / "crews"
    write_agent_dir(crews, "quick")
    write_agent_dir(crews, "slow", runtime="long")
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "2", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_GUARDIAN_INTERVAL": "0.5"}
    short = start_toren("worker", "--dir", str(crews), "--lane", "short", "--json", env=env)
    short.next_json()
    slow_run = create_run(toren_cli, crews, "slow", "nobody of my lane", env)
    quick_run = create_run(toren_cli, crews, "quick", "served", env)
    assert wait_until(lambda: run_row(database_url, "agent_quick", quick_run)[0] == "completed",
                      60), short.stderr

    snapshot = top(toren_cli, {"DATABASE_URL": database_url})
    assert run_row(database_url, "agent_slow", slow_run)[0] == "queued"
    (entry,) = snapshot["unserved"]
    assert (entry["agent"], entry["lane"], entry["waiting"]) == ("slow", "long", 1)
    assert "no live worker serves lane long" in entry["message"]
    assert snapshot["agents"]["slow"]["served_by"] == 0

    # a worker of lane all (toren worker's default: one pool for every agent) takes it
    every = start_toren("worker", "--dir", str(crews), "--json", env=env)
    assert every.next_json()["lane"] == "all"
    assert wait_until(lambda: run_row(database_url, "agent_slow", slow_run)[0] == "completed",
                      60), every.stderr
    assert top(toren_cli, {"DATABASE_URL": database_url})["unserved"] == []
    assert short.stop(signal.SIGTERM) == 0
    assert every.stop(signal.SIGTERM) == 0


@pytest.mark.parametrize(("args", "env", "said"), [
    (["--lane", "medium"], {}, "--lane='medium' is not a lane"),
    (["--lane", ""], {}, "--lane='' is not a lane"),
    ([], {"TOREN_LANE": "LONG\x1b[31m"}, "TOREN_LANE="),
    ([], {"TOREN_LANE": "x" * 10_000}, "TOREN_LANE="),
])
def test_a_bad_lane_is_refused_before_anything_starts(toren_cli, tmp_path: Path,
                                                      args: list[str], env: dict[str, str],
                                                      said: str) -> None:
    crews = tmp_path / "crews"
    write_agent_dir(crews, "quick")
    done = toren_cli("worker", "--dir", str(crews), *args, env=env)
    assert done.returncode == 1
    assert said in done.stderr and "use short" in done.stderr
    assert "\x1b[31m" not in done.stderr and len(done.stderr) < 500


def test_the_lane_option_wins_over_toren_lane_and_dev_serves_every_lane(
        toren_cli, start_toren, database_url: str, tmp_path: Path) -> None:
    crews = tmp_path / "crews"
    write_agent_dir(crews, "quick")
    write_agent_dir(crews, "slow", runtime="long")
    env = {"DATABASE_URL": database_url, "TOREN_LANE": "short"}
    worker = start_toren("worker", "--dir", str(crews), "--lane", "long", "--json", env=env)
    ready = worker.next_json()
    assert (ready["lane"], ready["lane_agents"]) == ("long", ["slow"])
    assert worker.stop(signal.SIGTERM) == 0
    dev = start_toren("dev", "--dir", str(crews), "--port", "0", "--json", env=env)
    dev.next_json()
    snapshot = top(toren_cli, {"DATABASE_URL": database_url})
    assert [worker["lane"] for worker in snapshot["workers"]] == ["all"]
    assert {name: info["served_by"] for name, info in snapshot["agents"].items()} == {
        "quick": 1, "slow": 1}
    dev.stop()
