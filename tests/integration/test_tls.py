"""DATABASE_URL with ``sslmode=verify-full`` against a private Postgres with TLS on: the right CA
connects (and the session is encrypted), a wrong CA or a host the certificate does not name is
refused with one line that names the certificate problem."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import trustme

from tests.conftest import TorenCli, one_line
from toren.config import Settings
from toren.errors import DatabaseTlsError, DatabaseUnavailable
from toren.host.runtime import Runtime
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(180)


@dataclass(frozen=True)
class TlsServer:
    port: int
    ca_file: Path
    wrong_ca_file: Path

    def url(self, ca_file: Path, host: str = "localhost") -> str:
        return (f"postgresql://postgres@{host}:{self.port}/postgres"
                f"?sslmode=verify-full&sslrootcert={ca_file}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def openssl_bindir() -> Path:
    """The bin directory of a Postgres built with OpenSSL: the embedded one if it is (the
    pgserver wheels are not), else one on PATH or in Debian's /usr/lib/postgresql."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver._commands import POSTGRES_BIN_PATH
    candidates = [Path(POSTGRES_BIN_PATH)]
    on_path = shutil.which("postgres")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for bindir in candidates:
        if not (bindir / "pg_config").is_file():
            continue
        configure = subprocess.run([str(bindir / "pg_config"), "--configure"],
                                   capture_output=True, text=True, check=False).stdout
        if "--with-openssl" in configure or "--with-ssl=openssl" in configure:
            return bindir
    pytest.fail("no Postgres built with OpenSSL found (the embedded pgserver binaries have no "
                f"SSL support; looked in {', '.join(map(str, candidates))}): install one, "
                "e.g. apt-get install postgresql, or put its bin directory on PATH")


