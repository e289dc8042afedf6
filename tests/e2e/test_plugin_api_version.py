"""A plugin written for another plugin API is refused at load with an error a user can act on;
one written for this API loads and shows its range (issue 37)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stevedore.extension import ExtensionManager

from tests.conftest import TorenCli
from toren.errors import PluginError
from toren.plugin import API_VERSION
from toren.seams.drivers import driver_class


def install_plugin(root: Path, name: str, declared: str | None, *,
                   group: str = "toren") -> dict[str, str]:
    """A real installed distribution (a module and its .dist-info with an entry point) under
    ``root``, found by importlib.metadata through PYTHONPATH; the env that installs it."""
    module = f"toren_{name}_probe"
    root.mkdir(parents=True, exist_ok=True)
    line = "" if declared is None else f"TOREN_PLUGIN_API = {declared!r}\n"
    (root / f"{module}.py").write_text(
        f"import toren\n{line}\n@toren.hookimpl\ndef register_tools(register):\n"
        f"    def probe_{name}() -> str:\n        'Answer ok.'\n        return 'ok'\n"
        f"    register(probe_{name})\n")
    dist = root / f"toren_{name}_probe-2.3.0.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: toren-{name}-probe\n"
                                   "Version: 2.3.0\n")
    (dist / "entry_points.txt").write_text(f"[{group}]\n{name} = {module}\n")
    (dist / "RECORD").write_text(f"{module}.py,,\n{dist.name}/METADATA,,\n")
    return {"PYTHONPATH": str(root), "TOREN_LOAD_PLUGINS": f"toren-{name}-probe"}


def test_a_plugin_for_a_newer_api_is_refused_naming_both_versions(
        toren_cli: TorenCli, tmp_path: Path) -> None:
    env = install_plugin(tmp_path / "site", "future", ">=2.0,<3")

    result = toren_cli("plugins", "--json", env=env)

    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert "plugin 'future' (toren-future-probe 2.3.0) supports plugin API >=2.0,<3" in message
    assert f"has plugin API {API_VERSION}" in message
    assert "upgrade toren to a release whose plugin API is in >=2.0,<3" in message
    assert "Traceback" not in result.stderr


def test_a_plugin_for_an_older_api_is_refused_saying_to_upgrade_the_plugin(
        toren_cli: TorenCli, tmp_path: Path) -> None:
    env = install_plugin(tmp_path / "site", "past", ">=0.1,<1")

    result = toren_cli("plugins", "--json", env=env)

    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert "supports plugin API >=0.1,<1" in message
    assert "upgrade toren-past-probe to a release written for plugin API" in message


def test_a_range_that_is_not_a_range_is_refused_with_an_example(
        toren_cli: TorenCli, tmp_path: Path) -> None:
    env = install_plugin(tmp_path / "site", "typo", "version one please")

    result = toren_cli("plugins", env=env)

    assert result.returncode != 0
    assert "which is not a version range" in " ".join(result.stderr.split())


@pytest.mark.parametrize(("declared", "shown"), [(">=1.0,<2", ">=1.0,<2"), (None, None)])
def test_a_compatible_or_undeclared_plugin_loads_and_shows_its_range(
        toren_cli: TorenCli, tmp_path: Path, declared: str | None, shown: str | None) -> None:
    env = install_plugin(tmp_path / "site", "fine", declared)

    result = toren_cli("plugins", "--json", env=env)

    assert result.returncode == 0, result.stderr
    listed = {p["name"]: p for p in json.loads(result.stdout)["plugins"]}
    assert listed["fine"]["api"] == shown
    assert listed["fine"]["tools"] == ["probe_fine"]


def test_an_in_tree_plugin_declares_the_range_it_was_written_for(
        toren_cli: TorenCli) -> None:
    result = toren_cli("plugins", "--json", env={"TOREN_LOAD_PLUGINS": "toren-testplugin"})

    assert result.returncode == 0, result.stderr
    listed = {p["name"]: p for p in json.loads(result.stdout)["plugins"]}
    assert listed["testplugin"]["api"] == ">=1.0,<2"


def test_a_driver_for_another_api_is_refused_when_it_is_chosen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    install_plugin(site, "oldqueue", ">=0.1,<1", group="toren.queue")
    module = site / "toren_oldqueue_probe.py"
    module.write_text(module.read_text() + "\nclass OldQueue:\n    'A queue for API 0.x.'\n")
    entry_points = site / "toren_oldqueue_probe-2.3.0.dist-info" / "entry_points.txt"
    entry_points.write_text("[toren.queue]\noldqueue = toren_oldqueue_probe:OldQueue\n")
    monkeypatch.syspath_prepend(str(site))
    # stevedore keeps each namespace's entry points for the life of the process (class-level
    # ENTRY_POINT_CACHE): a test earlier on this worker that loaded a queue driver would hide
    # the one just installed. A fresh cache for this test; the old one comes back after it.
    monkeypatch.setattr(ExtensionManager, "ENTRY_POINT_CACHE", {})

    with pytest.raises(PluginError) as refused:
        driver_class("queue", "oldqueue")

    message = refused.value.message
    assert "queue driver oldqueue" in message and "(toren-oldqueue-probe 2.3.0)" in message
    assert "upgrade toren-oldqueue-probe to a release written for plugin API" in message
    assert "choose another queue driver with TOREN_QUEUE" in message
