"""The wheels, as a user without the checkout installs them (docs/README.md, "Installing"):
``scripts/build-wheels.sh`` builds the kernel's and every plugin's wheel into one folder, and a
fresh virtual environment with only those wheels (and their third-party dependencies from the
package index) runs ``toren init`` and ``toren run`` on the offline model against a brand-new
database. Nothing of the checkout is importable there: no PYTHONPATH, no editable install.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import clean_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = sorted(path.name for path in (ROOT / "plugins").iterdir()
                 if (path / "pyproject.toml").is_file())


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The documented command's wheels, by distribution name."""
    out = tmp_path_factory.mktemp("wheels")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    built = subprocess.run(["bash", str(ROOT / "scripts" / "build-wheels.sh"), str(out)],
                           env=env | {"PYTHON": sys.executable}, text=True,
                           capture_output=True, timeout=600, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    found = {path.name.split("-")[0].replace("_", "-"): path for path in out.glob("*.whl")}
    assert set(found) == {"toren", *PLUGINS}, sorted(found)
    yield found


def test_every_wheel_carries_the_license(wheels: dict[str, Path]) -> None:
    """Apache-2.0 requires the license text with every copy: each wheel has it in its
    dist-info (a plugin's LICENSE is a link to the checkout's one, so it never drifts)."""
    expected = (ROOT / "LICENSE").read_bytes()
    assert b"Apache License" in expected
    for name, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as archive:
            licenses = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
            assert len(licenses) == 1, (name, archive.namelist())
            assert archive.read(licenses[0]) == expected, name


def install(where: Path, wheel_files: list[Path]) -> Path:
    """A fresh venv at ``where`` with ``wheel_files`` installed by path; its ``toren``."""
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", *map(str, wheel_files)],
                          env=env, text=True, capture_output=True, timeout=800, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return where / "bin" / "toren"


def init_and_run(toren: Path, work: Path, database: str) -> str:
    """``toren init my-agent`` then ``toren run`` of it in ``work``; the run's output."""
    env = clean_env(work / "home", DATABASE_URL=database, TOREN_LOAD_PLUGINS=None,
                    PYTHONPATH=None)
    work.mkdir()
    created = subprocess.run([str(toren), "init", "my-agent"], cwd=work, env=env, text=True,
                             capture_output=True, timeout=120, check=False)
    assert created.returncode == 0, created.stdout + created.stderr
    assert f"Next: {toren} dev --dir my-agent" in created.stdout
    ran = subprocess.run([str(toren), "run", "my-agent", "count these four words", "--dir",
                          "my-agent"], cwd=work, env=env, text=True, capture_output=True,
                         timeout=300, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "completed (end_turn)" in ran.stdout, ran.stdout
    assert "word_count: 4" in ran.stdout, ran.stdout
    return ran.stdout


def imported_from(toren: Path, module: str) -> str:
    python = toren.parent / "python"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    # from the venv's own directory: `python -c` puts the working directory first on sys.path,
    # and the checkout's is a toren package too
    return subprocess.run([str(python), "-c", f"import {module}; print({module}.__file__)"],
                          cwd=toren.parent, env=env, text=True, capture_output=True,
                          timeout=60, check=True).stdout.strip()


def test_the_kernel_and_toren_postgres_alone_init_and_run(
        wheels: dict[str, Path], tmp_path: Path, empty_database: tuple[str, str]) -> None:
    toren = install(tmp_path / "venv", [wheels["toren"], wheels["toren-postgres"]])
    assert imported_from(toren, "toren").startswith(str(tmp_path / "venv"))
    init_and_run(toren, tmp_path / "work", empty_database[1])


def test_every_wheel_together_init_and_run(
        wheels: dict[str, Path], tmp_path: Path, empty_database: tuple[str, str]) -> None:
    toren = install(tmp_path / "venv", list(wheels.values()))
    env = clean_env(tmp_path / "home", TOREN_LOAD_PLUGINS=None, PYTHONPATH=None)
    listed = subprocess.run([str(toren), "plugins", "--json"], env=env, text=True,
                            capture_output=True, timeout=120, check=False)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    for name in PLUGINS:  # every plugin is installed, and loads
        assert name in listed.stdout, (name, listed.stdout)
    for module in ("toren", "toren_postgres", "toren_sandbox"):
        assert imported_from(toren, module).startswith(str(tmp_path / "venv"))
    init_and_run(toren, tmp_path / "work", empty_database[1])
