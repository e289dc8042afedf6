"""Commands under bubblewrap: escapes and resource abuse fail, and the worker stays healthy.

Needs bubblewrap (``pytest -m bwrap``; ``.ci/run`` installs it)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from toren_sandbox.config import SandboxConfig, check_available
from toren_sandbox.jail import CommandResult, run_isolated

pytestmark = pytest.mark.bwrap


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    assert check_available(), "bubblewrap is not installed"
    directory = tmp_path / "ws"
    directory.mkdir()
    if os.geteuid() == 0:
        os.chown(directory, 65534, 65534)
    return directory


async def run(command: str, workspace: Path, **settings: object) -> CommandResult:
    config = SandboxConfig(**{"timeout_s": 20.0, **settings})  # type: ignore[arg-type]
    uid = 65534 if os.geteuid() == 0 else None
    return await run_isolated(command, workspace, config, os.environ, uid=uid)


def assert_absent(name: str, *folders: str) -> None:
    for folder in folders:
        assert not os.path.exists(os.path.join(folder, name)), folder


def assert_worker_healthy() -> None:
    """This process can still start processes and allocate memory."""
    assert subprocess.run(["true"], check=False).returncode == 0
    assert len(bytearray(64 * 1024 * 1024)) == 64 * 1024 * 1024


async def test_a_command_writes_only_its_workspace(workspace: Path, tmp_path: Path) -> None:
    probe = f"toren-sandbox-probe-{uuid.uuid4().hex}"
    result = await run("echo made > here.txt && pwd && "
                       f"touch /usr/{probe}; echo usr=$?; touch /{probe}; echo root=$?; "
                       f"touch {tmp_path}/{probe}; echo beside=$?; "
                       f"echo private > /tmp/{probe} && cat /tmp/{probe}", workspace)
    out = result.stdout.decode()
    assert result.exit_code == 0, result
    assert (workspace / "here.txt").read_text() == "made\n"
    assert "/workspace\n" in out and "usr=1" in out and "root=1" in out and "beside=1" in out
    assert_absent(probe, "/usr", "/", str(tmp_path), "/tmp")
    assert "private" in out  # /tmp inside is private: nothing reached the host's /tmp


async def test_host_secrets_are_out_of_sight(workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "home-secret"
    secret.write_text("top secret")
    home = Path.home()
    result = await run(f"cat /etc/shadow; cat {secret}; ls {home}; ls /root; env", workspace)
    text = result.stdout.decode() + result.stderr.decode()
    assert "top secret" not in text
    assert "root:" not in text
    assert "No such file or directory" in text
    variables = {line.partition("=")[0] for line in result.stdout.decode().splitlines()}
    assert variables <= {"PATH", "HOME", "LANG", "TERM", "PWD", "SHLVL", "_"}


async def test_the_network_is_off_unless_allowed(workspace: Path) -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    probe = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
    try:
        blocked = await run(probe, workspace)
        assert blocked.exit_code != 0 and b"connected" not in blocked.stdout
        outside = await run("curl -sS -m 5 https://example.com", workspace)
        assert outside.exit_code != 0
        allowed = await run(probe, workspace, network=True)
        assert allowed.stdout.decode().strip() == "connected", allowed
    finally:
        server.close()
        await server.wait_closed()


async def test_a_fork_bomb_fails_and_the_worker_stays_healthy(workspace: Path) -> None:
    result = await run("bomb() { bomb | bomb & }; bomb; sleep 2; echo survived", workspace,
                       max_processes=64, timeout_s=10.0)
    assert result.exit_code is not None
    assert b"fork" in result.stderr or b"Resource temporarily unavailable" in result.stderr
    assert_worker_healthy()
    after = await run("echo fine", workspace)
    assert after.stdout == b"fine\n"


async def test_memory_cpu_file_size_and_time_are_limited(workspace: Path) -> None:
    memory = await run("python3 -c 'b = bytearray(400 * 1024 * 1024); print(len(b))'",
                       workspace, memory_mb=128)
    assert memory.exit_code != 0 and b"MemoryError" in memory.stderr
    cpu = await run("while :; do :; done", workspace, cpu_s=1)
    assert cpu.exit_code is not None and cpu.exit_code != 0 and not cpu.timed_out
    big = await run("head -c 3000000 /dev/zero > big.bin", workspace, max_file_mb=1)
    assert big.exit_code != 0 and (workspace / "big.bin").stat().st_size == 1024 * 1024
    slow = await run("sleep 60 & sleep 60", workspace, timeout_s=1.0)
    assert slow.timed_out and "did not finish within 1 s" in slow.render(1.0)
    assert_worker_healthy()


async def test_output_is_capped(workspace: Path) -> None:
    result = await run("head -c 100000 /dev/zero | tr '\\0' a", workspace,
                       max_output_bytes=1000)
    assert len(result.stdout) == 1000 and result.stdout_dropped == 99000
    assert "99000 more bytes of stdout cut" in result.render(1.0)


NOT_ROOT_SCRIPT = """
import asyncio, sys
from pathlib import Path
from toren_sandbox.config import SandboxConfig
from toren_sandbox.jail import run_isolated
result = asyncio.run(run_isolated(
    "id -u; echo mine > f; cat /etc/shadow; bomb() { bomb | bomb & }; bomb; sleep 1; echo done",
    Path(sys.argv[1]), SandboxConfig(max_processes=32, timeout_s=15), {}, uid=None))
print(result.render(15))
"""


def test_a_worker_that_is_not_root_isolates_in_a_user_namespace(workspace: Path) -> None:
    """The path a non-root worker takes (bwrap as itself, --unshare-all); as root, the test
    runs it as nobody, on a workspace nobody can reach (pytest's tmp_path is root's alone)."""
    argv = [sys.executable, "-c", NOT_ROOT_SCRIPT, str(workspace)]
    if os.geteuid() == 0:
        reachable = Path(tempfile.mkdtemp(prefix="toren-sandbox-"))
        os.chown(reachable, 65534, 65534)
        workspace = reachable
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                *argv[:-1], str(workspace)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                              cwd="/")
        file_text = (workspace / "f").read_text()
    finally:
        if workspace.name.startswith("toren-sandbox-"):
            shutil.rmtree(workspace)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("exit code 0"), done.stdout
    assert "Resource temporarily unavailable" in done.stdout  # the fork bomb hit the limit
    assert "done" in done.stdout and "root:" not in done.stdout
    assert file_text == "mine\n"


async def test_hostile_commands_fail_cleanly(workspace: Path) -> None:
    with pytest.raises(ValueError, match="null byte"):
        await run("echo a\x00b", workspace)
    huge = await run("echo " + "x" * 100_000 + " | wc -c", workspace)
    assert huge.stdout == b"100001\n"
    escape = await run("echo \"$GREETING\"", workspace, env={"GREETING": "a\nb; rm -rf /"})
    assert escape.stdout == b"a\nb; rm -rf /\n"
