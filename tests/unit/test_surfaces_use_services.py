"""The surfaces (the HTTP server and the CLI) call the host's services, never the store.

Routes, commands and the local operator go through ``runtime.files``, ``runtime.keys``,
``runtime.database``, ``runtime.fleet``, ``runtime.runs`` and the ``Runtime``'s own methods
(``toren.host.services``, docs/reference/host-api.md), so a policy both surfaces share lives
once, in the host. import-linter cannot see attribute access, so this reads the modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import toren

KERNEL = Path(toren.__file__).parent
SURFACES = ("server", "cli")


def store_accesses(package: Path) -> list[str]:
    """``path:line: code`` of every ``.store`` attribute, and ``getattr(..., "store")``, in
    the Python modules under the surfaces of ``package`` (a copy of ``toren/``)."""
    found = []
    for surface in SURFACES:
        for path in sorted((package / surface).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            for node in ast.walk(ast.parse(source, str(path))):
                named = isinstance(node, ast.Attribute) and node.attr == "store"
                dynamic = (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                           and node.func.id in ("getattr", "setattr", "hasattr")
                           and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                           and node.args[1].value == "store")
                if isinstance(node, ast.expr) and (named or dynamic):
                    line = source.splitlines()[node.lineno - 1].strip()
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno}: {line}")
    return found


def test_no_route_command_or_operator_reaches_past_the_runtime_to_its_store() -> None:
    found = store_accesses(KERNEL)
    assert not found, ("the server and the CLI call the host's services (runtime.files, "
                       "runtime.keys, runtime.database, runtime.fleet, runtime.runs, or a "
                       "Runtime method), never the store; add what is missing to a service "
                       "in toren/host/services:\n" + "\n".join(found))


def test_the_check_sees_an_access_in_any_shape(tmp_path: Path) -> None:
    package = tmp_path / "toren"
    (package / "server").mkdir(parents=True)
    (package / "cli" / "nested").mkdir(parents=True)
    (package / "server" / "routes.py").write_text(
        "async def f(request):\n    return await request.app[RUNTIME].store.get_file('x')\n")
    (package / "cli" / "nested" / "command.py").write_text(
        "def g(rt):\n    store = getattr(rt, 'store')\n    return store, rt.files\n")
    (package / "cli" / "fine.py").write_text("def h(rt):\n    return rt.keys.list_keys()\n")
    assert [line.split(":")[0:2] for line in store_accesses(package)] == [
        ["toren/server/routes.py", "2"], ["toren/cli/nested/command.py", "2"]]
