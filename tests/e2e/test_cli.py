"""The real ``toren`` executable in subprocesses: init, dev, errors, --json and --debug."""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import toren
from tests.conftest import TorenCli, TorenProcess, one_line
from toren.testing import write_agent_dir

pytestmark = pytest.mark.timeout(120)

StartToren = Callable[..., TorenProcess]


def get_json(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_init_then_dev_serves_the_agent(toren_cli: TorenCli, start_toren: StartToren,
                                        database_url: str, tmp_path: Path) -> None:
    created = toren_cli("init", "mycrew", "--json")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout) == {"name": "mycrew", "directory": str(tmp_path / "mycrew"),
                                          "files": ["agent.yaml", "prompt.md", "tools.py"]}
    assert sorted(p.name for p in (tmp_path / "mycrew").iterdir()) == [
        "agent.yaml", "prompt.md", "tools.py"]

    dev = start_toren("dev", "--dir", "mycrew", "--port", "0", "--json",
                      env={"DATABASE_URL": database_url})
    ready = dev.next_json()
    assert ready["event"] == "ready"
    assert ready["url"].startswith("http://127.0.0.1:")
    assert [agent["name"] for agent in ready["agents"]] == ["mycrew"]
    assert "DATABASE_URL" in ready["database"]

    status, health = get_json(ready["url"] + "/healthz")
    assert status == 200
    assert health["status"] == "ok"
    assert health["version"] == toren.__version__
    assert health["database"]["reachable"] is True

    status, listed = get_json(ready["url"] + "/agents")
    assert status == 200
    agents = {agent["name"]: agent for agent in listed["agents"]}
    assert list(agents) == ["mycrew"]
    assert agents["mycrew"]["model"] == "toren/scripted"
    assert agents["mycrew"]["schema"] == "agent_mycrew"
    assert agents["mycrew"]["tools"] == ["word_count"]
    assert agents["mycrew"]["limits"]["maxSteps"] == 20

    status, one = get_json(ready["url"] + "/agents/mycrew")
    assert (status, one["name"]) == (200, "mycrew")
    status, missing = get_json(ready["url"] + "/agents/nobody")
    assert status == 404
    assert missing["error"]["code"] == "not_found"
    status, unknown = get_json(ready["url"] + "/no/such/route")
    assert status == 404
    assert set(unknown["error"]) == {"code", "message"}

    assert dev.stop(signal.SIGTERM) == 0
    assert "Traceback" not in dev.stderr


def test_sigint_stops_dev_cleanly_too(toren_cli: TorenCli, start_toren: StartToren,
                                      database_url: str, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    dev = start_toren("dev", "--dir", str(crew), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url})
    dev.next_json()

    assert dev.stop(signal.SIGINT) == 0
    assert "Traceback" not in dev.stderr


def test_init_writes_an_agent_that_loads_with_the_human_output(toren_cli: TorenCli,
                                                               tmp_path: Path) -> None:
    result = toren_cli("init", "newcrew")

    assert result.returncode == 0, result.stderr
    assert "Created agent newcrew" in result.stdout
    assert "toren dev --dir newcrew" in result.stdout
    assert (tmp_path / "newcrew" / "agent.yaml").read_text().count("name: newcrew") == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".newcrew-")]  # no scratch


