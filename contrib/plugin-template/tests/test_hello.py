"""toren-hello through the real plugin loader (after `pip install -e contrib/plugin-template`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import toren_hello

from toren import Runtime
from toren.plugin import API_VERSION, Message, ModelRequest, Settings
from toren.testing import (
    PluginHost,  # the real loader (docs/reference/plugins.md)
    ScriptedModel,
)


def load_hello() -> PluginHost:
    """Load plugins from entry points, restricted to this distribution (TOREN_LOAD_PLUGINS)."""
    return PluginHost(["toren-hello"])


def test_entry_point_registers_the_tool_and_the_channel() -> None:
    host = load_hello()
    info = host.info["hello"]
    assert info.distribution == "toren-hello"
    assert info.version == toren_hello.__version__
    assert info.tools == ["greet"]
    assert info.channels == ["hello-log", "parley"]
    assert host.tools["greet"].source == "plugin hello"


def test_the_plugin_declares_the_api_it_is_written_for() -> None:
    from packaging.specifiers import SpecifierSet

    assert API_VERSION in SpecifierSet(toren_hello.TOREN_PLUGIN_API)


def test_greet_schema_comes_from_signature_and_docstring() -> None:
    greet = load_hello().tools["greet"]
    assert greet.description == "Greet someone by name."
    assert greet.idempotent is True
    assert greet.parameters == {
        "type": "object",
        "properties": {"name": {"type": "string", "description": 'Who to greet, e.g. "Ada".'}},
        "required": ["name"],
        "additionalProperties": False,
    }


def test_calling_greet() -> None:
    greet = load_hello().tools["greet"]
    assert greet.function(name="Ada") == "Hello, Ada!"


async def test_the_offline_model_calls_greet(scripted_model: ScriptedModel) -> None:
    # toren.testing's scripted model fills in arguments from the user's text, as a real
    # model would from the JSON Schema.
    greet = load_hello().tools["greet"]
    request = ModelRequest(model="toren/scripted", system="Be kind.",
                           messages=(Message(role="user", text="Ada"),), tools=(greet.spec,))
    response = await scripted_model.complete(request)
    (call,) = response.tool_calls
    assert call.name == "greet"
    assert greet.function(**call.arguments) == "Hello, Ada!"


def test_an_agent_can_enable_greet(make_agent_dir: Callable[..., Path], tmp_path: Path) -> None:
    runtime = Runtime([make_agent_dir("greeter", tools=["greet"])],
                      settings=Settings(home=tmp_path, load_plugins=("toren-hello",)))
    assert list(runtime.agents["greeter"].tools) == ["greet"]


def hello_runtime(home: Path, dirs: list[Path]) -> Runtime:
    """A ``toren.Runtime`` serving ``dirs`` with this plugin loaded (not started: channels
    that only need ``context.home`` and ``context.channel_agents`` need no database)."""
    return Runtime(dirs, settings=Settings(home=home, load_plugins=("toren-hello",)))


async def test_channel_writes_on_start_and_stop(tmp_path: Path,
                                               make_agent_dir: Callable[..., Path],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(toren_hello.LOG_ENV_VAR, raising=False)
    runtime = hello_runtime(tmp_path, [make_agent_dir("logged", channels={"hello-log": {}}),
                                       make_agent_dir("quiet")])
    channel = runtime.plugins.channels["hello-log"]
    # what `toren dev` does for a channel a served agent lists, without a database
    await channel.start(runtime.channel_context)
    await channel.stop()
    lines = (tmp_path / "hello-log.txt").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        "hello-log started (agents: logged)", "hello-log stopped"]


async def test_channel_log_file_can_be_chosen(tmp_path: Path,
                                              make_agent_dir: Callable[..., Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = tmp_path / "logs" / "channel.txt"
    monkeypatch.setenv(toren_hello.LOG_ENV_VAR, str(chosen))
    runtime = hello_runtime(tmp_path / "home", [make_agent_dir("quiet")])
    channel = runtime.plugins.channels["hello-log"]
    await channel.start(runtime.channel_context)
    await channel.stop()
    assert len(chosen.read_text().splitlines()) == 2
    assert not (tmp_path / "home" / "hello-log.txt").exists()
