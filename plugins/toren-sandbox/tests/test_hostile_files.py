"""Hostile files in the workspace, hostile manifests in the store.

A FIFO, a socket, a device node or a loop of symbolic links that a command leaves in the
workspace is refused by the file tools without blocking (opening a FIFO for reading waits for
a writer: on the event loop that froze the whole worker); the scan that records the workspace
after a command removes them without opening them (they cannot be recorded), and the command's
result names them. A stored manifest (which an edited archive can carry) whose paths
leave the workspace, or that puts an entry under a link, is refused before anything is written.

The unit tests need neither Postgres nor bubblewrap; the runtime tests use real Postgres and
the plugin's own tools (``TOREN_SANDBOX_UNSAFE`` lets it load where bubblewrap is missing).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import socket
import stat
import sys
import threading
import time
import tracemalloc
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sandbox_helpers import RuntimeFactory, plan, run_plan
from toren_sandbox.config import MIB, SandboxConfig, check_available
from toren_sandbox.files import WorkspacePathError, open_regular, read_bytes, write_bytes
from toren_sandbox.workspace import (
    MAX_DEPTH,
    Head,
    WorkspaceManifestInvalid,
    Workspaces,
    WorkspaceUnrecordable,
    check_entries,
    entries_at,
    scan_directory,
    scope_for,
)

from toren import ToolCallContext
from toren.host.runtime import Runtime
from toren.seams.store import ToolManifest
from toren.testing import OutputProcess, writers_for_fifos

#: A call that blocks longer than this has hung (the FIFO's writer is opened after it).
HANG_S = 8.0


@pytest.fixture(autouse=True)
def loads_anywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_SANDBOX_UNSAFE", "1")


def bind_socket(directory: Path, name: str) -> socket.socket:
    """A listening unix socket at ``directory/name`` (bound through /proc/self/fd: a deep
    test path is longer than a socket address may be)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        server = socket.socket(socket.AF_UNIX)
        server.bind(f"/proc/self/fd/{fd}/{name}")
    finally:
        os.close(fd)
    return server


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Path]:
    """A workspace holding a text file, a FIFO, a socket, a loop of links, a link to a FIFO
    and (as root) a character device (a copy of /dev/zero: reading it never ends)."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "text.txt").write_text("plain\n")
    os.mkfifo(root / "fifo")
    server = bind_socket(root, "sock")
    (root / "loop-a").symlink_to("loop-b")
    (root / "loop-b").symlink_to("loop-a")
    (root / "to-fifo").symlink_to("fifo")
    if os.geteuid() == 0:
        os.mknod(root / "zero", 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    try:
        yield root
    finally:
        server.close()


def finishes(call: Callable[[], object], fifo: Path) -> tuple[float, BaseException | None]:
    """Run ``call`` (in a thread); the seconds it took and what it raised."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    started = time.monotonic()
    with writers_for_fifos(lambda: [fifo], HANG_S):
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(HANG_S * 4)
    return time.monotonic() - started, (outcome or [TimeoutError("still blocked")])[0]


SPECIAL = [("fifo", "a FIFO (named pipe)"), ("sock", "a socket"),
           ("loop-a", "a symbolic link"), ("to-fifo", "a symbolic link"),
           ("zero", "a character device")]


# -- the file functions ----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "kind"), SPECIAL)
def test_reading_a_special_file_is_refused_at_once(hostile: Path, name: str, kind: str) -> None:
    if not (hostile / name).exists() and not (hostile / name).is_symlink():
        pytest.skip("mknod needs root")
    took, error = finishes(lambda: read_bytes(hostile, name), hostile / "fifo")
    assert took < HANG_S / 2, f"read_bytes({name!r}) blocked for {took:.1f} s"
    assert isinstance(error, WorkspacePathError), error
    assert f"{name!r} is {kind}" in error.message


