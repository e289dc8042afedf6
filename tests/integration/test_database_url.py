"""DATABASE_URL mistakes stop Toren quickly with one line that says what is wrong."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from tests.conftest import TorenCli, one_line
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(120)


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("command", [("db", "migrate"), ("dev", "--port", "0")])
def test_unreachable_server_fails_fast_naming_host_and_port(
        toren_cli: TorenCli, tmp_path: Path, command: tuple[str, ...]) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    port = closed_port()
    url = f"postgresql://toren@127.0.0.1:{port}/toren"

    started = time.monotonic()
    result = toren_cli(*command, "--dir", str(crew), "--json",
                       env={"DATABASE_URL": url, "TOREN_CONNECT_TIMEOUT": "3"}, timeout=20)
    elapsed = time.monotonic() - started

    assert result.returncode == 1, result.stderr
    assert elapsed < 10, f"took {elapsed:.1f}s to give up"
    line = one_line(result.stderr)
    assert line.startswith("Error: cannot connect to Postgres at ")
    assert f"127.0.0.1:{port}" in line
    assert "Traceback" not in result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "database_unavailable"
    assert "\n" not in error["message"]


def test_unreachable_server_message_gives_the_reason(toren_cli: TorenCli,
                                                    tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    url = f"postgresql://toren@127.0.0.1:{closed_port()}/toren"

    result = toren_cli("db", "migrate", "--dir", str(crew), "--json",
                       env={"DATABASE_URL": url})

    message = json.loads(result.stdout)["error"]["message"]
    # libpq's hint is on a line of its own; the message keeps the reason and the hint as two
    # sentences on one line
    assert "Connection refused. Is the server running on that host" in message, message
    assert "\t" not in message


def test_password_is_not_printed(toren_cli: TorenCli, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    url = f"postgresql://toren:s3cret-pw@127.0.0.1:{closed_port()}/toren"

    result = toren_cli("db", "migrate", "--dir", str(crew), env={"DATABASE_URL": url})

    assert result.returncode == 1
    assert "s3cret-pw" not in result.stderr + result.stdout


@pytest.mark.parametrize("url", ["not a url", "postgresql://user@[::1/db"])
def test_invalid_url_is_a_one_line_config_error(toren_cli: TorenCli, tmp_path: Path,
                                                url: str) -> None:
    crew = write_agent_dir(tmp_path, "crew")

    result = toren_cli("db", "migrate", "--dir", str(crew), "--json",
                       env={"DATABASE_URL": url})

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    line = one_line(result.stderr.rstrip("\n"))
    assert line.startswith("Error: DATABASE_URL is not a valid libpq URL or conninfo")
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "config_error"
    assert "DATABASE_URL" in error["message"]


def test_invalid_url_message_has_no_trailing_newline(toren_cli: TorenCli,
                                                     tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")

    result = toren_cli("db", "migrate", "--dir", str(crew), "--json",
                       env={"DATABASE_URL": "not a url"})

    message = json.loads(result.stdout)["error"]["message"]
    # BUG (plugins/toren-postgres/src/toren_postgres/connection.py, describe_url): psycopg's
    # message ends with a newline that is copied into the ConfigError, so the one-line error
    # is followed by an empty line on stderr and ends with "\n" in the JSON body.
    assert message == message.strip(), repr(message)
    assert result.stderr.count("\n") == 1, repr(result.stderr)
