"""Running one command under bubblewrap, with resource limits, a timeout and capped output.

The command runs in new PID, IPC, UTS, cgroup and network namespaces, with capabilities
dropped, a read-only view of ``/usr`` and a few files of ``/etc``, a private ``/tmp``, and the
workspace mounted read-write at ``/workspace``, as an unprivileged user:

- a worker that is not root runs bwrap as itself, in a new user namespace too;
- a worker that is root runs bwrap as root (so it can mount the workspace wherever it is) and the
  command switches to ``TOREN_SANDBOX_UID`` inside with ``setpriv``, keeping no capability: a
  user namespace would map root to root, which the process limit does not bind.

``prlimit`` sets the CPU, memory, file size and process limits; the wall-clock timeout kills
bwrap, which takes the whole PID namespace with it (``--die-with-parent`` does the same if the
worker dies).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from toren_sandbox.config import MIB, SandboxConfig

log = logging.getLogger(__name__)
#: Files of the host's /etc that programs commonly need, exposed read-only when present.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime",
             "nsswitch.conf", "hosts", "mime.types", "ssl", "ca-certificates",
             "ca-certificates.conf")
#: Only with ``sandbox.network``: name resolution.
ETC_NETWORK_FILES = ("resolv.conf", "gai.conf")
#: Top-level directories that are links into /usr on merged-/usr systems.
USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


@dataclass(frozen=True)
class CommandResult:
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    stdout_dropped: int
    stderr_dropped: int
    timed_out: bool

    def render(self, timeout_s: float) -> str:
        """What the model reads: the exit status, then stdout and stderr."""
        if self.timed_out:
            status = (f"killed: the command did not finish within {timeout_s:g} s "
                      "(sandbox.timeoutSeconds)")
        elif self.exit_code is not None and self.exit_code < 0:
            status = f"killed by signal {-self.exit_code} ({_signal_name(-self.exit_code)})"
        else:
            status = f"exit code {self.exit_code}"
        parts = [status]
        for name, data, dropped in (("stdout", self.stdout, self.stdout_dropped),
                                    ("stderr", self.stderr, self.stderr_dropped)):
            if data or dropped:
                text = data.decode("utf-8", "replace")
                if dropped:
                    text += f"\n[... {dropped} more bytes of {name} cut (sandbox.maxOutputBytes)]"
                parts.append(f"--- {name} ---\n{text}")
        return "\n".join(parts)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"


def bwrap_arguments(config: SandboxConfig, workspace_fd: int, env: Mapping[str, str], *,
                    uid: int | None) -> list[str]:
    """The bwrap command line up to the command (``uid``: switch to it inside; see above)."""
    args = ["bwrap", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if uid is None:
        args += ["--unshare-all", "--cap-drop", "ALL"]
        if config.network:
            args.append("--share-net")
    else:
        args += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
                 "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        if not config.network:
            args.append("--unshare-net")
    args += ["--ro-bind", "/usr", "/usr"]
    for name in USR_LINKS:
        top = Path("/") / name
        if top.is_symlink():
            args += ["--symlink", os.readlink(top), f"/{name}"]
        elif top.is_dir():
            args += ["--ro-bind", str(top), f"/{name}"]
    etc = ETC_FILES + (ETC_NETWORK_FILES if config.network else ())
    for name in etc:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp",
             "--bind-fd", str(workspace_fd), "/workspace", "--chdir", "/workspace",
             "--clearenv"]
    for key, value in sorted(env.items()):
        args += ["--setenv", key, value]
    args.append("--")
    if uid is not None:
        # from root to uid: the kernel clears every capability; no_new_privs (set by bwrap)
        # keeps setuid programs from regaining any
        args += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all", "--"]
    return args


def limit_arguments(config: SandboxConfig, *, nproc_base: int = 0) -> list[str]:
    """``prlimit`` with the configured limits (``nproc_base`` processes the user already has:
    the process limit counts every process of the user)."""
    return ["prlimit", f"--cpu={config.cpu_s}", f"--as={config.memory_mb * MIB}",
            f"--fsize={config.max_file_mb * MIB}",
            f"--nproc={nproc_base + config.max_processes}", "--core=0", "--nofile=1024", "--"]


def user_process_count(uid: int) -> int:
    """Processes (and threads) ``uid`` has now, as the kernel counts them for RLIMIT_NPROC."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{name}").st_uid == uid:
                count += len(os.listdir(f"/proc/{name}/task"))
    return count


async def run_isolated(command: str, workspace: Path, config: SandboxConfig,
                       host_env: Mapping[str, str], *, uid: int | None,
                       isolate: bool = True) -> CommandResult:
    """Run ``command`` with bash in ``workspace``.

    ``uid`` is the user to switch to first (the worker runs as root), else ``None``. With
    ``isolate`` false (``TOREN_SANDBOX_UNSAFE=1`` without bubblewrap) only the limits, the
    cleared environment and the timeout apply.
    """
    env = config.command_env(host_env)
    if not isolate:
        env["HOME"] = str(workspace)
        limits = limit_arguments(config, nproc_base=await asyncio.to_thread(
            user_process_count, os.getuid()))
        return await _run([*limits, "bash", "-c", command], config, env=env, cwd=workspace)
    fd = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        nproc_base = await asyncio.to_thread(user_process_count,
                                             os.getuid() if uid is None else uid)
        argv = [*limit_arguments(config, nproc_base=nproc_base),
                *bwrap_arguments(config, fd, env, uid=uid), "/bin/bash", "-c", command]
        return await _run(argv, config, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                          cwd=Path("/"), pass_fds=(fd,))
    finally:
        os.close(fd)


async def _run(argv: list[str], config: SandboxConfig, *, env: Mapping[str, str], cwd: Path,
               pass_fds: tuple[int, ...] = ()) -> CommandResult:
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=dict(env), cwd=cwd, pass_fds=pass_fds,
        start_new_session=True)
    assert process.stdout is not None and process.stderr is not None
    readers = [asyncio.create_task(_read_capped(stream, config.max_output_bytes))
               for stream in (process.stdout, process.stderr)]
    timed_out = False
    try:
        async with asyncio.timeout(config.timeout_s):
            await process.wait()
    except TimeoutError:
        timed_out = True
    finally:
        if process.returncode is None:  # timed out, or the tool call was cancelled
            _kill_group(process.pid)
            await process.wait()
    # whatever still holds the pipes lived in the sandbox's PID namespace, gone with bwrap
    try:
        async with asyncio.timeout(5):
            (out, out_dropped), (err, err_dropped) = await asyncio.gather(*readers)
    except TimeoutError:  # unsafe mode: a background process kept a pipe open
        for reader in readers:
            reader.cancel()
        out, out_dropped, err, err_dropped = b"", 0, b"(output not read: a process left "\
            b"running kept it open)", 0
    return CommandResult(process.returncode, out, err, out_dropped, err_dropped, timed_out)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, int]:
    """Up to ``cap`` bytes of the stream and how many more it had (read to the end, so a
    chatty command never blocks on a full pipe)."""
    kept = bytearray()
    dropped = 0
    while chunk := await stream.read(65536):
        room = cap - len(kept)
        kept += chunk[:room]
        dropped += max(0, len(chunk) - room)
    return bytes(kept), dropped
