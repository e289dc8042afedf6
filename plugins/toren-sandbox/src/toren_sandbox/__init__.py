"""toren-sandbox: bash and file tools on a durable, isolated per-task workspace."""

from __future__ import annotations

from toren_sandbox.config import SandboxConfig, SandboxUnavailable
from toren_sandbox.files import WorkspacePathError

__all__ = ["SandboxConfig", "SandboxUnavailable", "WorkspacePathError"]
