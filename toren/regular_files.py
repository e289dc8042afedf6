"""Opening a file that someone else chose without ever blocking: regular files only.

Opening a FIFO for reading waits until something opens it for writing, and a device can answer
forever (``/dev/zero``) or act on being opened; a path a user, a model or an edited archive
names may be either (or a link to one). So a file is opened with ``O_NONBLOCK`` and checked with
``fstat`` before anything is read, optionally ``stat``-ed first so that a device is never opened
at all. Used by agent loading, the ``file`` archive backend and the sandbox's file tools. These
functions block on disk I/O: call them in a thread, never on the event loop.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISREG, "a regular file"))


class NotARegularFile(OSError):
    """The path is there, but is not a regular file (``kind`` says what it is, ``mode`` is its
    ``st_mode``)."""

    def __init__(self, mode: int) -> None:
        self.kind = kind_of(mode)
        self.mode = mode
        super().__init__(errno.EINVAL, f"it is {self.kind}, not a regular file")


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words ("a FIFO (named pipe)")."""
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def open_regular(path: str | Path, flags: int = os.O_RDONLY, *, dir_fd: int | None = None,
                 follow_symlinks: bool = True, stat_first: bool = False
                 ) -> tuple[int, os.stat_result]:
    """A blocking descriptor of the regular file ``path`` and its ``fstat``.

    Opened with ``flags`` plus ``O_NONBLOCK`` and ``O_CLOEXEC`` (and ``O_NOFOLLOW`` unless
    ``follow_symlinks``), relative to ``dir_fd`` if given; ``stat_first`` checks the path
    before opening it, so a device is never opened. Raises ``NotARegularFile`` (the descriptor
    closed) for anything else; other ``OSError`` as ``os.open`` does (``ELOOP`` for a link not
    followed, ``ENXIO`` for a socket).
    """
    if stat_first:
        mode = os.stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(mode)
    flags |= os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags, 0o666, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile(info.st_mode)
        # reads and writes of a regular file never block: O_NONBLOCK only mattered for the
        # open, and a clean descriptor is easier to hand on
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def read_regular(path: Path, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (links followed, checked before opening); with
    ``max_bytes``, at most one more than that (so a caller can tell a file over the limit
    without reading all of it)."""
    fd, _ = open_regular(path, stat_first=True)
    with os.fdopen(fd, "rb") as file:
        return file.read() if max_bytes is None else file.read(max_bytes + 1)
