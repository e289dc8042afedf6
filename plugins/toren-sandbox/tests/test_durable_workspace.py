"""The workspace is durable: every changing call is recorded in Postgres (content-addressed
blobs, a manifest per call), and another worker, or an attempt after a crash, sees exactly the
files as of the last recorded step. Real Postgres; the file tools only, so no bubblewrap is
needed (TOREN_SANDBOX_UNSAFE lets the plugin load where it is missing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from sandbox_helpers import RuntimeFactory, plan, run_plan
from toren_sandbox import workspace as workspace_module
from toren_sandbox.config import SandboxConfig
from toren_sandbox.files import write_bytes
from toren_sandbox.workspace import Workspaces

from toren import ToolCallContext
from toren.host.runtime import Runtime


@pytest.fixture(autouse=True)
def loads_anywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_SANDBOX_UNSAFE", "1")


def manifests(database_url: str, run_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT seq, parent_seq, step, full_state FROM agent_boxed.tool_manifests "
            "WHERE run_id = %s ORDER BY seq", [run_id]).fetchall()


async def task_of(runtime: Runtime, run_id: str) -> tuple[str, int]:
    """The run's task id and its last step."""
    events = await runtime.events(run_id)
    task_id = next(e.data["task_id"] for e in events if e.type == "TaskStarted")
    step = max(e.data["step"] for e in events if e.type == "ToolCallCompleted")
    return task_id, step


def context(runtime: Runtime, run_id: str, task_id: str, step: int, epoch: int
            ) -> ToolCallContext:
    return ToolCallContext("boxed", run_id, task_id, step, f"c{step}", f"k{step}", epoch=epoch,
                           state=runtime.store)


def tree(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): p.read_text() for p in sorted(directory.rglob("*"))
            if p.is_file()}


async def test_another_worker_sees_the_files_of_the_last_recorded_step(
        sandbox_runtime: RuntimeFactory, database_url: str, tmp_path: Path) -> None:
    runtime, _ = await sandbox_runtime()
    run_id, results = await run_plan(
        runtime,
        ("write_file", {"path": "notes.txt", "content": "hello\n"}),
        ("write_file", {"path": "/workspace/src/app.py", "content": "print('hi')\n"}),
        ("edit_file", {"path": "notes.txt", "old_text": "hello", "new_text": "goodbye"}),
        ("read_file", {"path": "notes.txt"}))
    assert [r["is_error"] for r in results] == [False] * 4, results
    assert "goodbye" in results[-1]["output"]
    assert len(manifests(database_url, run_id)) == 3  # reading changes nothing

    # another worker (its own disk, a later lease epoch) continues the task
    task_id, step = await task_of(runtime, run_id)
    elsewhere = Workspaces(tmp_path / "other-worker")
    async with elsewhere.open(context(runtime, run_id, task_id, step + 1, epoch=99),
                              SandboxConfig(), mutating=False) as directory:
        assert tree(directory) == {"notes.txt": "goodbye\n", "src/app.py": "print('hi')\n"}


async def test_a_call_whose_result_was_not_recorded_runs_again_on_the_state_before_it(
        sandbox_runtime: RuntimeFactory, tmp_path: Path) -> None:
    runtime, _ = await sandbox_runtime()
    run_id, _ = await run_plan(runtime, ("write_file", {"path": "a.txt", "content": "one"}))
    task_id, step = await task_of(runtime, run_id)
    config = SandboxConfig()

    # the first attempt at the next step changes files and records its state, then dies
    # before the step's results are appended
    crashed = Workspaces(tmp_path / "crashed-worker")
    async with crashed.open(context(runtime, run_id, task_id, step + 1, epoch=7), config,
                            mutating=True) as directory:
        write_bytes(directory, "a.txt", b"half-written")
        write_bytes(directory, "junk.txt", b"left behind")

    # the retry, under the next epoch on another worker, starts from the recorded step
    retry = Workspaces(tmp_path / "next-worker")
    async with retry.open(context(runtime, run_id, task_id, step + 1, epoch=8), config,
                          mutating=True) as directory:
        assert tree(directory) == {"a.txt": "one"}
        write_bytes(directory, "a.txt", b"two")

    # later steps see the retry's state, never the crashed attempt's
    later = Workspaces(tmp_path / "third-worker")
    async with later.open(context(runtime, run_id, task_id, step + 2, epoch=9), config,
                          mutating=False) as directory:
        assert tree(directory) == {"a.txt": "two"}


async def test_snapshot_every_stores_full_manifests_between_changes_and_blobs_once(
        sandbox_runtime: RuntimeFactory, database_url: str, tmp_path: Path) -> None:
    runtime, _ = await sandbox_runtime(sandbox={"snapshotEvery": 2})
    same = "the same content\n" * 100
    run_id, results = await run_plan(
        runtime, *[("write_file", {"path": f"f{i}.txt", "content": same}) for i in range(4)],
        ("write_file", {"path": "f0.txt", "content": "changed"}))
    assert not any(r["is_error"] for r in results), results
    rows = manifests(database_url, run_id)
    assert [full for *_, full in rows] == [True, False, True, False, True]
    assert [parent for _, parent, *_ in rows] == [None, 0, 1, 2, 3]
    with psycopg.connect(database_url) as conn:
        blobs = conn.execute("SELECT count(*) FROM agent_boxed.tool_blobs").fetchone()
    assert blobs == (2,)  # four files of one content, and "changed"

    task_id, step = await task_of(runtime, run_id)
    async with Workspaces(tmp_path / "w2").open(
            context(runtime, run_id, task_id, step + 1, epoch=50), SandboxConfig(),
            mutating=False) as directory:
        assert tree(directory) == {"f0.txt": "changed", "f1.txt": same, "f2.txt": same,
                                   "f3.txt": same}


