"""The sandbox's settings: the agent's ``sandbox:`` section and the worker's environment."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toren.plugin import PluginUnavailable, ToolError

#: ``1`` runs commands without isolation where bubblewrap is missing (loud warning).
UNSAFE_ENV = "TOREN_SANDBOX_UNSAFE"
#: Where workspaces live on this worker's disk (default ``$TOREN_HOME/sandbox``).
DIR_ENV = "TOREN_SANDBOX_DIR"
#: The unprivileged user id commands run as when the worker runs as root (default 65534).
UID_ENV = "TOREN_SANDBOX_UID"
MIB = 1024 * 1024
#: What the plugin registers: its tool group and its tools.
TOOL_NAMES = ("sandbox", "bash", "read_file", "write_file", "edit_file")


class SandboxUnavailable(PluginUnavailable):
    """The sandbox cannot isolate commands on this machine."""

    code = "sandbox_unavailable"


@dataclass(frozen=True)
class SandboxConfig:
    """What one agent's ``sandbox:`` section asks for, with its defaults.

    Read by each sandbox tool call from ``ToolCallContext.agent_config``; the schema
    (``agent.schema.json``) has validated the section when the agent was loaded.
    """

    network: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    pass_env: tuple[str, ...] = ()
    timeout_s: float = 60.0
    cpu_s: int = 30
    memory_mb: int = 1024
    max_processes: int = 128
    max_file_mb: int = 64
    max_output_bytes: int = 65536
    max_workspace_mb: int = 256
    snapshot_every: int = 20

    @classmethod
    def from_agent(cls, agent_config: Mapping[str, Any]) -> SandboxConfig:
        raw = agent_config.get("sandbox") or {}
        return cls(
            network=bool(raw.get("network", False)),
            env=dict(raw.get("env", {})),
            pass_env=tuple(raw.get("passEnv", ())),
            timeout_s=float(raw.get("timeoutSeconds", cls.timeout_s)),
            cpu_s=int(raw.get("cpuSeconds", cls.cpu_s)),
            memory_mb=int(raw.get("memoryMb", cls.memory_mb)),
            max_processes=int(raw.get("maxProcesses", cls.max_processes)),
            max_file_mb=int(raw.get("maxFileMb", cls.max_file_mb)),
            max_output_bytes=int(raw.get("maxOutputBytes", cls.max_output_bytes)),
            max_workspace_mb=int(raw.get("maxWorkspaceMb", cls.max_workspace_mb)),
            snapshot_every=int(raw.get("snapshotEvery", cls.snapshot_every)),
        )

    def command_env(self, host_env: Mapping[str, str]) -> dict[str, str]:
        """The whole environment of a command: a minimal base, ``passEnv`` and ``env``."""
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/workspace",
               "LANG": "C.UTF-8", "TERM": "dumb"}
        env |= {name: host_env[name] for name in self.pass_env if name in host_env}
        return env | dict(self.env)


def unsafe_mode(env: Mapping[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get(UNSAFE_ENV, "") == "1"


def workspaces_root(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    configured = env.get(DIR_ENV)
    if configured:
        return Path(configured).absolute()
    return Path(env.get("TOREN_HOME") or ".toren").absolute() / "sandbox"


def sandbox_uid(env: Mapping[str, str] | None = None) -> int:
    raw = (os.environ if env is None else env).get(UID_ENV) or "65534"
    try:
        uid = int(raw)
    except ValueError:
        raise ToolError(f"{UID_ENV}={raw!r} is not a user id") from None
    if uid <= 0:
        raise ToolError(f"{UID_ENV} must name an unprivileged user (not root), not {uid}")
    return uid


def missing_programs() -> list[str]:
    """The programs isolation needs that are not on PATH (bwrap; prlimit; setpriv as root)."""
    needed = ["bwrap", "prlimit"] + (["setpriv"] if os.geteuid() == 0 else [])
    return [name for name in needed if shutil.which(name) is None]


def check_available(env: Mapping[str, str] | None = None) -> bool:
    """``True`` when commands will be isolated, ``False`` in the explicit unsafe mode; raise
    ``SandboxUnavailable`` naming the package to install otherwise."""
    missing = missing_programs()
    if not missing:
        return True
    if unsafe_mode(env):
        return False
    packages = sorted({"bubblewrap" if name == "bwrap" else "util-linux" for name in missing})
    raise SandboxUnavailable(
        f"toren-sandbox isolates commands with bubblewrap, and {', '.join(missing)} is not "
        f"installed: apt-get install {' '.join(packages)} (Debian/Ubuntu; dnf install "
        f"{' '.join(packages)} on Fedora). To run commands without any isolation on this "
        f"machine instead (unsafe: they can read and change everything the worker can), set "
        f"{UNSAFE_ENV}=1; or leave the plugin out with TOREN_LOAD_PLUGINS.",
        names=TOOL_NAMES)