@pytest.mark.parametrize(("name", "kind"), SPECIAL)
def test_writing_over_a_special_file_is_refused_and_leaves_it(hostile: Path, name: str,
                                                              kind: str) -> None:
    if not (hostile / name).exists() and not (hostile / name).is_symlink():
        pytest.skip("mknod needs root")
    before = os.lstat(hostile / name)
    took, error = finishes(lambda: write_bytes(hostile, name, b"x"), hostile / "fifo")
    assert took < HANG_S / 2
    assert isinstance(error, WorkspacePathError), error
    assert kind in error.message and "not a regular file" in error.message
    after = os.lstat(hostile / name)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)


def test_a_special_file_swapped_in_after_the_check_is_refused_without_blocking(
        hostile: Path) -> None:
    """What guards the race between the ``lstat`` and the open: every open is non-blocking
    and checks ``fstat`` itself."""
    parent = os.open(hostile, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for flags in (os.O_RDONLY, os.O_WRONLY | os.O_CREAT):
            def opens(flags: int = flags) -> None:
                os.close(open_regular(parent, "fifo", flags, "fifo"))

            took, error = finishes(opens, hostile / "fifo")
            assert took < HANG_S / 2
            assert isinstance(error, WorkspacePathError), error
            assert "FIFO" in error.message
    finally:
        os.close(parent)
    assert stat.S_ISFIFO(os.lstat(hostile / "fifo").st_mode)


def test_regular_files_still_read_and_write(hostile: Path) -> None:
    assert read_bytes(hostile, "text.txt") == b"plain\n"
    assert write_bytes(hostile, "text.txt", b"new") is False
    assert (hostile / "text.txt").read_bytes() == b"new"


# -- the scan that records the workspace -----------------------------------------------------


def test_the_scan_removes_special_files_names_them_and_never_opens_them(hostile: Path) -> None:
    scanned: list[Any] = []
    took, error = finishes(lambda: scanned.append(scan_directory(hostile, Head(None, 0, {}))),
                           hostile / "fifo")
    assert error is None and took < HANG_S / 2, error
    scan = scanned[0]
    assert set(scan.entries) == {"text.txt", "loop-a", "loop-b", "to-fifo"}
    assert scan.entries["loop-a"] == ["l", "loop-b"]
    expected = {"fifo": "a FIFO (named pipe)", "sock": "a socket"}
    if os.geteuid() == 0:
        expected["zero"] = "a character device"
    assert scan.dropped == expected
    # what is left is what a restore would give back
    assert sorted(os.listdir(hostile)) == ["loop-a", "loop-b", "text.txt", "to-fifo"]


def test_the_scan_of_a_workspace_over_its_cap_reads_no_more_than_the_cap(tmp_path: Path) -> None:
    """Sparse files cost a command nothing to make: a scan that read them all before looking
    at the total held them all in memory at once."""
    root = tmp_path / "ws"
    root.mkdir()
    for index in range(8):
        with (root / f"sparse-{index}").open("wb") as handle:
            handle.truncate(32 * MIB)
    tracemalloc.start()
    try:
        scan = scan_directory(root, Head(None, 0, {}), limit_bytes=MIB)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert scan.total_bytes == 8 * 32 * MIB
    assert peak < 40 * MIB, f"the scan held {peak / MIB:.0f} MiB"


def test_names_that_are_not_utf8_are_removed_and_named(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / os.fsdecode(b"latin-\xe9.txt")).write_text("x")
    os.mkdir(root / os.fsdecode(b"dir-\xff"))
    (root / os.fsdecode(b"dir-\xff") / "inside.txt").write_text("x")
    scan = scan_directory(root, Head(None, 0, {}))
    assert scan.entries == {}
    assert scan.dropped == {"latin-\\xe9.txt": "a name that is not UTF-8",
                            "dir-\\xff": "a name that is not UTF-8"}
    assert os.listdir(root) == []


def test_a_tree_deeper_than_the_sandbox_records_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "/".join(["d"] * (MAX_DEPTH + 1))).mkdir(parents=True)
    with pytest.raises(WorkspaceUnrecordable, match=f"more than {MAX_DEPTH} directories deep"):
        scan_directory(root, Head(None, 0, {}))
    (root / "/".join(["d"] * (MAX_DEPTH + 1))).rmdir()
    assert len(scan_directory(root, Head(None, 0, {})).entries) == MAX_DEPTH


