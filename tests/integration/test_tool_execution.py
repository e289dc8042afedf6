"""Tools under pressure: cancel stops the work, a tool timeout, the bounded tool threads, and a
blocked event loop named by the watchdog. Real Postgres, real worker, real threads."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from tests.durable import check_log, types
from toren.seams.model import ModelResponse, ToolCall
from toren.testing import ScriptedModel, write_agent_dir

TOOLS = '''
import asyncio
import pathlib
import time

MARKS = pathlib.Path(__file__).parent / "marks"


def slow(n: int, seconds: float) -> str:
    """Mark its start, sleep, mark its end (a sync tool: it runs in a tool thread)."""
    MARKS.mkdir(exist_ok=True)
    (MARKS / f"start-{n}").touch()
    time.sleep(seconds)
    (MARKS / f"end-{n}").touch()
    return f"slept {seconds}"


async def stuck(seconds: float) -> str:
    """An async tool that awaits for long."""
    await asyncio.sleep(seconds)
    return "woke"


async def blocker(seconds: float) -> str:
    """An async tool that blocks the event loop (what a tool must not do)."""
    time.sleep(seconds)
    return "blocked"
'''


def calls(*items: tuple[str, dict[str, object]]) -> ModelResponse:
    return ModelResponse(text="", stop_reason="tool_use", tool_calls=tuple(
        ToolCall(f"c{index}", name, arguments) for index, (name, arguments) in enumerate(items)))


DONE = ModelResponse(text="done")


async def wait_until(condition, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


async def test_cancel_frees_the_slot_and_never_starts_queued_tool_calls(
        make_runtime, tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "tooling", tools_py=TOOLS, model="test/m")
    marks = directory / "marks"
    model = ScriptedModel(script=[calls(*[("slow", {"n": n, "seconds": 3.0})
                                          for n in range(6)]), DONE])
    runtime = await make_runtime(dirs=[directory], models={"m": model}, tool_threads=2,
                                 concurrency=1)
    run_id = await runtime.start_run("tooling", "go")
    await wait_until(lambda: len(list(marks.glob("start-*"))) == 2)
    await runtime.cancel_run(run_id, "stop it")
    # the worker stops waiting within a check interval: its only slot takes the next run
    model.script = [DONE]
    other = await runtime.start_run("tooling", "next")
    record = await runtime.wait_for_run(other, timeout_s=20)
    assert record.status == "completed"
    assert not list(marks.glob("end-*")), "the next run waited for the cancelled run's tools"
    # the two running calls finish in their threads; the four queued ones never start
    await wait_until(lambda: len(list(marks.glob("end-*"))) == 2)
    await asyncio.sleep(0.5)
    assert sorted(p.name for p in marks.glob("start-*")) == ["start-0", "start-1"]
    events = await runtime.events(run_id)
    check_log(events)
    results = [e.data for e in events if e.type == "ToolCallCompleted"]
    assert [r["error_kind"] for r in results] == ["abandoned"] * 6
    assert (await runtime.get_run(run_id)).status == "cancelled"


async def test_a_tool_that_overruns_its_timeout_is_an_error_for_the_model(
        make_runtime, tmp_path: Path) -> None:
    directory = write_agent_dir(tmp_path, "tooling", tools_py=TOOLS, model="test/m",
                                limits={"toolTimeoutSeconds": 0.5})
    model = ScriptedModel(script=[calls(("stuck", {"seconds": 60}),
                                        ("slow", {"n": 1, "seconds": 5})), DONE])
    runtime = await make_runtime(dirs=[directory], models={"m": model})
    started = time.monotonic()
    run_id = await runtime.start_run("tooling", "go")
    record = await runtime.wait_for_run(run_id, timeout_s=30)
    assert record.status == "completed" and record.output == "done"
    assert time.monotonic() - started < 5  # it did not wait for either tool
    events = await runtime.events(run_id)
    results = {e.data["name"]: e.data for e in events if e.type == "ToolCallCompleted"}
    assert {name: r["error_kind"] for name, r in results.items()} == {
        "stuck": "timeout", "slow": "timeout"}
    assert "limits.toolTimeoutSeconds" in results["stuck"]["output"]
    # the model saw the errors as tool results
    assert types(events).count("ModelCallCompleted") == 2


async def test_a_blocked_event_loop_is_named_by_the_watchdog(
        make_runtime, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = write_agent_dir(tmp_path, "tooling", tools_py=TOOLS, model="test/m")
    model = ScriptedModel(script=[calls(("blocker", {"seconds": 1.5})), DONE])
    runtime = await make_runtime(dirs=[directory], models={"m": model},
                                 blocked_loop_warn_s=0.3)
    caplog.set_level(logging.WARNING, logger="toren.host.watchdog")
    run_id = await runtime.start_run("tooling", "go")
    await runtime.wait_for_run(run_id, timeout_s=30)
    blocked = [r.getMessage() for r in caplog.records if "has been blocked" in r.getMessage()]
    assert len(blocked) == 1, blocked
    assert "async tool 'blocker'" in blocked[0] and run_id in blocked[0]
    assert "tools.py" in blocked[0] and "sync tool" in blocked[0]
    assert any("runs again" in r.getMessage() for r in caplog.records)


def test_a_loop_that_is_not_running_is_not_reported_as_blocked(
        caplog: pytest.LogCaptureFixture) -> None:
    from toren.host.watchdog import LoopWatchdog

    watchdog = LoopWatchdog(0.1)
    caplog.set_level(logging.WARNING, logger="toren.host.watchdog")
    with asyncio.Runner() as runner:
        runner.run(watchdog.start())
        time.sleep(0.6)  # synchronous code between two runs of the loop: nothing is blocked
        runner.run(watchdog.stop())
    assert watchdog.blockages == 0, [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize(("module", "ours"), [
    ("toren_mcp.server", True), ("toren.server.app", True),
    ("toren_crew_tooling_tools", False), ("helpers", False)])
def test_the_watchdog_names_torens_own_code_as_torens(
        module: str, ours: bool, caplog: pytest.LogCaptureFixture) -> None:
    from toren.host.watchdog import LoopWatchdog

    # a function as a module of that name defines it, in a file outside installed packages
    # (an editable plugin's, or the user's)
    namespace: dict[str, object] = {"__name__": module, "time": time}
    exec(compile("def build_server():\n    time.sleep(0.6)\n", f"/srv/{module}.py", "exec"),
         namespace)
    watchdog = LoopWatchdog(0.1)
    caplog.set_level(logging.INFO, logger="toren.host.watchdog")

    async def start_up() -> None:
        await watchdog.start()
        namespace["build_server"]()  # type: ignore[operator]
        await asyncio.sleep(0.3)  # the loop runs again
        await watchdog.stop()

    asyncio.run(start_up())

    (blocked,) = [r for r in caplog.records if "has been blocked" in r.getMessage()]
    said = blocked.getMessage()
    assert f"build_server ({module}) at /srv/{module}.py:2" in said
    if ours:  # Toren's start-up is not blamed on the user's tools
        assert blocked.levelno == logging.INFO
        assert "Toren's own code, not an agent's tool" in said and "sync tool" not in said
    else:
        assert blocked.levelno == logging.WARNING and "sync tool" in said


def test_an_import_under_way_is_blamed_on_the_code_importing(
        caplog: pytest.LogCaptureFixture) -> None:
    """On a fresh install the first start compiles what it imports: the innermost frames are
    importlib's frozen ones (``<frozen importlib._bootstrap_external>``), which are the
    standard library's, not the user's; the code that imports is named (here Toren's)."""
    from toren.host.watchdog import LoopWatchdog

    importlib_ns: dict[str, object] = {"__name__": "importlib._bootstrap_external",
                                       "time": time}
    exec(compile("def _path_stat(path):\n    time.sleep(0.6)\n",
                 "<frozen importlib._bootstrap_external>", "exec"), importlib_ns)
    toren_ns: dict[str, object] = {"__name__": "toren.server.app", "stat": importlib_ns[
        "_path_stat"]}
    exec(compile("def create_app():\n    stat('x')\n", "/srv/toren/server/app.py", "exec"),
         toren_ns)
    watchdog = LoopWatchdog(0.1)
    caplog.set_level(logging.INFO, logger="toren.host.watchdog")

    async def start_up() -> None:
        await watchdog.start()
        toren_ns["create_app"]()  # type: ignore[operator]
        await asyncio.sleep(0.3)
        await watchdog.stop()

    asyncio.run(start_up())

    (blocked,) = [r for r in caplog.records if "has been blocked" in r.getMessage()]
    said = blocked.getMessage()
    assert "create_app (toren.server.app) at /srv/toren/server/app.py:2" in said, said
    assert blocked.levelno == logging.INFO and "sync tool" not in said
