"""An agent version as a value: a definition's files content-hashed (``AgentVersion``).

Reading a directory into one and writing one back out are ``toren.agents.versions``' (I/O); the
store interfaces and the fold only need the value, which is why it sits in the core.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class AgentVersion:
    """One version of an agent's definition: its files' bytes and the hash that names them.

    ``hash`` is the SHA-256 over the sorted manifest (relative path, SHA-256 of the bytes), so
    it changes when any definition file changes, is added or removed, and only then.
    ``human`` is agent.yaml's ``version:`` (part of agent.yaml, so it is in the hash too).
    """

    hash: str
    human: str | None
    files: Mapping[str, bytes] = field(repr=False)

    @property
    def short(self) -> str:
        """The first 12 hex digits, as the CLI shows a version."""
        return self.hash[:12]

    @property
    def manifest(self) -> dict[str, str]:
        """Relative path -> SHA-256 of the file's bytes."""
        return {path: sha256_hex(data) for path, data in sorted(self.files.items())}

    @classmethod
    def of(cls, files: Mapping[str, bytes], human: str | None) -> AgentVersion:
        """The version of these files (relative POSIX path -> bytes)."""
        return cls(hash=manifest_hash({path: sha256_hex(data) for path, data in files.items()}),
                   human=human, files=dict(files))

    def to_json(self) -> dict[str, object]:
        return {"hash": self.hash, "human_version": self.human, "files": self.manifest}


def manifest_hash(manifest: Mapping[str, str]) -> str:
    """The version hash of a manifest (relative path -> SHA-256 of the bytes)."""
    lines = "".join(f"{path}\0{digest}\n" for path, digest in sorted(manifest.items()))
    return sha256_hex(lines.encode())
