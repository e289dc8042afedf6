"""A worker SIGKILLed between reserving a model call's budget and settling it leaves no
reservation held for ever: once its lease is gone the ledger reconciles it, from the log when
the response was recorded, else at its worst case (the provider may have billed the call)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.chaos.helpers import idempotent_tools_source, run_row
from tests.chaos.test_crash_points import crash_then_recover, env  # noqa: F401 - a fixture
from toren.testing import write_agent_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

BUDGET = 5.0


def reservations(url: str, run_id: str) -> list[tuple[str, float, float | None, int]]:
    with psycopg.connect(url) as conn:
        return [(status, reserved, settled, epoch) for status, reserved, settled, epoch in
                conn.execute("SELECT status, reserved_usd, settled_usd, epoch "
                             "FROM agent_frugal.budget_reservations WHERE run_id = %s "
                             "ORDER BY id", (run_id,))]


@pytest.mark.parametrize(("point", "expired"), [
    # the response died with the worker: the call may have been billed, so it is charged at
    # its worst case, and the repeated call reserves (and settles) its own
    ("after_model_response", 1),
    # the response was recorded but the worker died before settling: settled from the log
    ("after_append@2", 0),
])
def test_a_sigkill_between_reserve_and_settle_leaves_nothing_held(
        start_toren, toren_cli, env: dict[str, str], tmp_path: Path,  # noqa: F811
        point: str, expired: int) -> None:
    directory = write_agent_dir(
        tmp_path, "frugal", tools_py=idempotent_tools_source(["step_00", "step_01"]),
        limits={"maxBudgetUsd": BUDGET},
        pricing={"toren/scripted": {"inputPerMTok": 1.0, "outputPerMTok": 10.0}})
    run_id, events = crash_then_recover(start_toren, toren_cli, directory, "frugal", point,
                                        env, tmp_path)
    assert run_row(env["DATABASE_URL"], "agent_frugal", run_id)[0] == "completed"
    rows = reservations(env["DATABASE_URL"], run_id)
    assert [r for r in rows if r[0] == "held"] == []
    lost = [r for r in rows if r[0] == "expired"]
    assert len(lost) == expired
    assert all(settled == reserved for _status, reserved, settled, _epoch in lost)
    recorded = [e.data["cost_usd"] for e in events if e.type == "ModelCallCompleted"]
    settled = [settled for status, _reserved, settled, _epoch in rows if status == "settled"]
    assert sorted(settled) == pytest.approx(sorted(recorded))  # each recorded call, once
    assert sum(r[2] or 0 for r in rows) <= BUDGET
    # the crashed worker's reservation was made under the first lease
    assert rows[0][3] == 1 and rows[-1][3] == 2
