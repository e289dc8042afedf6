"""Host-side file operations confined to a workspace: no traversal, no symbolic links, no
special files.

Every path is split into components and opened one directory at a time relative to the
workspace (``openat`` with ``O_NOFOLLOW``), so neither ``..``, an absolute path, nor a symbolic
link planted by a command (even one swapped in between a check and an open) can lead outside.
Only regular files are opened, and never in a way that can block: a FIFO, a socket or a device
node a command left in the workspace is refused by ``lstat`` before any open, and every open
adds ``O_NONBLOCK`` and checks ``fstat`` after it, so one swapped in between cannot hang the
caller either (opening a FIFO for reading otherwise waits for a writer). These functions block
on disk I/O: call them in a thread (``asyncio.to_thread``), never on the event loop.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from toren.plugin import NotARegularFile, ToolError, kind_of
from toren.plugin import open_regular as open_regular_file

#: Where commands see the workspace; file tools accept paths under it as well.
MOUNT = PurePosixPath("/workspace")
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Added to every open of a file: never follow a final link, never wait for a FIFO's peer.
FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

class WorkspacePathError(ToolError):
    """A path that would leave the workspace, or that the file tools refuse."""

    code = "workspace_path"


def relative_parts(path: str) -> tuple[str, ...]:
    """The components of ``path`` inside the workspace (relative, or under ``/workspace``)."""
    if not path or "\x00" in path:
        raise WorkspacePathError(f"invalid path {path!r}: give a file name inside the workspace")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        if pure != MOUNT and MOUNT not in pure.parents:
            raise WorkspacePathError(f"{path!r} is outside the workspace: use a relative path "
                                     "or one under /workspace")
        pure = pure.relative_to(MOUNT)
    parts = tuple(part for part in pure.parts if part != ".")
    if ".." in parts:
        raise WorkspacePathError(f"{path!r} contains '..': paths must stay inside the workspace")
    if not parts:
        raise WorkspacePathError(f"{path!r} is the workspace itself, not a file")
    return parts


@contextmanager
def parent_fd(root: Path, parts: tuple[str, ...], *, create: bool) -> Iterator[int]:
    """A descriptor of the directory holding ``parts[-1]``, walked without following links."""
    fd = os.open(root, DIR_FLAGS)
    try:
        for index, part in enumerate(parts[:-1]):
            try:
                next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o777, dir_fd=fd)
                next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _refusal(exc, "/".join(parts[:index + 1])) from None
            os.close(fd)
            fd = next_fd
        yield fd
    finally:
        os.close(fd)


def _refusal(exc: OSError, shown: str) -> WorkspacePathError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return WorkspacePathError(f"{shown!r} is a symbolic link or not a directory; the file "
                                  "tools do not follow links (they could lead out of the "
                                  "workspace): use bash for it")
    if exc.errno == errno.ENXIO:  # opening a socket, or a FIFO for writing with no reader
        return WorkspacePathError(f"{shown!r} is a socket or a FIFO, not a regular file; the "
                                  "file tools read and write regular files only (use bash for "
                                  "others)")
    return WorkspacePathError(f"{shown!r}: {exc.strerror}")


def not_regular(shown: str, mode: int) -> WorkspacePathError:
    """The refusal of a path that is there but is not a regular file."""
    if stat.S_ISLNK(mode):
        return WorkspacePathError(f"{shown!r} is a symbolic link; the file tools do not follow "
                                  "links (they could lead out of the workspace): use bash for it")
    return WorkspacePathError(f"{shown!r} is {kind_of(mode)}, not a regular file; the file "
                              "tools read and write regular files only (use bash for others)")


def open_regular(parent: int, name: str, flags: int, shown: str) -> int:
    """A descriptor of the regular file ``name`` in the directory ``parent``, opened with
    ``flags`` (never following a final link, never waiting for a FIFO's peer); anything
    else there is refused without blocking (``toren.plugin.open_regular``)."""
    try:
        fd, _ = open_regular_file(name, flags, dir_fd=parent, follow_symlinks=False)
    except NotARegularFile as exc:
        raise not_regular(shown, exc.mode) from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO opened for writing with no reader
            raise _refusal(exc, shown) from None
        raise
    return fd


def read_bytes(root: Path, path: str) -> bytes:
    """The content of a regular file in the workspace."""
    parts = relative_parts(path)
    try:
        with parent_fd(root, parts, create=False) as parent:
            mode = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode
            if not stat.S_ISREG(mode):  # checked before opening: a device is never opened
                raise not_regular(path, mode)
            fd = open_regular(parent, parts[-1], os.O_RDONLY, path)
    except FileNotFoundError:
        raise WorkspacePathError(f"{path!r} does not exist in the workspace") from None
    except WorkspacePathError:
        raise
    except OSError as exc:
        raise _refusal(exc, path) from None
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def write_bytes(root: Path, path: str, content: bytes, *, owner: int | None = None) -> bool:
    """Write (or replace) a regular file, making its directories; ``True`` if it is new.

    ``owner`` is the uid commands run as (when the worker is root), so they can change it.
    """
    parts = relative_parts(path)
    try:
        with parent_fd(root, parts, create=True) as parent:
            try:
                existing = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                existing = None
            if existing is not None and not stat.S_ISREG(existing.st_mode):
                raise WorkspacePathError(
                    f"{path!r} exists and is {kind_of(existing.st_mode)}, not a regular file; "
                    "not replaced (remove it with bash first if it should go)")
            # no O_TRUNC: the file is truncated only once fstat showed it is a regular file
            fd = open_regular(parent, parts[-1], os.O_WRONLY | os.O_CREAT, path)
            with os.fdopen(fd, "wb") as handle:
                os.ftruncate(handle.fileno(), 0)
                handle.write(content)
                if owner is not None:
                    os.fchown(handle.fileno(), owner, owner)
    except WorkspacePathError:
        raise
    except OSError as exc:
        raise _refusal(exc, path) from None
    if owner is not None:
        _chown_dirs(root, parts[:-1], owner)
    return existing is None


def _chown_dirs(root: Path, parts: tuple[str, ...], owner: int) -> None:
    """Give the directories ``write_bytes`` may have made to the command user."""
    for end in range(1, len(parts) + 1):
        with parent_fd(root, (*parts[:end], "-"), create=False) as fd:
            os.fchown(fd, owner, owner)
