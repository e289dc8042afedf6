"""Resolving and describing the database URL, and the first connection with a clear error."""

from __future__ import annotations

import asyncio

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from toren.plugin import ConfigError, DatabaseTlsError, DatabaseUnavailable


def describe_url(url: str) -> str:
    """``user@host:port/dbname`` without the password, for startup lines and errors; a
    multi-host URL's hosts each with its port (``user@db1:5432,db2:5432/dbname``)."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ConfigError("DATABASE_URL is not a valid libpq URL or conninfo: "
                          f"{' '.join(str(exc).split())}") from None
    hosts = str(params.get("host") or "localhost").split(",")
    # an empty port is the default; one port is every host's, as libpq reads them
    ports = [port or "5432" for port in str(params.get("port") or "").split(",")]
    if len(ports) == 1:
        ports *= len(hosts)
    where = ",".join(f"socket {host}" if host.startswith("/") else f"{host}:{port}"
                     for host, port in zip(hosts, ports, strict=False))
    user = str(params.get("user") or "")
    return f"{user + '@' if user else ''}{where}/{params.get('dbname') or user}"


def tcp_timeout_params(timeout_s: float) -> dict[str, int]:
    """libpq's TCP parameters that give up a connection whose peer went silent within about
    ``timeout_s``: ``tcp_user_timeout`` (data sent and not acknowledged for that long), and
    keepalives probing an idle connection after half of it, three probes a sixth of it apart
    (the LISTEN connections are idle for hours). Without them a half-open connection hangs
    until the kernel's own limits: about 15 minutes with data in flight, for ever when idle.
    libpq ignores them on a Unix-domain socket."""
    params = {"tcp_user_timeout": max(1, round(timeout_s * 1000)), "keepalives": 1,
              "keepalives_idle": max(1, round(timeout_s / 2)),
              "keepalives_interval": max(1, round(timeout_s / 6)), "keepalives_count": 3}
    if psycopg.pq.version() < 120000:  # a system libpq before 12 refuses tcp_user_timeout
        del params["tcp_user_timeout"]
    return params


def with_tcp_timeouts(url: str, timeout_s: float) -> str:
    """``url`` with ``tcp_timeout_params(timeout_s)`` added, except those it names itself (a
    user's ``keepalives=0`` or ``tcp_user_timeout=...`` in ``DATABASE_URL`` wins)."""
    named = conninfo_to_dict(url)
    missing = {key: value for key, value in tcp_timeout_params(timeout_s).items()
               if key not in named}
    return make_conninfo(url, **missing) if missing else url


async def check_connection(url: str, timeout_s: float) -> str:
    """Open and close one connection within ``timeout_s``; return the server version.

    Raises ``DatabaseUnavailable`` naming the host and the reason, never hanging longer.
    """
    where = describe_url(url)
    try:
        async with asyncio.timeout(timeout_s + 1):
            conn = await psycopg.AsyncConnection.connect(
                url, connect_timeout=max(1, int(timeout_s)), autocommit=True)
            async with conn:
                cursor = await conn.execute("SHOW server_version")
                row = await cursor.fetchone()
                return str(row[0]) if row else "?"
    except TimeoutError:
        raise DatabaseUnavailable(
            f"cannot connect to Postgres at {where}: no answer within {timeout_s:g}s "
            "(check the host, port and firewall; TOREN_CONNECT_TIMEOUT raises the limit)"
        ) from None
    except psycopg.OperationalError as exc:
        # libpq puts its hint on a line of its own ("...: Connection refused\n\tIs the server
        # running on that host...?"): keep the lines apart as sentences
        lines = [" ".join(line.split()) for line in str(exc).splitlines() if line.strip()]
        reason = " ".join(line if line[-1] in ".?!" or line is lines[-1] else line + "."
                          for line in lines) or type(exc).__name__
        tls_hint = _tls_hint(reason)
        if tls_hint is not None:
            raise DatabaseTlsError(f"cannot connect to Postgres at {where}: {reason}; "
                                   f"{tls_hint}") from None
        if "timeout" in reason.lower():
            reason += " (TOREN_CONNECT_TIMEOUT raises the limit)"
        raise DatabaseUnavailable(f"cannot connect to Postgres at {where}: {reason}") from None


#: libpq's words for a server certificate it refused, and what to do about each.
_TLS_HINTS = (
    ("certificate verify failed",
     "the server's certificate is not signed by a CA this client trusts: set sslrootcert= in "
     "DATABASE_URL to the file of the CA that signed it (sslrootcert=system for the "
     "system's CAs)"),
    ("does not match host name",
     "the certificate does not hold the host name in DATABASE_URL: connect with a name it "
     "holds, or issue the server a certificate for this one (sslmode=verify-full checks it)"),
    ("root certificate file",
     "sslrootcert= must name a readable file holding the CA certificate"),
)


def _tls_hint(reason: str) -> str | None:
    """What to do about a refused certificate, or ``None`` if ``reason`` is not one."""
    for words, hint in _TLS_HINTS:
        if words in reason:
            return hint
    return None


#: SQLSTATE ``disk_full``: the server had no room for a write (a table or index it could not
#: extend, a transaction-status file it could not write). The statement failed and its
#: transaction rolled back: nothing of it was kept, and the connection is still good.
DISK_FULL = "53100"


def out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` is Postgres refusing a write for want of disk space."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate == DISK_FULL


def out_of_space_error(exc: psycopg.Error, doing: str) -> DatabaseUnavailable:
    """The error to raise for ``exc`` (``out_of_space``) met while ``doing``: retryable (503
    on the HTTP API, a backoff for a worker), naming the cause and what to do about it."""
    said = " ".join((exc.diag.message_primary or str(exc)).split())
    return DatabaseUnavailable(
        f"the database server has no space left on device ({said}): {doing} failed and "
        "nothing of it was written; free space on the disk of Postgres's data directory (or "
        "grow it); writes succeed again as soon as there is room, with no restart")
