"""Reading an agent directory's files without ever blocking: regular files only.

Opening a FIFO for reading waits until something opens it for writing, and a device can
answer forever (``/dev/zero``) or act on being opened; a prompt.md, agent.yaml or tools.py that
is one (or a link to one) would hang or exhaust the loader. So a file is ``stat``-ed first, and
opened only if it is a regular file, with ``O_NONBLOCK`` and checked with ``fstat`` again (it
may have been swapped in between).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


class NotARegularFile(OSError):
    """The path is there, but is not a regular file (``kind`` says what it is)."""

    def __init__(self, kind: str) -> None:
        super().__init__(errno.EINVAL, f"it is {kind}, not a regular file")
        self.kind = kind


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words ("a FIFO (named pipe)")."""
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def open_regular(path: Path) -> tuple[int, os.stat_result]:
    """A blocking descriptor of the regular file ``path`` (links followed) and its ``fstat``.

    Raises ``NotARegularFile`` for anything else, without having opened it unless it was
    swapped in after the ``stat``; other ``OSError`` as ``os.open`` does.
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotARegularFile(kind_of(mode))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile(kind_of(info.st_mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def read_regular(path: Path, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file ``path``; with ``max_bytes``, at most one more than that
    (so a caller can tell a file over the limit without reading all of it)."""
    fd, _ = open_regular(path)
    with os.fdopen(fd, "rb") as file:
        return file.read() if max_bytes is None else file.read(max_bytes + 1)
