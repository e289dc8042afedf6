"""The embedded Postgres (``pgserver``): real Postgres binaries from a wheel, data under TOREN_HOME.

Every Toren process started from the same directory shares one server: ``pgserver`` finds the
running postmaster through ``postmaster.pid`` and counts the processes using it (their ids in
``pgdata/.handle_pids.json``); the last one to exit normally asks the server to stop and exits
without waiting for its shutdown checkpoint (a process starting meanwhile waits for it). A
process killed with SIGKILL leaves the server up for the others (and for its own restart), and
its id in that list; the next process to join or leave forgets the ids of processes that are
gone, so the server again stops with the last live process.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg
from psycopg import sql

from toren.plugin import DatabaseUnavailable

DATABASE_NAME = "toren"
#: pgserver's list of the processes using the server (a JSON list of ids), in pgdata.
HANDLES_FILE = ".handle_pids.json"
#: Toren's note of when each process on that list started ({"pid": create time}), so a dead
#: process whose id the system gave to another one is still recognised as gone.
HANDLE_STARTS_FILE = ".toren_handle_starts.json"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbeddedPostgres:
    """A running embedded server and the URL of Toren's database on it."""

    pgdata: Path
    url: str
    server_url: str
    pid: int | None


def ensure_embedded(home: Path) -> EmbeddedPostgres:
    """Start (or join) the embedded server under ``home/pgdata`` and ensure the database exists.

    Blocking: it runs ``initdb``/``pg_ctl`` on first use; call it with ``asyncio.to_thread``.
    """
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI);
            # pgserver then uses /tmp/runtime-<uid>, which is what we want anyway.
            warnings.simplefilter("ignore")
            from pgserver import _commands
            from pgserver.postgres_server import PostgresServer, get_server
    except ImportError as exc:  # pragma: no cover - pgserver is a declared dependency
        raise DatabaseUnavailable(
            "DATABASE_URL is unset and the embedded Postgres (pgserver) is not installed: "
            "pip install pgserver, or set DATABASE_URL") from exc
    home.mkdir(parents=True, exist_ok=True)
    pgdata = home / "pgdata"
    try:
        # pgserver does not guard initdb against another process doing the same at the same
        # moment (one of them fails on the existing directory): take turns
        with _exclusive(home / "embedded.lock"):
            # a server the last process left is finishing its shutdown checkpoint on its own:
            # joining it now would fail ("the database system is shutting down")
            _wait_while_stopping(pgdata)
            # the lock pgserver holds while a process joins or leaves (its exit handler
            # rewrites the list): without it, a process leaving now could be written back
            _forget_dead_handles(PostgresServer._lock, pgdata)
            # pgserver would stop the server with `pg_ctl -w stop` when the last process
            # exits, waiting for the shutdown checkpoint's fsyncs (1.3 s on a quiet disk, more
            # than 20 s on one the whole test suite writes to): _leave_at_exit stops it
            # without waiting
            server = get_server(pgdata, cleanup_mode=None)
            _note_start(pgdata, os.getpid())
            # pg_ctl is made at import (one function per Postgres binary): not typed
            _leave_at_exit(server, PostgresServer._lock, getattr(_commands, "pg_ctl"))  # noqa: B009
    except Exception as exc:
        log_file = pgdata / "log"
        raise DatabaseUnavailable(
            f"the embedded Postgres in {pgdata} failed to start ({type(exc).__name__}: {exc}); "
            f"see {log_file}") from exc
    server_url = server.get_uri()
    _create_database(server_url, DATABASE_NAME)
    return EmbeddedPostgres(pgdata=pgdata, url=server.get_uri(DATABASE_NAME),
                            server_url=server_url, pid=server.get_pid())


#: The data directories this process registered ``_leave`` for (once each).
_LEAVING: set[Path] = set()
#: Longest wait for a server that is stopping before joining (or starting) it anyway.
STOPPING_WAIT_S = 120.0


def _leave_at_exit(server: Any, lock: contextlib.AbstractContextManager[Any],
                   pg_ctl: Callable[..., Any]) -> None:
    """At exit, ``_leave`` the server (once per data directory and process). Registered
    after pgserver's own exit handler, so it runs first (atexit is last in, first out);
    pgserver's then finds this process already gone from the list and does nothing."""
    if server.pgdata in _LEAVING:
        return
    _LEAVING.add(server.pgdata)
    atexit.register(_leave, server, lock, pg_ctl)


