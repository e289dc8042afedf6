"""Plugins through real entry points: the installed toren-testplugin distribution.

toren-testplugin (tests/plugins/toren-testplugin, installed by requirements/test.txt) has two
entry points in the group ``toren``: ``testplugin`` registers through every hook, and
``testplugin_dup`` registers a second ``echo_upper`` only when TOREN_TESTPLUGIN_DUPLICATE=1.
"""

from __future__ import annotations

import asyncio
import importlib.metadata as metadata
import json

import pytest
import typer

from tests.conftest import TorenCli, one_line
from toren.config import Settings
from toren.errors import PluginError
from toren.seams.channels import Channel
from toren.seams.model import Message, ModelRequest
from toren.seams.plugins import PluginHost

DIST = "toren-testplugin"
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _no_duplicate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOREN_TESTPLUGIN_DUPLICATE", raising=False)
    monkeypatch.delenv("TOREN_LOAD_PLUGINS", raising=False)


def test_testplugin_is_installed_with_its_entry_points() -> None:
    names = {ep.name: ep.value for ep in metadata.entry_points(group="toren")
             if ep.dist and ep.dist.name == DIST}

    assert names == {"testplugin": "toren_testplugin.plugin",
                     "testplugin_dup": "toren_testplugin.duplicate"}


def test_host_discovers_the_plugin_and_records_what_it_registered() -> None:
    host = PluginHost()

    info = host.info["testplugin"]
    assert info.distribution == DIST
    assert info.version == metadata.version(DIST) == "0.0.1"
    assert info.default is False
    assert sorted(info.hooks) == ["after_model_response", "after_tool_call", "before_run_start",
                                  "before_tool_call", "register_channels", "register_commands",
                                  "register_models", "register_tools"]
    assert (info.tools, info.models, info.channels) == (["echo_upper"], ["testprov/*"],
                                                        ["testchannel"])
    assert host.info["testplugin_dup"].distribution == DIST
    assert host.info["testplugin_dup"].tools == []  # TOREN_TESTPLUGIN_DUPLICATE is unset
    assert host.info["scripted"].default is True
    assert info.to_json()["distribution"] == DIST


def test_registered_tool_provider_and_channel_work() -> None:
    host = PluginHost()

    tool = host.tools["echo_upper"]
    assert tool.source == "plugin testplugin"
    assert tool.parameters["required"] == ["text"]
    assert tool.parameters["properties"]["text"]["description"] == "The text to shout."
    assert tool.function("hi") == "HI"

    channel = host.channels["testchannel"]
    assert isinstance(channel, Channel)

    provider = host.provider_for("testprov/anything")
    assert provider.prefix == "testprov"
    model = provider.get_model("testprov/anything")
    response = asyncio.run(model.complete(ModelRequest("testprov/anything", "", (
        Message("user", "quiet please"),))))
    assert response.text == "QUIET PLEASE"


def test_empty_load_list_loads_only_the_builtins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_LOAD_PLUGINS", "")

    host = PluginHost(Settings.from_env().load_plugins)
    assert list(host.info) == ["scripted"]
    assert host.tools == {} and host.channels == {}
    assert list(host.providers) == ["toren"]


@pytest.mark.parametrize(("load", "expected"), [
    (DIST, ["scripted", "testplugin", "testplugin_dup"]),
    ("testplugin", ["scripted", "testplugin"]),
    (f" {DIST} , not-installed ", ["scripted", "testplugin", "testplugin_dup"]),
])
def test_load_list_restricts_by_distribution_or_entry_point(
        monkeypatch: pytest.MonkeyPatch, load: str, expected: list[str]) -> None:
    monkeypatch.setenv("TOREN_LOAD_PLUGINS", load)

    host = PluginHost(Settings.from_env().load_plugins)
    assert sorted(host.info) == expected
    assert "echo_upper" in host.tools


