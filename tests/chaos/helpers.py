"""Helpers shared by the tests that SIGKILL real ``toren worker`` processes (tests/e2e) and by
the soak (``python -m tests.chaos.soak``), which runs outside pytest and so has no fixtures.

``create_run`` and ``start_worker`` take the ``toren_cli``/``start_toren`` fixtures of
tests/conftest.py, or the ``TorenLauncher`` below, which offers the same two callables.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg

from tests.conftest import COMMAND_TIMEOUT_S, TOREN, clean_env, stop_processes
from toren.core.events import Event
from toren.testing import OutputProcess


def idempotent_tools_source(names: Sequence[str], effects: Path | None = None) -> str:
    """``tools.py`` source of idempotent tools ``name(text) -> "result <i> for <text>"``.

    With ``effects``, each tool appends its call's idempotency key (one line, an atomic
    ``O_APPEND`` write) to that file: a record of executions kept outside the database.
    """
    lines = ["from toren import current_tool_call, tool", ""]
    for i, name in enumerate(names):
        lines += [
            "@tool(idempotent=True)",
            f"def {name}(text: str) -> str:",
            f'    """Tool number {i}."""',
        ]
        if effects is not None:
            lines += [
                f"    with open({str(effects)!r}, 'a') as f:",
                "        f.write(current_tool_call().idempotency_key + '\\n')",
            ]
        lines += [f"    return f'result {i} for ' + text", ""]
    return "\n".join(lines) + "\n"


def run_events(url: str, schema: str, run_id: str) -> list[Event]:
    """Every event of one run, by stream and seq, with the time its transaction started."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            f"SELECT stream, seq, type, data, created_at FROM {schema}.events "
            "WHERE run_id = %s ORDER BY stream, seq", [run_id]).fetchall()
    return [Event(run_id, s, q, t, d, at) for s, q, t, d, at in rows]


def run_row(url: str, schema: str, run_id: str) -> tuple[str, Any, Any]:
    """``(status, output, error)`` of one run."""
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT status, output, error FROM {schema}.runs WHERE id = %s",
                           [run_id]).fetchone()
    assert row is not None, f"no run {run_id} in {schema}"
    return row


def create_run(toren_cli: Callable[..., subprocess.CompletedProcess[str]], directory: Path,
               agent: str, text: str, env: dict[str, str]) -> str:
    """Enqueue a run with ``toren run --no-follow``; its id."""
    done = toren_cli("run", agent, text, "--no-follow", "--json", "--dir", str(directory),
                     env=env)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def start_worker(start_toren: Callable[..., OutputProcess], directory: Path,
                 env: dict[str, str]) -> OutputProcess:
    """A ``toren worker --json`` process that has printed its ready line."""
    worker = start_toren("worker", "--dir", str(directory), "--json", env=env)
    assert worker.next_json()["event"] == "ready"
    return worker


def work_then_kill(start_toren: Callable[..., OutputProcess], directory: Path,
                   env: dict[str, str], seconds: float) -> None:
    """Start a worker, let it work ``seconds``, SIGKILL it (wherever it is) and reap it."""
    worker = start_worker(start_toren, directory, env)
    time.sleep(seconds)
    worker.proc.kill()
    worker.proc.wait(timeout=10)


class TorenLauncher:
    """``toren`` subprocesses outside pytest, with the environment the fixtures give them.

    ``cli`` and ``start`` have the signatures of the ``toren_cli`` and ``start_toren``
    fixtures; ``close()`` stops every process still running (SIGTERM, then SIGKILL).
    """

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.env = clean_env(workdir / "toren-home")
        self.started: list[OutputProcess] = []

    def _merged(self, env: Mapping[str, str | None] | None) -> dict[str, str]:
        merged = dict(self.env)
        for key, value in (env or {}).items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return merged

    def cli(self, *args: str, env: Mapping[str, str | None] | None = None,
            timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(TOREN), *args], env=self._merged(env), cwd=self.workdir,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def start(self, *args: str, env: Mapping[str, str | None] | None = None) -> OutputProcess:
        process = OutputProcess([str(TOREN), *args], env=self._merged(env), cwd=self.workdir,
                                stderr_path=self.workdir / f"toren-{uuid.uuid4().hex[:8]}.stderr")
        self.started.append(process)
        return process

    def close(self) -> None:
        stop_processes(self.started)
        self.started = []
