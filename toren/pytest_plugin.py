"""Toren's pytest fixtures (the ``pytest11`` entry point ``toren``): loaded in any pytest run
where toren is installed, so plugin authors get them without a conftest.

- ``scripted_model``: a fresh ``toren.testing.ScriptedModel``.
- ``make_agent_dir``: writes an agent directory under the test's ``tmp_path``.
- ``output_processes``: a list to put started ``OutputProcess`` es in; each is stopped at
  teardown (crash tests start ``toren worker`` processes and SIGKILL some).

They live apart from ``toren.testing`` so that module imports without pytest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from toren.testing import OutputProcess, ScriptedModel, write_agent_dir


@pytest.fixture
def scripted_model() -> ScriptedModel:
    """A fresh offline model; inspect ``.calls`` after the code under test ran."""
    return ScriptedModel()


@pytest.fixture
def make_agent_dir(tmp_path: Path) -> Callable[..., Path]:
    """``make_agent_dir(name, **fields)`` -> a new agent directory under ``tmp_path``."""

    def make(name: str = "test-agent", **kwargs: Any) -> Path:
        return write_agent_dir(tmp_path, name, **kwargs)

    return make


@pytest.fixture
def output_processes() -> Iterator[list[OutputProcess]]:
    """Append each ``OutputProcess`` a test starts; those still running are stopped at
    teardown."""
    started: list[OutputProcess] = []
    yield started
    for process in started:
        process.stop()