def test_duplicate_tool_name_is_an_error_naming_both_plugins(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_TESTPLUGIN_DUPLICATE", "1")

    with pytest.raises(PluginError) as info:
        PluginHost()
    message = info.value.message
    assert "tool 'echo_upper' is registered by two plugins" in message
    assert f"testplugin ({DIST} 0.0.1)" in message
    assert f"testplugin_dup ({DIST} 0.0.1)" in message
    assert "TOREN_LOAD_PLUGINS" in message


def test_duplicate_is_avoided_by_loading_one_entry_point(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_TESTPLUGIN_DUPLICATE", "1")
    monkeypatch.setenv("TOREN_LOAD_PLUGINS", "testplugin_dup")

    host = PluginHost(Settings.from_env().load_plugins)
    assert host.info["testplugin_dup"].tools == ["echo_upper"]


def test_plugin_commands_are_added_to_a_typer_app() -> None:
    app = typer.Typer()
    app.command("version")(lambda: None)
    app.add_typer(typer.Typer(), name="db")  # like toren's own CLI: commands and a sub-app

    # A new command is listed before the sub-apps; comparing names by position once made
    # every plugin command look like a clash with "db".
    PluginHost().add_commands(app)
    assert "hello-testplugin" in [info.name for info in app.registered_commands]


def test_plugin_command_clashing_with_an_existing_one_names_the_plugin() -> None:
    app = typer.Typer()
    app.command("hello-testplugin")(lambda: None)

    with pytest.raises(PluginError) as info:
        PluginHost().add_commands(app)
    assert f"testplugin ({DIST} 0.0.1)" in info.value.message
    assert "'hello-testplugin'" in info.value.message


def test_toren_plugins_json_lists_the_plugin(toren_cli: TorenCli) -> None:
    result = toren_cli("plugins", "--json", env={"TOREN_LOAD_PLUGINS": None})

    assert result.returncode == 0, result.stderr
    listed = {plugin["name"]: plugin for plugin in json.loads(result.stdout)["plugins"]}
    assert listed["testplugin"]["distribution"] == DIST
    assert listed["testplugin"]["version"] == "0.0.1"
    assert listed["testplugin"]["tools"] == ["echo_upper"]
    assert listed["testplugin"]["models"] == ["testprov/*"]
    assert listed["testplugin"]["channels"] == ["testchannel"]
    assert "register_commands" in listed["testplugin"]["hooks"]
    assert listed["scripted"]["default"] is True


def test_toren_plugins_json_honours_the_load_list(toren_cli: TorenCli) -> None:
    result = toren_cli("plugins", "--json", env={"TOREN_LOAD_PLUGINS": ""})

    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)
    assert [plugin["name"] for plugin in output["plugins"]] == ["scripted"]
    drivers = {(row["kind"], row["name"]): row["distribution"] for row in output["drivers"]}
    assert drivers[("store", "postgres")] == "toren-postgres"


def test_plugin_command_runs_from_the_cli(toren_cli: TorenCli) -> None:
    result = toren_cli("hello-testplugin", "--name", "tester", env={"TOREN_LOAD_PLUGINS": None})

    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello tester from toren-testplugin\n"


def test_duplicate_plugins_stop_the_cli_with_one_line(toren_cli: TorenCli) -> None:
    result = toren_cli("plugins", env={"TOREN_LOAD_PLUGINS": None,
                                       "TOREN_TESTPLUGIN_DUPLICATE": "1"})

    assert result.returncode == 1
    line = one_line(result.stderr)
    assert line.startswith("Error: tool 'echo_upper' is registered by two plugins")
    assert "testplugin_dup" in line


def test_toren_plugins_says_which_policy_hooks_a_plugin_implements(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from toren.cli.plugins import plugins

    monkeypatch.setenv("TOREN_LOAD_PLUGINS", "toren-policy-example")
    monkeypatch.setenv("COLUMNS", "300")
    plugins()
    [row] = [line for line in capsys.readouterr().out.splitlines() if "policy-example" in line]
    assert ("policy hooks: before_tool_call, after_model_response, after_tool_call "
            "(agent.yaml policies:)") in row
