"""Fixtures: the fake Slack, and ``toren dev`` processes serving agent ``bot`` over Slack."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_slack import FakeSlack
from slack_support import Dev, dev_env, slack_settings, start_dev

from toren.testing import OutputProcess, write_agent_dir


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    fake = FakeSlack().start()
    yield fake
    fake.stop()


@pytest.fixture
def slack_agent(fake_slack: FakeSlack, tmp_path: Path) -> Callable[..., Path]:
    """``slack_agent(tools_py=..., approvals=..., **settings)`` -> the directory of agent
    ``bot``, whose slack channel points at the fake."""

    def make(*, tools_py: str | None = None, approvals: dict[str, Any] | None = None,
             settings: dict[str, Any] | None = None) -> Path:
        extra: dict[str, Any] = {"approvals": approvals} if approvals else {}
        return write_agent_dir(tmp_path / "agents", "bot", tools_py=tools_py, **extra,
                               channels={"slack": settings or slack_settings(fake_slack)})

    return make


@pytest.fixture
def slack_dev(database_url: str, tmp_path: Path, output_processes: list[OutputProcess]
              ) -> Callable[..., Dev]:
    """``slack_dev(directory, **env)`` -> a ready ``toren dev`` process serving it on this
    test's database (stopped at teardown)."""
    count = itertools.count()

    def start(directory: Path, **env: str) -> Dev:
        dev = start_dev(directory, dev_env(database_url, tmp_path / "home", **env),
                        tmp_path / f"dev-{next(count)}.stderr")
        output_processes.append(dev.process)
        return dev

    return start
