"""Agent versions: the definition files of an agent directory, content-hashed and restorable."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

# the value and its hashing are the core's; re-exported for the loader and the host
from toren.core.versions import AgentVersion as AgentVersion
from toren.core.versions import manifest_hash as manifest_hash
from toren.core.versions import sha256_hex as sha256_hex
from toren.errors import AgentDefinitionError
from toren.regular_files import read_regular

#: What ``onChange:`` in agent.yaml may say about runs pinned to an older version.
ON_CHANGE_POLICIES = ("continue", "upgrade")
#: The files of a directory that make up its definition besides the prompt and subagents.
CODE_FILES = ("tools.py", "workflow.py")


def definition_paths(directory: Path, prompt_file: str,
                     extra: Sequence[str] = ()) -> list[str]:
    """The definition files of ``directory`` that exist, as relative POSIX paths: agent.yaml,
    the prompt file, tools.py, workflow.py, subagents/*.md and ``extra`` (the schema files
    that ``output:`` names)."""
    paths = ["agent.yaml", PurePosixPath(Path(prompt_file).as_posix()).as_posix()]
    paths += [name for name in CODE_FILES if (directory / name).is_file()]
    folder = directory / "subagents"
    if folder.is_dir():
        paths += [f"subagents/{path.name}" for path in sorted(folder.glob("*.md"))
                  if path.is_file()]
    paths += [PurePosixPath(Path(file).as_posix()).as_posix() for file in extra]
    return list(dict.fromkeys(paths))


def snapshot(directory: Path, prompt_file: str, human: str | None,
             extra: Sequence[str] = ()) -> AgentVersion:
    """The version ``directory`` holds now (its files were validated by the loader);
    ``extra``: more files of it that the definition names (``output:`` schema files)."""
    files: dict[str, bytes] = {}
    for relative in definition_paths(directory, prompt_file, extra):
        try:
            files[relative] = read_regular(directory / relative)  # a FIFO would block
        except OSError as exc:
            raise AgentDefinitionError(f"cannot be read: {exc.strerror or exc}",
                                       path=str(directory / relative)) from None
    return AgentVersion.of(files, human)


def materialize(version: AgentVersion, root: Path, name: str) -> Path:
    """Write the version's files under ``root/<hash>/<name>/`` (once) and return that
    directory, which ``load_agent`` then loads like any agent directory.

    The directory is named after the agent so that an agent.yaml without ``name:`` loads
    under the same name. It is written beside and renamed into place, so a concurrent reader
    never sees half of it.
    """
    target = root / version.hash / name
    if target.is_dir():
        return target
    for relative in version.files:
        parts = PurePosixPath(relative).parts
        if PurePosixPath(relative).is_absolute() or ".." in parts or not parts:
            raise AgentDefinitionError(f"the stored version {version.short} names the file "
                                       f"{relative!r}, which is not inside an agent directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        for relative, data in version.files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        try:
            os.rename(staging, target)
        except OSError:
            if not target.is_dir():  # another loader won the rename: theirs is the same
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
