"""``toren run --priority``: the run keeps it (its messages carry it); out of range is refused
before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from toren.testing import write_agent_dir


def test_toren_run_priority_is_kept_and_checked(toren_cli, database_url: str,
                                                tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "ranked")
    env = {"DATABASE_URL": database_url}
    done = toren_cli("run", "ranked", "urgent", "--priority", "42", "--no-follow", "--json",
                     "--dir", str(directory), env=env)
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["id"]
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT priority FROM toren_control.queue WHERE run_id = %s",
                            [run_id]).fetchall()
    assert rows == [(42,)]

    refused = toren_cli("run", "ranked", "x", "--priority", "101", "--no-follow",
                        "--dir", str(directory), env=env)
    assert refused.returncode == 2
    assert "Invalid value for '--priority'" in refused.stderr
    with psycopg.connect(database_url) as conn:
        count = conn.execute("SELECT count(*) FROM agent_ranked.runs").fetchone()
    assert count == (1,)
