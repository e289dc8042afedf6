"""toren-hello through the real plugin loader (after `pip install -e contrib/plugin-template`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import toren_hello

from toren.agents import load_agent
from toren.config import Settings
from toren.host.runtime import Runtime
from toren.seams.model import Message, ModelRequest
from toren.seams.plugins import PluginHost
from toren.testing import ScriptedModel


def load_hello() -> PluginHost:
    """Load plugins from entry points, restricted to this distribution (TOREN_LOAD_PLUGINS)."""
    return PluginHost(["toren-hello"])


def test_entry_point_registers_the_tool_and_the_channel() -> None:
    host = load_hello()
    info = host.info["hello"]
    assert info.distribution == "toren-hello"
    assert info.version == toren_hello.__version__
    assert info.tools == ["greet"]
    assert info.channels == ["hello-log"]
    assert host.tools["greet"].source == "plugin hello"


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


def test_an_agent_can_enable_greet(make_agent_dir: Callable[..., Path]) -> None:
    host = load_hello()
    agent = load_agent(make_agent_dir("greeter", tools=["greet"]), host.tools)
    assert list(agent.tools) == ["greet"]


async def test_channel_writes_on_start_and_stop(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(toren_hello.LOG_ENV_VAR, raising=False)
    host = load_hello()
    runtime = Runtime(agents=[], settings=Settings(home=tmp_path), plugins=host)
    channel = host.channels["hello-log"]
    await channel.start(runtime)
    await channel.stop()
    lines = (tmp_path / "hello-log.txt").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        "hello-log started (agents: none)", "hello-log stopped"]


async def test_channel_log_file_can_be_chosen(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = tmp_path / "logs" / "channel.txt"
    monkeypatch.setenv(toren_hello.LOG_ENV_VAR, str(chosen))
    host = load_hello()
    runtime = Runtime(agents=[], settings=Settings(home=tmp_path / "home"), plugins=host)
    channel = host.channels["hello-log"]
    await channel.start(runtime)
    await channel.stop()
    assert len(chosen.read_text().splitlines()) == 2
    assert not (tmp_path / "home" / "hello-log.txt").exists()
