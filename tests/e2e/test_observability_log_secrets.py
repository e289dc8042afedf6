"""A full run through the real Anthropic SDK (against the plugin's fake Messages API) with DEBUG
logs in every format: each line of work carries its ids, and no key appears anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.conftest import TOREN, clean_env
from toren.testing import OutputProcess, write_agent_dir

FAKE = Path(__file__).parents[2] / "plugins" / "toren-anthropic" / "tests" / "fake_anthropic.py"
PROVIDER_KEY = "sk-ant-api03-" + "K3y" * 12
TOREN_KEY = "toren_0badc0de_" + "s3cr3t" * 8
DB_PASSWORD = "db-pa55word-never-logged"
TOOLS = '''
import logging
import os

from toren import tool

log = logging.getLogger("crew.tools")


@tool(idempotent=True)
def step(n: int) -> str:
    """Do step number n."""
    # a careless tool: logs the provider key and the Toren key it can see
    log.warning("step %s with key %s and %s", n, os.environ["ANTHROPIC_API_KEY"],
                os.environ["TOREN_API_KEY"])
    return f"step {n} done"
'''


def with_password(database_url: str, password: str) -> str:
    """``database_url`` as a URL with ``password`` in it, whether it names a TCP server or a
    Unix socket directory (the embedded Postgres of the test session)."""
    parts = conninfo_to_dict(database_url)
    host, port = str(parts.get("host") or "127.0.0.1"), parts.get("port")
    credentials = f"{quote(str(parts['user']), safe='')}:{quote(password, safe='')}"
    if host.startswith("/"):
        query = urlencode({"host": host} | ({"port": port} if port else {}))
        return f"postgresql://{credentials}@/{parts['dbname']}?{query}"
    return f"postgresql://{credentials}@{host}:{port or 5432}/{parts['dbname']}"


@pytest.mark.slow
@pytest.mark.parametrize("log_format", ["json", "plain", "rich"])
def test_no_key_in_the_logs_of_a_full_run(database_url: str, tmp_path: Path, log_format: str,
                                          output_processes: list[OutputProcess]) -> None:
    # trust auth ignores the password, so it can ride in DATABASE_URL for the test
    url_with_password = with_password(database_url, DB_PASSWORD)
    env = clean_env(tmp_path / "home", DATABASE_URL=url_with_password,
                    ANTHROPIC_API_KEY=PROVIDER_KEY, TOREN_API_KEY=TOREN_KEY,
                    TOREN_LOAD_PLUGINS="toren-anthropic", TOREN_LOG_LEVEL="DEBUG",
                    TOREN_LOG_FORMAT=log_format, TOREN_LEASE_TTL="1",
                    TOREN_POLL_INTERVAL="0.2")
    env = {key: value for key, value in env.items() if not key.startswith("ANTHROPIC_")
           or key == "ANTHROPIC_API_KEY"}
    server = OutputProcess([sys.executable, str(FAKE), "--tool-steps", "2"], env=env,
                           stderr_path=tmp_path / "fake.stderr")
    output_processes.append(server)
    base_url = f"http://127.0.0.1:{server.next_json(timeout=30)['port']}"
    directory = write_agent_dir(tmp_path, "careless", model="anthropic/claude-sonnet-4-6",
                                baseUrl=base_url, tools_py=TOOLS)
    done = subprocess.run([str(TOREN), "run", "careless", "go", "--json", "--dir",
                           str(directory)], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout)
    assert run["status"] == "completed", run
    logs = done.stderr
    assert "step 1 with key" in logs  # the tool did log, and DEBUG lines were written
    assert len(logs.splitlines()) > 5
    for secret in (PROVIDER_KEY, TOREN_KEY, DB_PASSWORD):
        assert secret not in logs and secret not in done.stdout, (log_format, secret)
    # nor any recognisable piece of them (a wrapped rich line would split a key)
    assert "K3yK3y" not in logs and "s3cr3ts3cr3t" not in logs
    if log_format == "json":
        lines = [json.loads(line) for line in logs.splitlines()]
        tool_lines = [line for line in lines if line["logger"] == "crew.tools"]
        assert len(tool_lines) == 2
        for line in tool_lines:
            assert line["run_id"] == run["id"] and line["task_id"] == "main"
            assert line["agent"] == "careless" and line["worker_id"].count("-") >= 2
            assert "***" in line["message"]
    elif log_format == "plain":
        tool_lines = [line for line in logs.splitlines() if " crew.tools " in line]
        assert len(tool_lines) == 2
        assert all(f"run={run['id']} task=main]" in line for line in tool_lines)


def test_an_unknown_log_format_is_one_line_error(tmp_path: Path) -> None:
    env = clean_env(tmp_path / "home", TOREN_LOG_FORMAT="xml")
    # a command that logs (`toren version` prints its line without configuring anything)
    done = subprocess.run([str(TOREN), "plugins"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1
    assert "TOREN_LOG_FORMAT='xml' is not one of rich, plain, json" in done.stderr
    assert "Traceback" not in done.stderr
    assert os.environ.get("TOREN_LOG_FORMAT") != "xml"