def _leave(server: Any, lock: contextlib.AbstractContextManager[Any],
           pg_ctl: Callable[..., Any]) -> None:
    """Take this process off pgserver's list of the processes using the server and, if it
    was the last one, ask the server to stop (a fast shutdown: its sessions end, the shutdown
    checkpoint is written) without waiting for it to finish, so the process exits at once;
    the next process to start waits for that shutdown first (``_wait_while_stopping``).

    Processes that are gone (SIGKILL) are forgotten first: one killed after this process
    joined would otherwise keep the server up after the last live process left (the
    Quickstart's ``kill -9`` of a ``toren run`` beside a serving ``toren dev``)."""
    _forget_dead_handles(lock, server.pgdata)
    with lock:
        pids = server.global_process_id_list.get_and_remove(os.getpid())
        if pids != [os.getpid()]:
            return  # another process still uses the server (or this one never joined)
        info = server._postmaster_info
        if info is None or not info.process.is_running():
            return
        try:
            pg_ctl(["-m", "fast", "-W", "stop"], pgdata=server.pgdata, user=server.system_user)
        except Exception as exc:  # already stopped, or pg_ctl failed: nothing to wait for
            log.warning("stopping the embedded Postgres in %s failed: %s", server.pgdata, exc)


def _wait_while_stopping(pgdata: Path, timeout_s: float = STOPPING_WAIT_S) -> None:
    """Wait while the server of ``pgdata`` is shutting down (``postmaster.pid`` says
    ``stopping`` and its postmaster runs): the last process left it without waiting.

    Blocking, like ``ensure_embedded``, whose thread (``asyncio.to_thread``) it runs on while
    holding the cross-process lock of ``embedded.lock``, never on the event loop. The
    postmaster exits when its shutdown is done: that exit is what it waits for."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return
    if len(lines) < 8 or lines[7].strip() != "stopping":
        return
    try:
        psutil.Process(int(lines[0])).wait(timeout_s)
    except (psutil.NoSuchProcess, ValueError):  # gone already, or not a pid
        return
    except psutil.TimeoutExpired:
        log.warning("the embedded Postgres in %s has been stopping for %.0f s; starting "
                    "anyway", pgdata, timeout_s)


def _forget_dead_handles(lock: contextlib.AbstractContextManager[Any], pgdata: Path) -> None:
    """Remove from pgserver's handle list the processes that are gone (SIGKILL, OOM, a power
    cut): with their ids left there, pgserver would never see the last handle go, and the
    server would outlive every later process."""
    handles = pgdata / HANDLES_FILE
    if not handles.exists():
        return
    with lock:
        try:
            pids = [int(pid) for pid in json.loads(handles.read_text())]
        except (ValueError, TypeError) as exc:
            log.warning("replacing the unreadable %s (%s): the embedded Postgres then stops "
                        "with the last process that joins it from now on", handles, exc)
            handles.write_text("[]")  # pgserver would fail on it
            pids = []
        starts = _read_starts(pgdata)
        alive = [pid for pid in pids if _running(pid, starts.get(pid))]
        if alive != pids:
            log.info("forgetting processes that are gone from %s: %s", handles,
                     sorted(set(pids) - set(alive)))
            handles.write_text(json.dumps(alive))
        _write_starts(pgdata, {pid: start for pid, start in starts.items() if pid in alive})


def _running(pid: int, started: float | None) -> bool:
    """Whether process ``pid`` still runs (a zombie does not) and, if we noted when it
    started, is still that process."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return started is None or abs(process.create_time() - started) < 1.0
    except psutil.NoSuchProcess:  # ZombieProcess included
        return False
    except psutil.AccessDenied:  # another user's process: it may be using the server
        return True


def _note_start(pgdata: Path, pid: int) -> None:
    try:
        started = psutil.Process(pid).create_time()
    except psutil.Error:
        return
    _write_starts(pgdata, {**_read_starts(pgdata), pid: started})


def _read_starts(pgdata: Path) -> dict[int, float]:
    try:
        raw = json.loads((pgdata / HANDLE_STARTS_FILE).read_text())
        return {int(pid): float(started) for pid, started in raw.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def _write_starts(pgdata: Path, starts: dict[int, float]) -> None:
    (pgdata / HANDLE_STARTS_FILE).write_text(
        json.dumps({str(pid): started for pid, started in sorted(starts.items())}))


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (a file created if missing) across processes."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _create_database(server_url: str, name: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists:
            return
        # another process may create it between our check and our CREATE
        with contextlib.suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
