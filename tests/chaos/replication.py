"""A primary and a streaming replica: two local Postgres servers from the binaries the embedded
Postgres (``pgserver``) ships, the replica made with ``pg_basebackup``, for failover tests.

The replica streams from the primary through a ``LinkProxy`` (the caller's), so a test can hold
back what the replica receives (``cut()``) before the primary dies: with asynchronous
replication, the commits made meanwhile are the ones a failover loses. ``kill_primary()``
SIGKILLs the primary's postmaster and every process of it at once (a host that dies);
``promote()`` makes the replica the primary. ``start_old_primary()`` brings the dead primary's
data back up on a port nobody else knows, to count from its own log what the failover lost.

Postgres refuses to run as root: as root the servers run as the user pgserver itself creates
for its embedded server (``pgserver``), as ``toren_postgres.embedded`` does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import psutil
import psycopg

with warnings.catch_warnings():
    # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI)
    warnings.simplefilter("ignore")
    from pgserver._commands import POSTGRES_BIN_PATH

#: The name the replica gives the primary (``application_name``): what
#: ``synchronous_standby_names`` lists in synchronous mode.
STANDBY_NAME = "toren_replica"
DATABASE = "toren"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ReplicatedPostgres:
    """A primary on ``primary_port`` and a hot standby on ``replica_port`` streaming from it
    (through ``replication_url``'s host and port, a proxy's), in ``base``; ``synchronous``
    makes every commit wait for the standby's flush (``synchronous_standby_names`` with
    ``synchronous_commit=on``). ``close()`` kills whatever still runs and removes ``base``."""

    def __init__(self, *, synchronous: bool) -> None:
        self.synchronous = synchronous
        # not under pytest's tmp_path, whose private permissions the server's user cannot cross
        self.base = Path(tempfile.mkdtemp(prefix="toren-failover-"))
        self.user: str | None = None
        if os.geteuid() == 0:
            from pgserver.utils import ensure_prefix_permissions, ensure_user_exists

            self.user = "pgserver"
            ensure_user_exists(self.user)
            ensure_prefix_permissions(self.base)
            shutil.chown(self.base, self.user, self.user)
        self.primary_dir = self.base / "primary"
        self.replica_dir = self.base / "replica"
        self.primary_port = free_port()
        self.replica_port = free_port()
        self._started: list[Path] = []

    # -- URLs ----------------------------------------------------------------------------------

    def url(self, port: int, database: str = DATABASE) -> str:
        return f"postgresql://postgres@127.0.0.1:{port}/{database}"

    @property
    def primary_url(self) -> str:
        return self.url(self.primary_port)

    @property
    def replica_url(self) -> str:
        return self.url(self.replica_port)

    @property
    def multi_host_url(self) -> str:
        """What Toren is given: both servers, the one that takes writes wins."""
        return (f"postgresql://postgres@127.0.0.1:{self.primary_port},"
                f"127.0.0.1:{self.replica_port}/{DATABASE}?target_session_attrs=read-write")

    # -- life cycle ----------------------------------------------------------------------------

    def start_primary(self) -> None:
        """initdb, configure and start the primary; create the database Toren uses."""
        self._run("initdb", "-D", str(self.primary_dir), "--auth=trust", "--encoding=utf8",
                  "-U", "postgres")
        settings = [
            "listen_addresses = '127.0.0.1'",
            f"unix_socket_directories = '{self.base}'",
            "wal_level = replica", "max_wal_senders = 4", "hot_standby = on",
            # nothing here survives the test: durability against a power cut is not tested
            "fsync = off", "full_page_writes = off",
            # how a worker hears that a server died: its connections are reset at once
            "wal_sender_timeout = 10s",
        ]
        with (self.primary_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n".join(settings) + "\n")
        self._start(self.primary_dir, self.primary_port)
        with psycopg.connect(self.url(self.primary_port, "postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")

    def start_replica(self, replication_url: str) -> None:
        """Copy the primary with ``pg_basebackup`` and start the copy as a hot standby that
        streams from ``replication_url`` (host and port only are used); wait until it streams
        (and, in synchronous mode, is the synchronous standby)."""
        params = psycopg.conninfo.conninfo_to_dict(replication_url)
        self._run("pg_basebackup", "-D", str(self.replica_dir), "-h", "127.0.0.1",
                  "-p", str(self.primary_port), "-U", "postgres", "-X", "stream", "-R",
                  "--checkpoint=fast")
        with (self.replica_dir / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"primary_conninfo = 'host={params['host']} port={params['port']} "
                       f"user=postgres application_name={STANDBY_NAME}'\n")
        self._start(self.replica_dir, self.replica_port)
        wanted = "sync" if self.synchronous else "async"
        with psycopg.connect(self.url(self.primary_port, "postgres"), autocommit=True) as conn:
            if self.synchronous:  # set once the standby exists: commits wait for it from now on
                conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
                conn.execute("ALTER SYSTEM SET synchronous_commit = on")
                conn.execute("SELECT pg_reload_conf()")
            for _ in range(300):
                row = conn.execute("SELECT state, sync_state FROM pg_stat_replication "
                                   "WHERE application_name = %s", [STANDBY_NAME]).fetchone()
                if row == ("streaming", wanted):
                    return
                time.sleep(0.1)
        raise RuntimeError(f"the replica did not start streaming ({wanted}): {row}")

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster and all its processes at once, and reap them."""
        _kill_tree(self._postmaster(self.primary_dir))

    def promote(self) -> None:
        """Promote the replica (``pg_ctl promote``, waiting until it takes writes)."""
        self._run("pg_ctl", "-D", str(self.replica_dir), "-w", "-t", "60", "promote")

    def start_old_primary(self) -> str:
        """Start the killed primary's data alone on a fresh port (crash recovery replays its
        whole log, the commits the replica never received included); its URL. Nothing else
        knows the port, so no worker can write there."""
        standby = self.primary_dir / "standby.signal"
        assert not standby.exists()
        with (self.primary_dir / "postgresql.auto.conf").open("a") as conf:
            # alone: no standby will acknowledge, and no commit may wait for one
            conf.write("synchronous_standby_names = ''\n")
        port = free_port()
        self._start(self.primary_dir, port)
        return self.url(port)

    def close(self) -> None:
        for pgdata in self._started:
            with contextlib.suppress(Exception):
                _kill_tree(self._postmaster(pgdata))
        shutil.rmtree(self.base, ignore_errors=True)

    # -- internals -----------------------------------------------------------------------------

    def _start(self, pgdata: Path, port: int) -> None:
        self._started.append(pgdata)
        self._run("pg_ctl", "-D", str(pgdata), "-l", str(pgdata / "log"), "-w", "-t", "60",
                  "-o", f"-p {port}", "start")

    def _postmaster(self, pgdata: Path) -> psutil.Process | None:
        try:
            pid = int((pgdata / "postmaster.pid").read_text().splitlines()[0])
            return psutil.Process(pid)
        except (FileNotFoundError, IndexError, ValueError, psutil.NoSuchProcess):
            return None

    def _run(self, program: str, *args: str) -> None:
        command: Sequence[str] = [str(POSTGRES_BIN_PATH / program), *args]
        # a file, not a pipe: the server pg_ctl starts could hold a pipe open (as pgserver notes)
        with tempfile.TemporaryFile("w+") as output:
            done = subprocess.run(command, user=self.user, stdout=output, stderr=output,
                                  text=True, timeout=120, check=False, cwd=self.base)
            if done.returncode != 0:
                output.seek(0)
                raise RuntimeError(f"{program} failed ({done.returncode}): {output.read()}")


def _kill_tree(postmaster: psutil.Process | None) -> None:
    if postmaster is None:
        return
    with contextlib.suppress(psutil.NoSuchProcess):
        processes = [postmaster, *postmaster.children(recursive=True)]
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(processes, timeout=10)
