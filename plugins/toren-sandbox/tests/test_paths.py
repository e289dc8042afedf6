"""The file tools work host-side on the workspace: traversal and symbolic links never lead out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from toren_sandbox.files import WorkspacePathError, read_bytes, relative_parts, write_bytes


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace, and a secret file beside it."""
    root = tmp_path / "ws"
    root.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    return root, secret


@pytest.mark.parametrize("path", [
    "../secret.txt", "a/../../secret.txt", "/etc/passwd", "/workspace/../etc/passwd",
    "/workspacex/a", "", ".", "/workspace", "a\x00b"])
def test_paths_that_leave_the_workspace_are_refused(path: str) -> None:
    with pytest.raises(WorkspacePathError):
        relative_parts(path)


def test_paths_inside_are_relative_or_under_the_mount() -> None:
    assert relative_parts("a/./b.txt") == ("a", "b.txt")
    assert relative_parts("/workspace/a/b.txt") == ("a", "b.txt")


def test_symbolic_links_are_not_followed_out(layout: tuple[Path, Path]) -> None:
    root, secret = layout
    os.symlink(secret, root / "link.txt")
    os.symlink(secret.parent, root / "dir")
    for path in ("link.txt", "dir/secret.txt"):
        with pytest.raises(WorkspacePathError, match="symbolic link"):
            read_bytes(root, path)
    with pytest.raises(WorkspacePathError):
        write_bytes(root, "link.txt", b"overwritten")
    with pytest.raises(WorkspacePathError):
        write_bytes(root, "dir/new.txt", b"planted")
    assert secret.read_text() == "host secret"
    assert not (secret.parent / "new.txt").exists()


def test_writes_make_directories_and_reads_give_them_back(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    assert write_bytes(root, "/workspace/deep/er/f.txt", b"data") is True
    assert write_bytes(root, "deep/er/f.txt", b"data2") is False
    assert read_bytes(root, "deep/er/f.txt") == b"data2"
    with pytest.raises(WorkspacePathError, match="does not exist"):
        read_bytes(root, "nope.txt")
    with pytest.raises(WorkspacePathError, match="not a regular file"):
        write_bytes(root, "deep", b"x")
