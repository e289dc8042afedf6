"""The embedded Postgres (``pgserver``): real Postgres binaries from a wheel, data under TOREN_HOME.

Every Toren process started from the same directory shares one server: ``pgserver`` finds the
running postmaster through ``postmaster.pid`` and counts the processes using it, stopping the
server when the last one exits normally. A process killed with SIGKILL leaves the server up for
the others (and for its own restart).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from toren.errors import DatabaseUnavailable

DATABASE_NAME = "toren"
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
            import pgserver
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
            server = pgserver.get_server(pgdata, cleanup_mode="stop")
    except Exception as exc:
        log_file = pgdata / "log"
        raise DatabaseUnavailable(
            f"the embedded Postgres in {pgdata} failed to start ({type(exc).__name__}: {exc}); "
            f"see {log_file}") from exc
    server_url = server.get_uri()
    _create_database(server_url, DATABASE_NAME)
    return EmbeddedPostgres(pgdata=pgdata, url=server.get_uri(DATABASE_NAME),
                            server_url=server_url, pid=server.get_pid())


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
