"""Shared helpers: the real ``toren`` console script in subprocesses, with a clean environment.

Subprocesses get a copy of this process's environment without ``DATABASE_URL`` and ``TOREN_*``,
with ``TOREN_HOME`` in the test's temporary directory and ``TOREN_LOAD_PLUGINS=`` (built-ins
only), so a developer's settings or installed plugins never change what a test sees. Tests about
plugin loading set ``TOREN_LOAD_PLUGINS`` themselves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from toren_postgres.testing import create_database, drop_database

from tests.durable import make_runtime  # noqa: F401 - a fixture, registered by import
from tests.queue_drivers import queue_driver, queue_env  # noqa: F401 - fixtures, by import
from toren.testing import OutputProcess

#: The console script installed next to this interpreter (there is no ``python -m toren``).
TOREN = Path(sys.executable).parent / "toren"
#: Upper bound for any one CLI command; generous for a loaded 2-core machine.
COMMAND_TIMEOUT_S = 60.0


def clean_env(home: Path, **overrides: str | None) -> dict[str, str]:
    """``os.environ`` without ``DATABASE_URL``/``TOREN_*``, plus ``TOREN_HOME`` and overrides.

    An override of ``None`` removes the variable.
    """
    env = {key: value for key, value in os.environ.items()
           if key != "DATABASE_URL" and not key.startswith("TOREN_")}
    env["TOREN_HOME"] = str(home)
    env["TOREN_LOAD_PLUGINS"] = ""
    env["NO_COLOR"] = "1"
    env["COLUMNS"] = "200"  # rich wraps long error lines at the terminal width otherwise
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@pytest.fixture
def toren_env(tmp_path: Path) -> dict[str, str]:
    """A clean environment for ``toren`` subprocesses, with TOREN_HOME under ``tmp_path``."""
    return clean_env(tmp_path / "toren-home")


TorenCli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def toren_cli(toren_env: dict[str, str], tmp_path: Path) -> TorenCli:
    """``toren_cli("db", "migrate", env={...}, cwd=..., timeout=...)`` -> ``CompletedProcess``.

    ``env`` entries are merged over ``toren_env`` (``None`` removes one); ``cwd`` defaults to
    ``tmp_path``; ``input`` is written to its stdin.
    """

    def run(*args: str, env: Mapping[str, str | None] | None = None, cwd: Path | None = None,
            timeout: float = COMMAND_TIMEOUT_S, input: str | None = None
            ) -> subprocess.CompletedProcess[str]:
        merged = dict(toren_env)
        for key, value in (env or {}).items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return subprocess.run([str(TOREN), *args], env=merged, cwd=cwd or tmp_path,
                              capture_output=True, text=True, timeout=timeout, check=False,
                              input=input)

    return run


def one_line(text: str) -> str:
    """The single line of ``text``, failing the test if it has more (or none)."""
    lines = text.splitlines()
    assert len(lines) == 1, f"expected exactly one line, got {len(lines)}:\n{text}"
    return lines[0]


def json_lines(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# -- long-running toren processes ----------------------------------------------------------------


#: Kept under this name for the tests that import it.
TorenProcess = OutputProcess


@pytest.fixture
def start_toren(toren_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., TorenProcess]]:
    """``start_toren("dev", "--port", "0", "--json", env={...})`` -> a running ``TorenProcess``.

    Every process still running at teardown gets SIGTERM (so an embedded Postgres it started
    is stopped cleanly), then SIGKILL if it does not exit.
    """
    started: list[TorenProcess] = []

    def start(*args: str, env: Mapping[str, str | None] | None = None,
              cwd: Path | None = None) -> TorenProcess:
        merged = dict(toren_env)
        for key, value in (env or {}).items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        process = OutputProcess([str(TOREN), *args], env=merged, cwd=cwd or tmp_path,
                                stderr_path=tmp_path / f"toren-{uuid.uuid4().hex[:8]}.stderr")
        started.append(process)
        return process

    yield start
    stop_processes(started)


def stop_processes(processes: list[TorenProcess]) -> None:
    """SIGTERM every process still running (so an embedded Postgres it started stops
    cleanly), wait, SIGKILL what does not exit, and close their output readers."""
    for process in processes:
        if process.proc.poll() is None:
            process.proc.terminate()
    for process in processes:
        try:
            process.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.proc.kill()
            process.proc.wait(timeout=10)
        process.close()


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0, interval: float = 0.1
               ) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` passes; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)


# -- databases -----------------------------------------------------------------------------------


@pytest.fixture
def empty_database(postgres_server_url: str) -> Iterator[tuple[str, str]]:
    """``(name, url)`` of a brand-new database with nothing migrated, dropped after the test."""
    name = f"toren_empty_{uuid.uuid4().hex[:12]}"
    url = create_database(postgres_server_url, name)
    try:
        yield name, url
    finally:
        drop_database(postgres_server_url, name)


@pytest.fixture
def make_role(postgres_server_url: str) -> Iterator[Callable[..., str]]:
    """``make_role()`` -> the name of a new LOGIN role (no superuser, no CREATEDB).

    Roles are cluster-wide, so each gets a unique name and is dropped (with what it owns in the
    databases still present) after the test.
    """
    made: list[str] = []

    def make() -> str:
        name = f"toren_role_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(postgres_server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
                         .format(sql.Identifier(name)))
        made.append(name)
        return name

    yield make
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        for name in made:
            databases = [row[0] for row in conn.execute(
                "SELECT datname FROM pg_database WHERE NOT datistemplate AND datallowconn "
                "AND datname NOT LIKE 'toren_template_%'").fetchall()]
            for dbname in databases:
                try:
                    with psycopg.connect(postgres_server_url, dbname=dbname,
                                         autocommit=True) as db:
                        db.execute(sql.SQL("DROP OWNED BY {} CASCADE")
                                   .format(sql.Identifier(name)))
                except psycopg.OperationalError:
                    pass  # dropped meanwhile
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