# -- the tools, in a runtime -----------------------------------------------------------------


class LoopWatch:
    """The longest the event loop went without running a 50 ms ticker."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            self.worst = max(self.worst, now - last)
            last = now

    def __enter__(self) -> LoopWatch:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


def task_directory(workspaces: Path, run_id: str) -> Path:
    """The one task directory of a run (or session) on this worker's disk."""
    [directory] = workspaces.glob(f"boxed/{run_id}/*")
    return directory


SOCKET_PY = "import socket; socket.socket(socket.AF_UNIX).bind('sock')"


async def test_special_files_a_command_leaves_are_removed_and_named(
        sandbox_runtime: RuntimeFactory) -> None:
    """The issue's reproduction (``bash: mkfifo p`` then ``read_file: p``): the FIFO and the
    socket cannot be recorded, so they go when the command ends, and its result says so."""
    runtime, _ = await sandbox_runtime()
    _, results = await run_plan(
        runtime,
        ("bash", {"command": f"mkfifo fifo && python3 -c \"{SOCKET_PY}\" && "
                             "ln -s loop-b loop-a && ln -s loop-a loop-b && echo made"}),
        ("read_file", {"path": "fifo"}),
        ("read_file", {"path": "loop-a"}),
        ("edit_file", {"path": "loop-a", "old_text": "a", "new_text": "b"}),
        ("write_file", {"path": "loop-b", "content": "x"}),
        ("bash", {"command": "ls"}))
    outputs = [r["output"] for r in results]
    assert [r["is_error"] for r in results] == [False, True, True, True, True, False], outputs
    assert "made" in outputs[0]
    assert ("removed from the workspace after the command: 'fifo' (a FIFO (named pipe)), "
            "'sock' (a socket)") in outputs[0]
    assert "'fifo' does not exist" in outputs[1]
    for output in outputs[2:5]:
        assert "is a symbolic link" in output
    # the links are recorded (and restored after the failed edit); the next result is clean
    assert outputs[5].split("--- stdout ---\n")[1].split() == ["loop-a", "loop-b"]


async def test_a_command_that_nests_too_deep_is_undone(sandbox_runtime: RuntimeFactory) -> None:
    runtime, _ = await sandbox_runtime()
    _, results = await run_plan(
        runtime,
        ("write_file", {"path": "kept.txt", "content": "k"}),
        ("bash", {"command": f"mkdir -p {'d/' * (MAX_DEPTH + 1)} && echo made"}),
        ("bash", {"command": "ls"}))
    outputs = [r["output"] for r in results]
    assert [r["is_error"] for r in results] == [False, True, False], outputs
    assert f"more than {MAX_DEPTH} directories deep" in outputs[1]
    assert "this call's changes were undone" in outputs[1]
    assert outputs[2].split("--- stdout ---\n")[1].split() == ["kept.txt"]


PLANT_PY = """
import os
import socket
import stat

from toren import current_tool_call
from toren_sandbox.tools import WORKSPACES

SOCKETS = []


def plant(kind: str, name: str) -> str:
    \"\"\"Put a special file in the task's workspace behind the sandbox's back.\"\"\"
    path = WORKSPACES.directory(current_tool_call()) / name
    if os.path.lexists(path):  # planted before, and no failed change restored the directory
        os.unlink(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        SOCKETS.append(socket.socket(socket.AF_UNIX))
        SOCKETS[-1].bind(f"/proc/self/fd/{fd}/{name}")
        os.close(fd)
    elif kind == "loop":
        path.symlink_to(name)
    else:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    return "planted"
"""