def server_user() -> str | None:
    """Postgres refuses to run as root: then it runs as an unprivileged system user."""
    if os.geteuid() != 0:
        return None
    for name in ("pgserver", "postgres"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    pytest.fail("running as root, and there is no 'pgserver' or 'postgres' user to run "
                "Postgres as")


def run_as(user: str | None, *args: str | Path) -> None:
    done = subprocess.run([str(arg) for arg in args], user=user, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{args[0]} failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def tls_server() -> Iterator[TlsServer]:
    """A private Postgres cluster on 127.0.0.1 with ssl=on, its certificate issued for
    localhost by a CA made here; stopped and deleted afterwards."""
    bindir, user = openssl_bindir(), server_user()
    # not under pytest's tmp_path, whose private permissions the server's user cannot cross
    base = Path(tempfile.mkdtemp(prefix="toren-tls-"))
    ca, wrong_ca = trustme.CA(), trustme.CA()
    issued = ca.issue_cert("localhost")
    cert_file, key_file = base / "server.crt", base / "server.key"
    cert_file.write_bytes(b"".join(pem.bytes() for pem in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key_file))
    key_file.chmod(0o600)  # Postgres refuses a key others can read
    ca_file, wrong_ca_file = base / "ca.pem", base / "wrong-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    wrong_ca.cert_pem.write_to_path(str(wrong_ca_file))
    if user is not None:
        owner = pwd.getpwnam(user)
        for path in (base, cert_file, key_file):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    base.chmod(0o755)
    pgdata, port = base / "pgdata", free_port()
    run_as(user, bindir / "initdb", "-D", pgdata, "--auth=trust", "-U", "postgres",
           "--encoding=utf8")
    try:
        run_as(user, bindir / "pg_ctl", "-D", pgdata, "-w", "-l", base / "log", "-o",
               f"-h 127.0.0.1 -p {port} -k {base} -c ssl=on -c ssl_cert_file={cert_file} "
               f"-c ssl_key_file={key_file}", "start")
        yield TlsServer(port, ca_file, wrong_ca_file)
    finally:
        subprocess.run([str(bindir / "pg_ctl"), "-D", str(pgdata), "-w", "-m", "immediate",
                        "stop"], user=user, capture_output=True, timeout=60, check=False)
        shutil.rmtree(base, ignore_errors=True)


def settings(url: str, tmp_path: Path) -> Settings:
    return Settings(database_url=url, home=tmp_path / "home", load_plugins=(),
                    connect_timeout_s=10)


async def test_verify_full_with_the_right_ca_connects_encrypted(
        tls_server: TlsServer, tmp_path: Path) -> None:
    runtime = Runtime(dirs=[write_agent_dir(tmp_path, "secure")],
                      settings=settings(tls_server.url(tls_server.ca_file), tmp_path))
    await runtime.start(workers=False)
    try:
        run_id = await runtime.start_run("secure", "over TLS")
        assert (await runtime.store.get_run(run_id)) is not None
        async with runtime.store.pool.connection() as conn:  # type: ignore[attr-defined]
            cursor = await conn.execute(
                "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            ssl, version = await cursor.fetchone()
    finally:
        await runtime.stop()
    assert ssl is True
    assert version.startswith("TLSv1.")


async def test_a_wrong_ca_is_refused_naming_the_certificate_problem(
        tls_server: TlsServer, tmp_path: Path) -> None:
    runtime = Runtime(agents=[],
                      settings=settings(tls_server.url(tls_server.wrong_ca_file), tmp_path))

    with pytest.raises(DatabaseTlsError) as info:
        await runtime.start(workers=False)

    error = info.value
    assert isinstance(error, DatabaseUnavailable)  # what callers of store.open() catch
    assert error.retryable is False  # a wrong CA stays wrong
    assert error.message.startswith(
        f"cannot connect to Postgres at postgres@localhost:{tls_server.port}/postgres: ")
    assert "certificate verify failed" in error.message
    assert "set sslrootcert= in DATABASE_URL to the file of the CA that signed it" in error.message
    assert "\n" not in error.message


def migrate(toren_cli: TorenCli, crew: Path, url: str,
            *args: str) -> subprocess.CompletedProcess[str]:
    """``toren db migrate`` of ``crew`` against ``url`` (a TLS connection that should fail)."""
    return toren_cli("db", "migrate", "--dir", str(crew), *args,
                     env={"DATABASE_URL": url, "TOREN_CONNECT_TIMEOUT": "10"})


def test_the_cli_refuses_a_wrong_ca_in_one_line(tls_server: TlsServer, toren_cli: TorenCli,
                                                tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")

    result = migrate(toren_cli, crew, tls_server.url(tls_server.wrong_ca_file), "--json")

    assert result.returncode == 1, result.stderr
    line = one_line(result.stderr)
    assert line.startswith(f"Error: cannot connect to Postgres at postgres@localhost:"
                           f"{tls_server.port}/postgres: ")
    assert "certificate verify failed" in line
    assert "sslrootcert=" in line
    assert "Traceback" not in result.stderr
    assert json.loads(result.stdout)["error"]["code"] == "database_tls_error"


def test_a_host_the_certificate_does_not_name_is_refused(tls_server: TlsServer,
                                                         toren_cli: TorenCli,
                                                         tmp_path: Path) -> None:
    # 127.0.0.1 is the server localhost names, but the certificate names localhost only
    crew = write_agent_dir(tmp_path, "crew")
    with psycopg.connect(tls_server.url(tls_server.ca_file, host="localhost")) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)

    result = migrate(toren_cli, crew, tls_server.url(tls_server.ca_file, host="127.0.0.1"))

    assert result.returncode == 1, result.stderr
    line = one_line(result.stderr)
    assert line.startswith(f"Error: cannot connect to Postgres at postgres@127.0.0.1:"
                           f"{tls_server.port}/postgres: ")
    assert 'server certificate for "localhost" does not match host name "127.0.0.1"' in line
    assert "connect with a name it holds" in line
    assert "Traceback" not in result.stderr


def test_a_missing_ca_file_is_named(tls_server: TlsServer, toren_cli: TorenCli,
                                    tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    missing = tmp_path / "no-such-ca.pem"

    result = migrate(toren_cli, crew, tls_server.url(missing), "--json")

    assert result.returncode == 1, result.stderr
    line = one_line(result.stderr)
    assert f'root certificate file "{missing}" does not exist' in line
    assert "sslrootcert= must name a readable file" in line
    assert json.loads(result.stdout)["error"]["code"] == "database_tls_error"
