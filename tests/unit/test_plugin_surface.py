"""The in-tree plugins are written against the public plugin API only (issue 37): their sources
import ``toren``'s root names, ``toren.plugin`` (with ``.drivers`` and ``.cli``) and
``toren.testing``, nothing deeper; the import-linter contract that keeps them so covers every
kernel module and every plugin package; each entry point's module declares the API range it
was written for; and everything the public modules export exists and is documented."""

from __future__ import annotations

import ast
import inspect
import pkgutil
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import toren
import toren.plugin
import toren.plugin.cli
import toren.plugin.drivers

ROOT = Path(__file__).resolve().parents[2]
#: Where the in-tree plugins (and the template third parties copy) keep their packages.
PLUGIN_DIRS = sorted([*ROOT.glob("plugins/*/"), ROOT / "contrib" / "plugin-template",
                      ROOT / "contrib" / "policy-example"])
#: The public modules and what each exports; ``toren.testing`` (a package of test helpers) is
#: public as a whole.
EXPORTS: dict[str, set[str]] = {
    "toren": set(toren.__all__),
    "toren.plugin": {*toren.plugin.__all__, "drivers", "cli"},
    "toren.plugin.drivers": set(toren.plugin.drivers.__all__),
    "toren.plugin.cli": set(toren.plugin.cli.__all__),
}
PUBLIC_MODULES = (toren.plugin, toren.plugin.drivers, toren.plugin.cli)
ADVICE = ("import it from toren.plugin (tools, models, channels, routes), "
          "toren.plugin.drivers (store, queue, archive, runtime, tracer, secrets) or "
          "toren.plugin.cli (commands); if it is not exported there, export it "
          "(docs/reference/plugin-api.md)")


def is_testing(module: str) -> bool:
    return module == "toren.testing" or module.startswith("toren.testing.")