async def test_file_tools_on_special_files_fail_at_once_and_the_loop_keeps_running(
        sandbox_runtime: RuntimeFactory, workspaces: Path) -> None:
    """A special file that is there when a file tool runs (put there behind the worker's back:
    a command's own are removed when it ends): each tool refuses it without blocking the
    event loop, which goes on running the worker (the FIFO's writer is opened only after
    ``HANG_S``, to end a hang)."""
    runtime, _ = await sandbox_runtime(tools_py=PLANT_PY)
    kinds = {"fifo": "a FIFO (named pipe)", "socket": "a socket", "loop": "a symbolic link"}
    if os.geteuid() == 0:
        kinds["device"] = "a character device"
    calls: list[tuple[str, dict[str, Any]]] = [
        ("write_file", {"path": "a.txt", "content": "a"})]
    cases = []
    for kind in kinds:
        for tool, arguments in (("read_file", {}), ("write_file", {"content": "x"}),
                                ("edit_file", {"old_text": "a", "new_text": "b"})):
            # a failed changing call leaves the directory to be restored by the next sandbox
            # call: one does that first, then the file is planted
            calls += [("read_file", {"path": "a.txt"}),
                      ("plant", {"kind": kind, "name": kind}),
                      (tool, {"path": kind, **arguments})]
            cases.append((kind, tool))
    run_id = await runtime.start_run("boxed", plan(*calls))
    fifos = workspaces / "boxed" / run_id
    with LoopWatch() as watch, writers_for_fifos(lambda: fifos.glob("*/fifo"), HANG_S):
        record = await runtime.wait_for_run(run_id, timeout_s=120)
    assert record.status == "completed", record
    assert watch.worst < HANG_S / 2, f"the event loop stalled for {watch.worst:.1f} s"
    results = [e.data for e in await runtime.events(run_id) if e.type == "ToolCallCompleted"]
    assert not results[0]["is_error"]
    for (kind, tool), index in zip(cases, range(3, len(results), 3), strict=True):
        assert results[index - 1]["output"] == "planted"
        result = results[index]
        assert result["is_error"], (kind, tool, result)
        assert f"'{kind}' " in result["output"] and kinds[kind] in result["output"], \
            (kind, tool, result["output"])


TOREN = Path(sys.executable).parent / "toren"
EXAMPLE = Path(__file__).parents[3] / "contrib" / "examples" / "with-plugins" / "sandbox-crew"


def get_json(url: str, body: Any = None, timeout_s: float = 10) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return json.loads(response.read())


@pytest.mark.bwrap
@pytest.mark.timeout(240)
def test_toren_dev_answers_throughout_the_fifo_reproduction(
        database_url: str, tmp_path: Path, output_processes: list[OutputProcess]) -> None:
    """The issue's reproduction against a real ``toren dev`` serving the example agent, its
    commands under bubblewrap: ``/healthz`` answers within 2 s from start to end."""
    assert check_available(), "bubblewrap is not installed"
    env = {key: value for key, value in os.environ.items()
           if key != "DATABASE_URL" and not key.startswith("TOREN_")}
    env |= {"DATABASE_URL": database_url, "TOREN_LOAD_PLUGINS": "toren-sandbox",
            "TOREN_HOME": str(tmp_path / "home"), "TOREN_SANDBOX_DIR": str(tmp_path / "disk"),
            "NO_COLOR": "1"}
    dev = OutputProcess([str(TOREN), "dev", "--dir", str(EXAMPLE), "--port", "0", "--json"],
                        env=env, stderr_path=tmp_path / "dev.stderr")
    output_processes.append(dev)
    url = dev.next_json()["url"]
    created = get_json(f"{url}/runs", {"agent": "sandbox-crew", "input": plan(
        ("bash", {"command": "mkfifo p && echo made"}), ("read_file", {"path": "p"}),
        ("edit_file", {"path": "p", "old_text": "a", "new_text": "b"}),
        ("bash", {"command": "echo after > after.txt"}), ("read_file", {"path": "after.txt"}))})
    run_id = created["id"]
    slow: list[str] = []
    status = "queued"
    with writers_for_fifos(
            lambda: (tmp_path / "disk" / "sandbox-crew" / run_id).glob("*/p"), HANG_S):
        deadline = time.monotonic() + 120
        while status not in ("completed", "failed") and time.monotonic() < deadline:
            try:
                assert get_json(f"{url}/healthz", timeout_s=2)["status"] == "ok"
            except OSError as exc:  # a timeout, a refused connection
                slow.append(repr(exc))
            status = get_json(f"{url}/runs/{run_id}", timeout_s=30)["status"]
            time.sleep(0.2)
    assert not slow, f"/healthz did not answer within 2 s: {slow[:3]}; {dev.stderr}"
    assert status == "completed", dev.stderr
    events = get_json(f"{url}/runs/{run_id}/events")["events"]
    results = [e["data"] for e in events if e["type"] == "ToolCallCompleted"]
    outputs = [r["output"] for r in results]
    assert [r["is_error"] for r in results] == [False, True, True, False, False], outputs
    assert "made" in outputs[0] and "'p' (a FIFO (named pipe))" in outputs[0]
    assert "'p' does not exist" in outputs[1] and "after" in outputs[4]


