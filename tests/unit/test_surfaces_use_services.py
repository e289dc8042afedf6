"""The surfaces (the HTTP server and the CLI) call the host's services, never the store.

Routes, commands and the local operator go through ``runtime.files``, ``runtime.keys``,
``runtime.database``, ``runtime.fleet``, ``runtime.runs``, ``runtime.schedules``,
``runtime.approvals``, ``runtime.forks``, ``runtime.archive``, ``runtime.sessions``,
``runtime.signals`` and the
``Runtime``'s own methods (``toren.host.services``, docs/reference/host-api.md), so a policy
both surfaces share lives once, in the host; the ``Runtime``'s names kept as delegates of a
service are for code written against it, not for the surfaces. import-linter cannot see
attribute access, so this reads the modules.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import toren
from toren.config import Settings
from toren.host.runtime import Runtime

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
                       "runtime.keys, runtime.approvals, ...: toren/host/services) or a "
                       "Runtime method, never the store; add what is missing to a service "
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


#: The ``Runtime``'s names kept for compatibility as delegates of a service, and the service
#: call each one is.
DELEGATES = {
    "pending_migrations": "database.pending_migrations",
    "has_schedules": "schedules.any", "sync_schedules": "schedules.sync",
    "fire_due_schedules": "schedules.fire_due", "list_schedules": "schedules.list",
    "get_schedule": "schedules.get", "pause_schedule": "schedules.pause",
    "resume_schedule": "schedules.resume", "trigger_schedule": "schedules.trigger",
    "list_approvals": "approvals.list", "get_approval": "approvals.get",
    "approve": "approvals.approve", "deny": "approvals.deny",
    "decide_approval": "approvals.decide", "pending_approvals": "approvals.pending",
    "fork_run": "forks.fork", "fork_of": "forks.fork_of", "diff_runs": "forks.diff",
    "archive_backend": "archive.backend", "retentions": "archive.retentions",
    "archive_runs": "archive.archive_due", "archived_run": "archive.get",
    "archived_events": "archive.events", "read_archived_run": "archive.read",
    "list_archived_runs": "archive.list", "restore_run": "archive.restore",
    "close_archive": "archive.close",
    "start_session": "sessions.start", "get_session": "sessions.get",
    "send_message": "sessions.send", "close_session": "sessions.close",
    "wait_for_turn": "sessions.wait_for_turn",
    "send_signal": "signals.send",
}
#: What a runtime is called where the surfaces hold one.
_RUNTIME = re.compile(r"(^|\.)_?runtime$|\[RUNTIME\]$")


def delegate_calls(package: Path) -> list[str]:
    """``path:line: code`` of every use of a delegate on something the surfaces call a
    runtime (``runtime``, ``self.runtime``, ``request.app[RUNTIME]``, ...), under the surfaces
    of ``package``. The operator's and the client's methods of the same names are not it."""
    found = []
    for surface in SURFACES:
        for path in sorted((package / surface).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            for node in ast.walk(ast.parse(source, str(path))):
                if (isinstance(node, ast.Attribute) and node.attr in DELEGATES
                        and _RUNTIME.search(ast.unparse(node.value))):
                    line = source.splitlines()[node.lineno - 1].strip()
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno}: {line} "
                                 f"(call runtime.{DELEGATES[node.attr]})")
    return found


def test_routes_commands_and_the_operator_call_the_services_not_the_runtimes_delegates() -> None:
    found = delegate_calls(KERNEL)
    assert not found, ("the server and the CLI call a noun's service (runtime.approvals, "
                       "runtime.forks, ...), not the Runtime's delegate of it:\n"
                       + "\n".join(found))


def test_each_delegate_is_documented_as_the_service_method_it_calls(tmp_path: Path) -> None:
    runtime = Runtime(agents=[], settings=Settings(home=tmp_path))  # nothing is connected
    for name, target in DELEGATES.items():
        service_name, method = target.split(".")
        service = getattr(runtime, service_name)
        assert hasattr(service, method), f"{type(service).__name__} has no {method}"
        delegate = inspect.getattr_static(Runtime, name)
        doc = (delegate.fget if isinstance(delegate, property) else delegate).__doc__ or ""
        assert f"{type(service).__name__}.{method}" in doc, (
            f"Runtime.{name}'s docstring names the service method it delegates to "
            f"({type(service).__name__}.{method}): {doc!r}")
    # the services are composed, not inherited: Runtime has no base class but object
    assert Runtime.__bases__ == (object,)


def test_the_delegate_check_tells_a_runtime_from_the_operator_and_the_client(
        tmp_path: Path) -> None:
    package = tmp_path / "toren"
    (package / "server").mkdir(parents=True)
    (package / "cli").mkdir(parents=True)
    (package / "server" / "routes.py").write_text(
        "async def f(request):\n"
        "    return await request.app[RUNTIME].list_approvals(status='pending')\n")
    (package / "cli" / "operator.py").write_text(
        "class Local:\n"
        "    async def fork_run(self, run_id):\n"
        "        return await self.runtime.fork_run(run_id, 0)\n"
        "    async def restore_run(self, run_id):\n"
        "        return await self.runtime.archive.restore(run_id)\n"
        "class Remote:\n"
        "    async def fork_run(self, run_id):\n"
        "        return await self.client.fork_run(run_id, 0)\n")
    (package / "cli" / "chat.py").write_text(
        "async def g(op, runtime):\n"
        "    await op.send_message('hi')\n"
        "    return await runtime.get_session('s')\n")
    assert [line.split(":")[0:2] for line in delegate_calls(package)] == [
        ["toren/server/routes.py", "2"], ["toren/cli/chat.py", "3"],
        ["toren/cli/operator.py", "3"]]
