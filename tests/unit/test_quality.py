"""The house rules that tools can check: lint, types (mypy strict) and the layering."""

from __future__ import annotations

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


@pytest.mark.timeout(900)
def test_the_kernel_type_checks_strictly() -> None:
    # a fresh clone has no mypy cache: the first check reads every dependency's types
    done = subprocess.run([tool("mypy")], cwd=ROOT, capture_output=True, text=True,
                          timeout=840, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_layers_hold() -> None:
    """import-linter's contracts in pyproject.toml: the kernel imports no plugin, arrows point
    surfaces -> host -> execution -> core, the core has no effects, the seams import no layer."""
    done = subprocess.run([tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
