"""Two fleets on one database: ``toren worker --dir a`` and ``toren worker --dir b`` (real
processes) each claim only their own agents' messages, and a run of an agent that no live
fleet serves stays queued, untouched, until a fleet that serves it starts."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.chaos.helpers import create_run, run_row, start_worker
from tests.conftest import wait_until
from toren.testing import OutputProcess, write_agent_dir

RUNS_PER_AGENT = 2


def worker_ids(url: str) -> dict[int, tuple[str, list[str]]]:
    """Signed-in workers by process id: ``(worker id, agents served)``."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT pid, id, agents FROM toren_control.workers").fetchall()
    return {pid: (worker_id, list(agents)) for pid, worker_id, agents in rows}


def lease_holders(url: str, run_id: str) -> dict[str, str]:
    """Who last held each stream of a run: stream -> worker id (leases outlive their
    release: only ``expires_at`` moves)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT stream, holder FROM toren_control.leases WHERE run_id = %s",
                            [run_id]).fetchall()
    return dict(rows)


def messages(url: str, run_id: str) -> list[tuple[str, str | None, int]]:
    """The run's queue messages: ``(agent, claimed_by, attempts)``."""
    with psycopg.connect(url) as conn:
        return [tuple(row) for row in conn.execute(  # type: ignore[misc]
            "SELECT agent, claimed_by, attempts FROM toren_control.queue WHERE run_id = %s",
            [run_id]).fetchall()]


def completed(url: str, schema: str, run_ids: list[str]) -> bool:
    return all(run_row(url, schema, run_id)[0] == "completed" for run_id in run_ids)


def signed_in(url: str, worker: OutputProcess) -> str:
    """The id the worker process signed in with."""
    found = worker_ids(url).get(worker.proc.pid)
    assert found is not None, f"worker {worker.proc.pid} has not signed in: {worker_ids(url)}"
    return found[0]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_each_fleet_claims_only_its_own_agents(start_toren, toren_cli, database_url: str,
                                               tmp_path: Path) -> None:
    fleet_a = write_agent_dir(tmp_path / "a", "alpha").parent
    fleet_b = write_agent_dir(tmp_path / "b", "beta").parent
    fleet_c = write_agent_dir(tmp_path / "c", "gamma").parent  # no worker serves it
    env = {"DATABASE_URL": database_url, "TOREN_LEASE_TTL": "2", "TOREN_POLL_INTERVAL": "0.2",
           "TOREN_GUARDIAN_INTERVAL": "0.5"}
    orphan = create_run(toren_cli, fleet_c, "gamma", "nobody serves me", env)

    worker_a = start_worker(start_toren, fleet_a, env)
    worker_b = start_worker(start_toren, fleet_b, env)
    id_a, id_b = signed_in(database_url, worker_a), signed_in(database_url, worker_b)
    assert worker_ids(database_url)[worker_a.proc.pid][1] == ["alpha"]
    assert worker_ids(database_url)[worker_b.proc.pid][1] == ["beta"]

    # both fleets are polling (and woken by every notification) while both agents' runs arrive
    alpha, beta = [], []
    for i in range(RUNS_PER_AGENT):
        alpha.append(create_run(toren_cli, fleet_a, "alpha", f"alpha {i}", env))
        beta.append(create_run(toren_cli, fleet_b, "beta", f"beta {i}", env))
    assert wait_until(lambda: completed(database_url, "agent_alpha", alpha)
                      and completed(database_url, "agent_beta", beta), 120), (
        worker_a.stderr, worker_b.stderr)

    for run_id in alpha:
        holders = lease_holders(database_url, run_id)
        assert set(holders) >= {"run", "task:main"}
        assert set(holders.values()) == {id_a}, holders
    for run_id in beta:
        assert set(lease_holders(database_url, run_id).values()) == {id_b}
    # the orphan was never claimed, not even once, by either fleet
    assert run_row(database_url, "agent_gamma", orphan)[0] == "queued"
    assert messages(database_url, orphan) == [("gamma", None, 0)]
    assert lease_holders(database_url, orphan) == {}

    # fleet b signs out: its agent's new run waits, while fleet a goes on working its own
    assert worker_b.stop() == 0
    waiting = create_run(toren_cli, fleet_b, "beta", "b is away", env)
    later = create_run(toren_cli, fleet_a, "alpha", "a is here", env)
    assert wait_until(lambda: completed(database_url, "agent_alpha", [later]), 60)
    assert set(lease_holders(database_url, later).values()) == {id_a}
    assert run_row(database_url, "agent_beta", waiting)[0] == "queued"
    assert messages(database_url, waiting) == [("beta", None, 0)]

    # a fleet that serves gamma (beside beta) picks up both runs that waited
    both = tmp_path / "both"
    both.mkdir()
    (both / "beta").symlink_to(fleet_b / "beta")
    (both / "gamma").symlink_to(fleet_c / "gamma")
    worker_bc = start_worker(start_toren, both, env)
    id_bc = signed_in(database_url, worker_bc)
    assert wait_until(lambda: completed(database_url, "agent_beta", [waiting])
                      and completed(database_url, "agent_gamma", [orphan]), 60)
    assert set(lease_holders(database_url, waiting).values()) == {id_bc}
    assert set(lease_holders(database_url, orphan).values()) == {id_bc}
    assert id_bc not in (id_a, id_b)