def test_init_into_an_existing_non_empty_directory_fails(toren_cli: TorenCli,
                                                         tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")

    result = toren_cli("init", "taken")

    assert result.returncode == 1
    line = one_line(result.stderr)
    assert line.startswith("Error: ")
    assert str(tmp_path / "taken") in line and "not empty" in line
    assert result.stdout == ""
    assert sorted(p.name for p in (tmp_path / "taken").iterdir()) == ["notes.txt"]


def test_init_into_an_existing_empty_directory_works(toren_cli: TorenCli,
                                                     tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()

    result = toren_cli("init", "empty", "--json")

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "empty" / "agent.yaml").is_file()


def test_init_rejects_a_name_that_cannot_be_a_schema(toren_cli: TorenCli,
                                                     tmp_path: Path) -> None:
    result = toren_cli("init", "Bad.Name")

    assert result.returncode == 1
    assert "cannot be mapped to a database schema name" in one_line(result.stderr)
    assert not (tmp_path / "Bad.Name").exists()


def test_bad_agent_yaml_stops_dev_with_one_line(toren_cli: TorenCli, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew",
                           agent_yaml="model: toren/scripted\nlimits:\n  maxStep: 3\n")

    result = toren_cli("dev", "--dir", str(crew), "--port", "0")

    assert result.returncode == 1
    line = one_line(result.stderr)
    assert line.startswith(f"Error: {crew / 'agent.yaml'}:3: unknown key 'limits.maxStep'")
    assert "did you mean 'maxSteps'" in line
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_json_errors_are_printed_on_stdout(toren_cli: TorenCli, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew", agent_yaml="model: toren/scripted\nmodel: x/y\n")

    result = toren_cli("dev", "--dir", str(crew), "--port", "0", "--json")

    assert result.returncode == 1
    body = json.loads(one_line(result.stdout))
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == "agent_definition_error"
    assert body["error"]["message"].startswith(f"{crew / 'agent.yaml'}:2: key 'model' appears")
    assert one_line(result.stderr) == f"Error: {body['error']['message']}"


def test_debug_shows_the_traceback(toren_cli: TorenCli, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew", agent_yaml="model: toren/scripted\nmodle: x\n")

    result = toren_cli("dev", "--dir", str(crew), "--port", "0", "--debug")

    assert result.returncode != 0
    assert "Traceback (most recent call last)" in result.stderr
    assert "errors.AgentDefinitionError" in result.stderr  # toren.core.errors, re-exported


def test_debug_from_the_environment(toren_cli: TorenCli, tmp_path: Path) -> None:
    result = toren_cli("dev", "--dir", str(tmp_path / "missing"), env={"TOREN_DEBUG": "1"})

    assert result.returncode != 0
    assert "Traceback (most recent call last)" in result.stderr


def test_missing_agent_directory(toren_cli: TorenCli, tmp_path: Path) -> None:
    result = toren_cli("dev", "--dir", str(tmp_path), "--port", "0")

    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "no agent.yaml" in line and "toren init" in line


def test_missing_env_is_reported_before_starting(toren_cli: TorenCli, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew", env=["CREW_API_KEY", "OTHER_KEY"])

    result = toren_cli("dev", "--dir", str(crew), "--port", "0", "--json")

    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "missing_env"
    assert "CREW_API_KEY (needed by crew)" in error["message"]
    assert "OTHER_KEY (needed by crew)" in error["message"]
    assert not (tmp_path / "toren-home").exists()  # nothing was started


def test_an_unpublished_runtime_driver_is_a_one_line_error(toren_cli: TorenCli,
                                                            tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")

    result = toren_cli("dev", "--dir", str(crew), env={"TOREN_RUNTIME": "lambda"})

    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "TOREN_RUNTIME=lambda" in line and "no Toren distribution provides it" in line
    assert "pip install" not in line  # not published: anyone could register the name


def test_port_in_use_is_a_one_line_error(toren_cli: TorenCli, start_toren: StartToren,
                                         database_url: str, tmp_path: Path) -> None:
    crew = write_agent_dir(tmp_path, "crew")
    first = start_toren("dev", "--dir", str(crew), "--port", "0", "--json",
                        env={"DATABASE_URL": database_url})
    port = first.next_json()["url"].rsplit(":", 1)[1]

    second = toren_cli("dev", "--dir", str(crew), "--port", port, "--json",
                       env={"DATABASE_URL": database_url})

    assert second.returncode == 1
    assert f"port {port}" in one_line(second.stderr)
    assert json.loads(second.stdout)["error"]["code"] == "config_error"
    assert first.stop() == 0


def test_usage_errors_exit_2_without_a_traceback(toren_cli: TorenCli) -> None:
    result = toren_cli("dev", "--no-such-option")

    assert result.returncode == 2
    assert "No such option" in result.stderr
    assert "Traceback" not in result.stderr


def test_version_json(toren_cli: TorenCli) -> None:
    result = toren_cli("version", "--json")

    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["version"] == toren.__version__
    assert info["python"].count(".") == 2


def test_version_text(toren_cli: TorenCli) -> None:
    result = toren_cli("version")

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"toren {toren.__version__} (Python ")


def test_cli_works_with_every_installed_plugin_loaded(toren_cli: TorenCli) -> None:
    # The other tests load only the built-ins (TOREN_LOAD_PLUGINS=); a user has everything that
    # is installed, here including toren-testplugin, which adds a CLI command.
    result = toren_cli("version", "--json", env={"TOREN_LOAD_PLUGINS": None})

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["version"] == toren.__version__


def test_dev_starts_and_stops_the_channels_agents_list(start_toren: StartToren,
                                                       database_url: str,
                                                       tmp_path: Path) -> None:
    # an agent that lists no channel starts none (installed or not)
    quiet = write_agent_dir(tmp_path / "quiet", "quiet")
    log = tmp_path / "channel.log"
    dev = start_toren("dev", "--dir", str(quiet), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, "TOREN_LOAD_PLUGINS": "toren-testplugin",
                           "TOREN_TESTCHANNEL_LOG": str(log)})
    dev.next_json()
    assert dev.stop(signal.SIGTERM) == 0
    assert not log.exists()
    crew = write_agent_dir(tmp_path, "crew", channels={"testchannel": {}})
    dev = start_toren("dev", "--dir", str(crew), "--port", "0", "--json",
                      env={"DATABASE_URL": database_url, "TOREN_LOAD_PLUGINS": "toren-testplugin",
                           "TOREN_TESTCHANNEL_LOG": str(log)})
    dev.next_json()
    assert log.read_text().splitlines() == ["start crew"]
    assert dev.stop(signal.SIGTERM) == 0
    assert log.read_text().splitlines() == ["start crew", "stop"]
