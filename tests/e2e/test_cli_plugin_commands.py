"""Plugins' commands as ``toren.commands`` entry points (plugin API 1.5): listed by ``toren
--help`` without importing the kernel's commands, run by name, refused with a clear error when
broken or clashing; the older ``register_commands`` hook still runs, with a deprecation line.

Each plugin here is a real installed distribution (a module and its ``.dist-info``) on
``PYTHONPATH``, found by importlib.metadata and stevedore's entry-point cache as pip's would be.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import TorenCli

pytestmark = [pytest.mark.timeout(180)]

GREET = '''
import typer

def greet(name: str, loud: bool = False) -> None:
    """Greet NAME from a plugin command.

    Second paragraph: not in the one-line listing."""
    text = f"hello {name} from a plugin command"
    print(text.upper() if loud else text)

audit = typer.Typer(help="Audit things the probe knows: show.", no_args_is_help=True)

@audit.command("show")
def show() -> None:
    """Show what the probe audited."""
    print("audited: 3 things")
'''


def install(root: Path, dist: str, module: str, source: str, commands: dict[str, str], *,
            plugin: str | None = None) -> None:
    """A distribution ``dist`` with ``module`` and ``commands`` (name -> ``module:attr``) in
    the group ``toren.commands`` (and a ``toren`` plugin entry point named ``plugin``)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(source)
    info = root / f"{dist.replace('-', '_')}-1.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0.0\n")
    lines = ["[toren.commands]", *(f"{name} = {target}" for name, target in commands.items())]
    if plugin is not None:
        (root / f"{module}_plugin.py").write_text("")
        lines += ["", "[toren]", f"{plugin} = {module}_plugin"]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    (info / "RECORD").write_text(f"{module}.py,,\n{info.name}/METADATA,,\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    install(root, "toren-greet-probe", "toren_greet_probe", GREET,
            {"greet": "toren_greet_probe:greet", "probe-audit": "toren_greet_probe:audit"},
            plugin="greetprobe")
    return root


def every_plugin(site: Path) -> dict[str, str | None]:
    """The environment that installs ``site`` and loads every installed plugin."""
    return {"PYTHONPATH": str(site), "TOREN_LOAD_PLUGINS": None}


def one_paragraph(text: str) -> str:
    return " ".join(text.split())


