"""The plugins reference documents every hook exactly as it stands in the hookspecs."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from toren.seams import hookspecs, policies

PLUGINS_MD = (Path(__file__).resolve().parents[2] / "docs/reference/plugins.md").read_text()


@pytest.mark.parametrize("name", hookspecs.HOOK_NAMES)
def test_the_plugins_reference_quotes_each_hook_as_declared(name: str) -> None:
    source = inspect.getsource(getattr(hookspecs, name)).rstrip()
    assert f"### {name}" in PLUGINS_MD
    assert source in PLUGINS_MD, (
        f"docs/reference/plugins.md quotes a stale {name}: copy it from toren/seams/hookspecs.py")


def test_every_hook_has_a_docstring_saying_when_it_is_called() -> None:
    for name in hookspecs.HOOK_NAMES:
        doc = inspect.getdoc(getattr(hookspecs, name)) or ""
        # registration hooks run once at load; policy hooks per run, response or call
        said = "Called by" if name in hookspecs.POLICY_HOOK_NAMES else "Called once"
        assert said in doc, name


def test_every_policy_hook_is_a_hook_and_implemented_by_the_test_plugin() -> None:
    from toren_testplugin import plugin

    assert hookspecs.POLICY_HOOK_NAMES == policies.POLICY_HOOK_NAMES
    for name in hookspecs.POLICY_HOOK_NAMES:
        assert callable(getattr(plugin, name, None)), f"toren-testplugin implements no {name}"