async def test_a_call_over_the_size_cap_fails_clearly_and_is_undone(
        sandbox_runtime: RuntimeFactory, database_url: str, workspaces: Path) -> None:
    runtime, _ = await sandbox_runtime(sandbox={"maxWorkspaceMb": 1})
    run_id, results = await run_plan(
        runtime,
        ("write_file", {"path": "small.txt", "content": "fits"}),
        ("write_file", {"path": "big.txt", "content": "x" * (1536 * 1024)}),
        ("read_file", {"path": "big.txt"}),
        ("read_file", {"path": "small.txt"}))
    assert [r["is_error"] for r in results] == [False, True, True, False]
    assert "sandbox.maxWorkspaceMb" in results[1]["output"]
    assert "over its cap of 1 MiB" in results[1]["output"]
    assert "does not exist" in results[2]["output"]
    assert len(manifests(database_url, run_id)) == 1


async def test_finished_runs_workspaces_leave_the_disk_and_stay_stored(
        sandbox_runtime: RuntimeFactory, database_url: str, workspaces: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workspace_module, "SWEEP_INTERVAL_S", 0.0)
    runtime, _ = await sandbox_runtime()
    first, _ = await run_plan(runtime, ("write_file", {"path": "a.txt", "content": "1"}))
    assert (workspaces / "boxed" / first).is_dir()
    second, _ = await run_plan(runtime, ("write_file", {"path": "b.txt", "content": "2"}))
    assert not (workspaces / "boxed" / first).exists()
    assert (workspaces / "boxed" / second).is_dir()
    assert len(manifests(database_url, first)) == 1


async def test_a_session_keeps_its_files_from_one_turn_to_the_next(
        sandbox_runtime: RuntimeFactory) -> None:
    runtime, _ = await sandbox_runtime()
    session = await runtime.start_session("boxed")
    await runtime.send_message(session, plan(
        ("write_file", {"path": "memo.txt", "content": "first turn"})))
    await runtime.wait_for_turn(session, timeout_s=60)
    await runtime.send_message(session, plan(("read_file", {"path": "memo.txt"})))
    await runtime.wait_for_turn(session, timeout_s=60)
    results = [e.data for e in await runtime.events(session) if e.type == "ToolCallCompleted"]
    assert [r["is_error"] for r in results] == [False, False]
    assert "first turn" in results[1]["output"]


async def test_a_worker_that_lost_its_lease_cannot_take_the_seq_of_the_one_that_took_over(
        sandbox_runtime: RuntimeFactory, database_url: str, tmp_path: Path) -> None:
    runtime, _ = await sandbox_runtime()
    run_id, _ = await run_plan(runtime, ("write_file", {"path": "a.txt", "content": "one"}))
    task_id, step = await task_of(runtime, run_id)
    config = SandboxConfig()
    stale, current = Workspaces(tmp_path / "stale"), Workspaces(tmp_path / "current")
    async with stale.open(context(runtime, run_id, task_id, step + 1, epoch=3), config,
                          mutating=False):
        pass
    async with current.open(context(runtime, run_id, task_id, step + 1, epoch=4), config,
                            mutating=True) as directory:
        write_bytes(directory, "a.txt", b"current")
    # the stale worker's call ends later, with the seq it computed before: it moves on
    async with stale.open(context(runtime, run_id, task_id, step + 1, epoch=3), config,
                          mutating=True) as directory:
        write_bytes(directory, "a.txt", b"stale")
    assert [seq for seq, *_ in manifests(database_url, run_id)] == [0, 1, 2]
    async with Workspaces(tmp_path / "later").open(
            context(runtime, run_id, task_id, step + 2, epoch=5), config,
            mutating=False) as directory:
        assert tree(directory) == {"a.txt": "current"}


async def test_hostile_file_tool_calls_get_clear_errors(sandbox_runtime: RuntimeFactory) -> None:
    runtime, _ = await sandbox_runtime()
    _, results = await run_plan(
        runtime,
        ("write_file", {"path": "t.txt", "content": "a a"}),
        ("edit_file", {"path": "t.txt", "old_text": "a", "new_text": "b"}),
        ("edit_file", {"path": "t.txt", "old_text": "zzz", "new_text": "b"}),
        ("edit_file", {"path": "t.txt", "old_text": "", "new_text": "b"}),
        ("edit_file", {"path": "t.txt", "old_text": "a", "new_text": "b", "replace_all": True}),
        ("read_file", {"path": "t.txt", "offset": 0}),
        ("write_file", {"path": "../escape.txt", "content": "x"}),
        ("write_file", {"path": "/etc/passwd", "content": "x"}),
        ("read_file", {"path": "t.txt"}),
        ("read_file", {"path": 42}))
    outputs = [r["output"] for r in results]
    assert [r["is_error"] for r in results] == [False, True, True, True, False, True, True,
                                                True, False, True]
    assert "occurs 2 times" in outputs[1] and "not found" in outputs[2]
    assert "old_text is empty" in outputs[3] and "2 replacement(s)" in outputs[4]
    assert "at least 1" in outputs[5] and "'..'" in outputs[6]
    assert "outside the workspace" in outputs[7] and "b b" in outputs[8]
    assert results[9]["error_kind"] == "invalid_arguments"