def private_imports(source: str, filename: str) -> list[str]:
    """Each import of a non-public ``toren`` module or name in ``source`` (at any depth:
    function-local and ``TYPE_CHECKING`` imports count), as ``file:line: statement``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            bad = [alias.name for alias in node.names
                   if alias.name.split(".")[0] == "toren" and alias.name != "toren"
                   and alias.name not in EXPORTS and not is_testing(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] == "toren" and not is_testing(node.module):
            exported = EXPORTS.get(node.module, set())
            bad = [alias.name for alias in node.names if alias.name not in exported]
        else:
            continue
        if bad:
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)} "
                         f"({', '.join(bad)} is not public)")
    return found


def plugin_sources() -> list[Path]:
    return sorted(path for plugin in PLUGIN_DIRS for path in (plugin / "src").rglob("*.py"))


def plugin_packages() -> set[str]:
    return {package.parent.name for plugin in PLUGIN_DIRS
            for package in (plugin / "src").glob("*/__init__.py")}


def contract() -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [found] = [c for c in config["contracts"] if c["id"] == "plugins-public-api"]
    return {**found, "root_packages": config["root_packages"]}


def test_the_plugin_sources_are_found() -> None:
    packages = plugin_packages()
    assert {"toren_postgres", "toren_telegram", "toren_hello"} <= packages
    assert len(plugin_sources()) > len(packages)


def test_the_check_finds_each_kind_of_private_import() -> None:
    source = ("import toren\n"
              "from toren import regular_files, tool\n"
              "import toren.core.events\n"
              "from toren.plugin import ToolError, drivers\n"
              "from toren.plugin.drivers import Store, Unexported\n"
              "from toren.testing.contracts import StoreContract\n"
              "if TYPE_CHECKING:\n"
              "    from toren.config import Settings\n"
              "def f():\n"
              "    from toren.errors import ToolError\n")
    assert private_imports(source, "x.py") == [
        "x.py:2: from toren import regular_files, tool (regular_files is not public)",
        "x.py:3: import toren.core.events (toren.core.events is not public)",
        "x.py:5: from toren.plugin.drivers import Store, Unexported (Unexported is not public)",
        "x.py:8: from toren.config import Settings (Settings is not public)",
        "x.py:10: from toren.errors import ToolError (ToolError is not public)",
    ]


def test_plugins_import_only_the_public_api() -> None:
    found = [line for path in plugin_sources()
             for line in private_imports(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, "plugins import toren's internals; " + ADVICE + ":\n" + "\n".join(found)


def test_the_contract_forbids_every_kernel_module_but_the_public_ones() -> None:
    found = contract()
    kernel = {f"toren.{module.name}" for module in pkgutil.iter_modules(toren.__path__)}
    expected = kernel - {"toren.plugin", "toren.testing"}
    forbidden = set(found["forbidden_modules"])
    assert found["type"] == "forbidden" and found["allow_indirect_imports"] is True
    assert not expected - forbidden, (
        "pyproject.toml's plugins-public-api contract does not forbid "
        f"{sorted(expected - forbidden)}: add each new kernel module to its forbidden_modules")
    assert not forbidden - expected, f"not kernel modules: {sorted(forbidden - expected)}"


def test_the_contract_covers_every_in_tree_plugin() -> None:
    found, packages = contract(), plugin_packages()
    missing = packages - set(found["source_modules"])
    assert not missing, ("pyproject.toml's plugins-public-api contract does not check "
                         f"{sorted(missing)}: add each to its source_modules and root_packages")
    unrooted = packages - set(found["root_packages"])
    assert not unrooted, f"add {sorted(unrooted)} to [tool.importlinter] root_packages"


def entry_point_modules() -> list[tuple[str, str]]:
    """(group, module) of every entry point the in-tree plugins register with Toren: the
    plugin group ``toren`` and the driver groups ``toren.<kind>``."""
    found = []
    for plugin in PLUGIN_DIRS:
        project = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]
        for group, entries in project.get("entry-points", {}).items():
            if group == "toren" or group.startswith("toren."):
                found += [(group, value.split(":")[0].strip()) for value in entries.values()]
    return sorted(set(found))


def module_source(module: str) -> Path:
    for plugin in PLUGIN_DIRS:
        base = plugin / "src" / module.replace(".", "/")
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.exists():
                return path
    raise AssertionError(f"no source for entry point module {module} under plugins/ or contrib/")


def test_the_entry_points_are_found() -> None:
    groups = {group for group, _ in entry_point_modules()}
    assert {"toren", "toren.store", "toren.queue", "toren.archive", "toren.runtime",
            "toren.tracer", "toren.secrets"} <= groups


@pytest.mark.parametrize(("group", "module"), entry_point_modules())
def test_each_entry_point_declares_the_api_it_was_written_for(group: str, module: str) -> None:
    path = module_source(module)
    declared = [node.value for node in ast.parse(path.read_text()).body
                if isinstance(node, ast.Assign)
                and [ast.unparse(target) for target in node.targets] == ["TOREN_PLUGIN_API"]]
    assert declared, (f"{path.relative_to(ROOT)} (entry point of {group}) does not declare "
                      f'TOREN_PLUGIN_API = ">=1.0,<2"')
    [value] = declared
    assert isinstance(value, ast.Constant) and isinstance(value.value, str)
    assert Version(toren.plugin.API_VERSION) in SpecifierSet(value.value), value.value


def undocumented(value: object) -> bool:
    if inspect.isclass(value):
        # a dataclass or named tuple without a docstring gets its signature as one
        doc = vars(value).get("__doc__") or ""
        return not doc.strip() or doc.startswith(f"{value.__name__}(")
    if inspect.isroutine(value) or isinstance(value, ModuleType):
        return not (value.__doc__ or "").strip()
    return False


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda module: module.__name__)
def test_every_export_resolves_and_is_documented(module: ModuleType) -> None:
    assert len(set(module.__all__)) == len(module.__all__), f"{module.__name__}: a name twice"
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"{module.__name__}.__all__ names what it does not define: {missing}"
    bare = [name for name in module.__all__ if undocumented(getattr(module, name))]
    assert not bare, f"{module.__name__} exports classes or functions without a docstring: {bare}"