# -- restoring from hostile manifests --------------------------------------------------------


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


PAYLOAD = b"written by a hostile manifest\n"


@pytest.mark.parametrize(("entries", "words"), [
    ({"../x": ["d"]}, "'..'"),
    ({"/etc/x": ["f", sha(PAYLOAD), len(PAYLOAD), False]}, "absolute path"),
    ({"a": ["d"], "a/../../x": ["f", sha(PAYLOAD), len(PAYLOAD), False]}, "'..'"),
    ({"a\x00b": ["d"]}, "NUL"),
    ({"a//b": ["d"]}, "empty"),
    ({"./a": ["d"]}, "'.'"),
    ({"link": ["l", "/etc"], "link/x": ["f", sha(PAYLOAD), len(PAYLOAD), False]},
     "lies under 'link', which is not a directory"),
    ({"x/y": ["d"]}, "lies under 'x', which is not recorded"),
    ({"f": ["f", sha(PAYLOAD), len(PAYLOAD), False], "f/y": ["d"]}, "not a directory"),
    ({"a": ["f", "../../etc/passwd", 1, False]}, "malformed file"),
    ({"a": ["f", sha(PAYLOAD), -1, False]}, "malformed file"),
    ({"a": ["l", "x\x00y"]}, "malformed link"),
    ({"a": ["p"]}, "not a file, a link or a directory"),
    ({"a": "d"}, "not a file, a link or a directory"),
    ({"/".join(["d"] * 200): ["d"]}, "nested more than"),
    ({"n" * 256: ["d"]}, "longer than 255 bytes"),
])
def test_check_entries_refuses_paths_that_leave_the_workspace(entries: dict[str, Any],
                                                              words: str) -> None:
    with pytest.raises(WorkspaceManifestInvalid) as caught:
        check_entries(entries)
    assert words in caught.value.message
    assert "nothing was written" in caught.value.message
    assert "\n" not in caught.value.message


def test_manifest_chains_that_loop_or_are_not_manifests_are_refused() -> None:
    def manifest(seq: int, parent: int | None, full: bool, entries: Any = None,
                 removed: Any = ()) -> ToolManifest:
        return ToolManifest(seq=seq, parent_seq=parent, step=seq, epoch=1, call_id="c",
                            full=full, entries={} if entries is None else entries,
                            removed=list(removed), total_bytes=0)

    looping = {1: manifest(1, 2, False), 2: manifest(2, 1, False)}
    with pytest.raises(WorkspaceManifestInvalid, match="a parent is an earlier manifest"):
        entries_at(looping[2], looping)
    itself = {3: manifest(3, 3, False)}
    with pytest.raises(WorkspaceManifestInvalid, match="a parent is an earlier manifest"):
        entries_at(itself[3], itself)
    listed = {0: manifest(0, None, True, entries=[["a", ["d"]]])}
    with pytest.raises(WorkspaceManifestInvalid, match="not a mapping of entries"):
        entries_at(listed[0], listed)


def context(runtime: Runtime, run_id: str, task_id: str, step: int, epoch: int
            ) -> ToolCallContext:
    return ToolCallContext("boxed", run_id, task_id, step, f"c{step}", f"k{step}", epoch=epoch,
                           state=runtime.store)