def test_a_plugin_command_is_listed_by_help_and_runs(toren_cli: TorenCli, site: Path) -> None:
    env = every_plugin(site)
    listing = toren_cli("--help", env=env)
    assert listing.returncode == 0, listing.stderr
    assert re.search(r"│ greet +Greet NAME from a plugin command\.", listing.stdout)
    assert "Second paragraph" not in listing.stdout
    assert re.search(r"│ probe-audit +Audit things the probe knows: show\.", listing.stdout)

    ran = toren_cli("greet", "Ada", "--loud", env=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "HELLO ADA FROM A PLUGIN COMMAND"
    group = toren_cli("probe-audit", "show", env=env)
    assert group.stdout.strip() == "audited: 3 things", group.stderr
    # its own help reads like a kernel command's: placeholders upper-case, paragraphs whole
    helped = toren_cli("greet", "--help", env=env)
    assert "NAME" in helped.stdout and "<str>" not in helped.stdout
    assert "Second paragraph: not in the one-line listing." in one_paragraph(helped.stdout)

    listed = json.loads(toren_cli("plugins", "--json", env=env).stdout)["commands"]
    assert {"name": "greet", "target": "toren_greet_probe:greet",
            "distribution": "toren-greet-probe", "version": "1.0.0"} in listed


def test_a_misspelt_command_is_suggested_among_the_plugins_too(toren_cli: TorenCli,
                                                               site: Path) -> None:
    result = toren_cli("gret", env=every_plugin(site))
    assert result.returncode == 2
    assert "No such command 'gret'. Did you mean 'greet'" in one_paragraph(result.stderr)


@pytest.mark.parametrize("allowed", ["toren-greet-probe", "greetprobe"])
def test_load_plugins_lets_a_command_in_by_its_distribution_or_plugin_name(
        toren_cli: TorenCli, site: Path, allowed: str) -> None:
    env = {"PYTHONPATH": str(site), "TOREN_LOAD_PLUGINS": allowed}
    assert "│ greet " in toren_cli("--help", env=env).stdout
    assert toren_cli("greet", "Bo", env=env).stdout.strip() == "hello Bo from a plugin command"


def test_a_command_left_out_by_load_plugins_is_neither_listed_nor_run(
        toren_cli: TorenCli, site: Path) -> None:
    env = {"PYTHONPATH": str(site), "TOREN_LOAD_PLUGINS": "toren-testplugin"}
    assert "│ greet " not in toren_cli("--help", env=env).stdout
    result = toren_cli("greet", "Bo", env=env)
    assert result.returncode == 2 and "No such command 'greet'" in result.stderr


def test_a_plugin_that_takes_a_kernel_command_name_is_refused_naming_it(
        toren_cli: TorenCli, tmp_path: Path) -> None:
    root = tmp_path / "site"
    install(root, "toren-clash-probe", "toren_clash_probe", GREET,
            {"run": "toren_clash_probe:greet"})
    result = toren_cli("--help", env=every_plugin(root))
    assert result.returncode == 1
    message = one_paragraph(result.stderr)
    assert "toren-clash-probe declares the command 'run', which is Toren's own" in message
    assert "TOREN_LOAD_PLUGINS" in message and "Traceback" not in result.stderr


def test_two_plugins_declaring_one_command_are_refused_naming_both(
        toren_cli: TorenCli, tmp_path: Path) -> None:
    root = tmp_path / "site"
    install(root, "toren-one-probe", "toren_one_probe", GREET, {"hi": "toren_one_probe:greet"})
    install(root, "toren-two-probe", "toren_two_probe", GREET, {"hi": "toren_two_probe:greet"})
    result = toren_cli("hi", "x", env=every_plugin(root))
    assert result.returncode == 1
    message = one_paragraph(result.stderr)
    assert "two plugins declare the command 'hi'" in message
    assert "toren_one_probe:greet" in message and "toren_two_probe:greet" in message


def test_a_command_whose_module_fails_to_import_names_its_distribution(
        toren_cli: TorenCli, tmp_path: Path) -> None:
    root = tmp_path / "site"
    install(root, "toren-broken-probe", "toren_broken_probe",
            "import toren_no_such_dependency\n", {"broken": "toren_broken_probe:command"})
    result = toren_cli("broken", env=every_plugin(root))
    assert result.returncode == 1
    message = one_paragraph(result.stderr)
    assert ("the command 'broken' of toren-broken-probe failed to load "
            "(toren_broken_probe:command): ModuleNotFoundError") in message
    assert "Traceback" not in result.stderr
    # the list of commands still shows, and says which one is broken; the others still run
    listing = toren_cli("--help", env=every_plugin(root))
    assert listing.returncode == 0, listing.stderr
    assert re.search(r"│ broken +Failed to load: the command 'broken' of toren-broken-probe",
                     listing.stdout), listing.stdout
    assert toren_cli("jobs", "--help", env=every_plugin(root)).returncode == 0


def test_a_command_module_for_another_plugin_api_is_refused(toren_cli: TorenCli,
                                                            tmp_path: Path) -> None:
    root = tmp_path / "site"
    install(root, "toren-future-probe", "toren_future_probe",
            'TOREN_PLUGIN_API = ">=2.0,<3"\n' + GREET, {"future": "toren_future_probe:greet"})
    result = toren_cli("future", "x", env=every_plugin(root))
    assert result.returncode == 1
    message = one_paragraph(result.stderr)
    assert "supports plugin API >=2.0,<3" in message
    assert "(toren-future-probe 1.0.0)" in message


def test_a_command_added_through_the_deprecated_hook_still_runs_and_says_so(
        toren_cli: TorenCli) -> None:
    env = {"TOREN_LOAD_PLUGINS": "toren-testplugin"}
    result = toren_cli("hello-testplugin", env=env)
    assert result.returncode == 0, result.stderr
    assert "hello world from toren-testplugin" in result.stdout
    warning = one_paragraph(result.stderr)
    assert ("comes from a plugin's register_commands hook, deprecated since plugin API 1.5"
            in warning)
    assert "toren.commands entry-point group" in warning
    assert "hello-testplugin" not in toren_cli("--help", env=env).stdout
    listed = json.loads(toren_cli("plugins", "--json", env=env).stdout)["plugins"]
    assert "register_commands" in next(p for p in listed if p["name"] == "testplugin")["hooks"]
