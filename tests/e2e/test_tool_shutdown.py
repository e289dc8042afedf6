"""A worker stopped with SIGTERM exits within its grace period whatever its tools are doing."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.chaos.helpers import create_run, start_worker
from tests.conftest import wait_until
from toren.testing import write_agent_dir

STUCK_TOOL = '''
import pathlib
import time


def stuck(text: str) -> str:
    """A sync tool that takes two minutes."""
    (pathlib.Path(__file__).parent / "started").touch()
    time.sleep(120)
    return "finally"
'''


@pytest.mark.slow
def test_sigterm_does_not_wait_for_a_running_sync_tool(start_toren, toren_cli, database_url: str,
                                                       tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "stuck", tools_py=STUCK_TOOL)
    env = {"DATABASE_URL": database_url, "TOREN_SHUTDOWN_GRACE": "1"}
    worker = start_worker(start_toren, directory, env)
    create_run(toren_cli, directory, "stuck", "go", env)
    assert wait_until(lambda: (directory / "started").exists(), 60)
    # before tools ran in daemon threads the process waited about two minutes for this one
    assert worker.stop(signal.SIGTERM, timeout=20) == 0, worker.stderr