async def recorded_run(runtime: Runtime) -> tuple[str, str, int, int]:
    """A run whose task recorded one state: (run id, task id, its last step, next seq)."""
    run_id, _ = await run_plan(runtime, ("write_file", {"path": "kept.txt", "content": "k"}))
    events = await runtime.events(run_id)
    task_id = next(e.data["task_id"] for e in events if e.type == "TaskStarted")
    step = max(e.data["step"] for e in events if e.type == "ToolCallCompleted")
    return run_id, task_id, step, 1


def files_under(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["parent", "parent-in-dir", "absolute", "under-link",
                                  "loop-of-parents"])
async def test_a_restore_from_a_hostile_manifest_writes_nothing_anywhere(
        sandbox_runtime: RuntimeFactory, tmp_path: Path, case: str) -> None:
    runtime, _ = await sandbox_runtime()
    run_id, task_id, step, seq = await recorded_run(runtime)
    outside = tmp_path / "outside"
    outside.mkdir()
    before = files_under(tmp_path)
    planted = ["f", sha(PAYLOAD), len(PAYLOAD), False]
    entries: dict[str, Any] = {
        # the worker's directory is <root>/boxed/<run>/<task>: five levels up is tmp_path
        "parent": {"../../../../outside/x": planted},
        "parent-in-dir": {"a": ["d"], "a/../../../../../outside/x": planted},
        "absolute": {str(outside / "x"): planted},
        "under-link": {"link": ["l", str(outside)], "link/x": planted},
        "loop-of-parents": {"x": planted},
    }[case]
    assert runtime.store is not None
    await runtime.store.save_blobs("boxed", {sha(PAYLOAD): PAYLOAD})
    looping = case == "loop-of-parents"
    await runtime.store.save_manifest("boxed", run_id, scope_for(task_id), ToolManifest(
        seq=seq, parent_seq=seq if looping else None, step=step + 1, epoch=5, call_id="evil",
        full=not looping, entries=entries, removed=[], total_bytes=len(PAYLOAD)))

    elsewhere = Workspaces(tmp_path / "other-worker")
    with pytest.raises(WorkspaceManifestInvalid) as caught:
        async with elsewhere.open(context(runtime, run_id, task_id, step + 2, epoch=6),
                                  SandboxConfig(), mutating=False):
            pytest.fail("the workspace was restored")
    assert "cannot be restored" in caught.value.message
    assert "nothing was written" in caught.value.message
    assert not (outside / "x").exists()
    assert files_under(tmp_path) - before <= {"other-worker", "other-worker/boxed"}, \
        files_under(tmp_path) - before


async def test_the_tool_call_gets_the_refusal_and_the_directory_on_disk_is_kept(
        sandbox_runtime: RuntimeFactory, database_url: str, workspaces: Path,
        tmp_path: Path) -> None:
    """An edited manifest met by a later turn (after the worker lost the directory): the
    call is an error saying why, and nothing is written."""
    runtime, _ = await sandbox_runtime()
    session = await runtime.start_session("boxed")
    await runtime.send_message(session, plan(("write_file", {"path": "a.txt", "content": "1"})))
    await runtime.wait_for_turn(session, timeout_s=60)
    outside = tmp_path / "outside"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE agent_boxed.tool_manifests SET entries = %s::jsonb",
                     [f'{{"link": ["l", "{outside}"], "link/x": ["d"]}}'])
    # this worker no longer holds the directory: the next call restores it
    shutil.rmtree(task_directory(workspaces, session))
    outside.mkdir()
    await runtime.send_message(session, plan(("read_file", {"path": "a.txt"})))
    await runtime.wait_for_turn(session, timeout_s=60)
    results = [e.data for e in await runtime.events(session) if e.type == "ToolCallCompleted"]
    assert results[-1]["is_error"] is True
    assert "cannot be restored: the entry 'link/x' lies under 'link'" in results[-1]["output"]
    assert list(outside.iterdir()) == []
