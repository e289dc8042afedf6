"""The house rules that tools can check: lint, types (mypy strict) and the layering."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = BIN / name
    return str(found) if found.exists() else (shutil.which(name) or name)


def test_ruff_finds_nothing() -> None:
    done = subprocess.run([tool("ruff"), "check", "."], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_lints_only_our_folders_not_a_virtual_environment_of_any_name() -> None:
    """A venv made in the checkout under a name of its own (not .venv) is not linted: its
    scripts and packages are not ours, and used to fail the check above."""
    venv = ROOT / f"py-env-{os.getpid()}"
    try:
        (venv / "bin").mkdir(parents=True)
        (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
        (venv / "bin" / "activate_this.py").write_text("import os\n")  # unused: F401
        done = subprocess.run([tool("ruff"), "check", "--show-files", "."], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
    finally:
        shutil.rmtree(venv, ignore_errors=True)
    listed = done.stdout.splitlines()
    assert str(ROOT / "toren" / "__init__.py") in listed
    assert not [line for line in listed if venv.name in line]


@pytest.mark.timeout(900)
def test_the_kernel_type_checks_strictly() -> None:
    # a fresh clone has no mypy cache: the first check reads every dependency's types
    done = subprocess.run([tool("mypy")], cwd=ROOT, capture_output=True, text=True,
                          timeout=840, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_layers_hold() -> None:
    """import-linter's contracts in pyproject.toml: the kernel imports no plugin, arrows point
    surfaces -> host -> execution -> core, the core imports nothing of toren outside itself and
    has no effects, the seams import only the core."""
    done = subprocess.run([tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
