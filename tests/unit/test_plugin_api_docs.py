"""docs/reference/plugin-api.md names everything the plugin API exports, and every member of
the two objects plugins are handed (``ChannelContext``, ``PluginRuntime``); the runtime really
provides each member (issue 37)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import toren.errors
import toren.plugin
import toren.plugin.cli
from toren.host.chat.context import RuntimeChannelContext
from toren.host.runtime import Runtime
from toren.plugin import ChannelContext, PluginRuntime

DOC = (Path(__file__).resolve().parents[2] / "docs/reference/plugin-api.md").read_text()


def members(protocol: type) -> list[str]:
    return sorted(name for name in vars(protocol)
                  if not name.startswith("_") and name not in ("_is_protocol",))


@pytest.mark.parametrize("name", sorted(
    set(toren.plugin.__all__) - set(toren.errors.__all__) - {"__version__"})
    + sorted(toren.plugin.cli.__all__))
def test_the_plugin_api_page_names_each_export(name: str) -> None:
    assert f"`{name}`" in DOC or f"`{name}(" in DOC, (
        f"docs/reference/plugin-api.md does not mention {name}, which toren.plugin exports")


def test_every_error_kind_is_exported() -> None:
    assert set(toren.errors.__all__) <= set(toren.plugin.__all__)


@pytest.mark.parametrize(("protocol", "implementation"), [
    (ChannelContext, RuntimeChannelContext), (PluginRuntime, Runtime)])
def test_each_member_is_documented_and_provided(protocol: type, implementation: type) -> None:
    for name in members(protocol):
        assert f"`{name}" in DOC, f"plugin-api.md does not document {protocol.__name__}.{name}"
        assert inspect.getdoc(getattr(protocol, name)), f"{protocol.__name__}.{name}"
        provided = getattr(implementation, name, None)
        if provided is None:  # an attribute the runtime sets in __init__ (settings, agents)
            assert name in inspect.getsource(implementation.__init__), name
