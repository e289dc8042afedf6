"""``toren.testing`` is product code that benchmarks and scripts import: it must not need pytest
(the venv of ``requirements/dev.txt`` has none), while its fixtures stay a pytest plugin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from toren.testing import ScriptedModel

ROOT = Path(__file__).resolve().parents[2]
#: Makes ``import pytest`` fail in the child, as in a venv without it.
BLOCK_PYTEST = "import sys; sys.modules['pytest'] = None; "


def run_without_pytest(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK_PYTEST + code, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_toren_testing_imports_and_works_without_pytest(tmp_path: Path) -> None:
    done = run_without_pytest(
        "import toren.testing as t; "
        "d = t.write_agent_dir(__import__('pathlib').Path(sys.argv[1]), 'crew'); "
        "print(sorted(p.name for p in d.iterdir()), t.ScriptedModel().model_id, "
        "'pytest' in sys.modules and sys.modules['pytest'] is not None)", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['agent.yaml',", "'prompt.md']", "toren/scripted", "False"]


def test_the_benchmark_starts_without_pytest() -> None:
    done = run_without_pytest(
        "import runpy; sys.argv = ['toren_bench.py', '--help']; "
        "runpy.run_path('bench/toren_bench.py', run_name='__main__')")
    assert done.returncode == 0, done.stderr
    assert "--server-url" in done.stdout


def test_the_fixtures_come_from_the_pytest_plugin(scripted_model: ScriptedModel,
                                                  request: pytest.FixtureRequest) -> None:
    assert isinstance(scripted_model, ScriptedModel)
    plugin = request.config.pluginmanager.get_plugin("toren")
    assert plugin is not None and plugin.__name__ == "toren.pytest_plugin"
