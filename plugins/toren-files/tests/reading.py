"""Helpers of the read_document tests: uploaded files in memory, the call, and what a call
leaves behind in this process (its peak memory, reader processes)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from toren_files.plugin import read_document

from toren.files import StoredFile, sniff_bytes
from toren.testing import tool_call

MIB = 1024 * 1024


class Files:
    """Uploaded files by id, as the store's ``read_file`` returns them."""

    def __init__(self) -> None:
        self.by_id: dict[str, tuple[StoredFile, bytes]] = {}

    def add(self, name: str, data: bytes) -> str:
        file_id = f"file-{len(self.by_id)}"
        self.by_id[file_id] = (StoredFile(
            id=file_id, name=name, content_type=sniff_bytes(data, name), size_bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(), created_at=datetime.now(UTC)), data)
        return file_id

    async def read_file(self, file_id: str) -> tuple[StoredFile, bytes] | None:
        return self.by_id.get(file_id)


async def read(files: Files, file_id: str, max_output_bytes: int = 65536,
               **arguments: object) -> tuple[dict[str, object], str]:
    """Call read_document as Toren would: its header and its text."""
    with tool_call(read_file=files.read_file, max_output_bytes=max_output_bytes):
        output = await read_document(file_id, **arguments)  # type: ignore[arg-type]
    assert len(output.encode()) <= max_output_bytes
    header, _, text = output.partition("\n")
    return json.loads(header.split(" (more follows")[0]), text


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


@contextmanager
def peak_memory_growth() -> Iterator[list[int]]:
    """Bytes this process's peak resident memory grew by inside the block (appended to the
    list it yields when the block ends). The peak (VmHWM) is reset first where the kernel
    allows it, so it is this block's own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current VmRSS
        before = _status_kib("VmRSS")
    except OSError:  # a kernel without it: growth past the earlier peak only
        before = _status_kib("VmHWM")
    growth: list[int] = []
    yield growth
    growth.append((_status_kib("VmHWM") - before) * 1024)


def reader_processes() -> list[int]:
    """Pids of this process's children that are document readers (running or unreaped)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:  # it ended meanwhile
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"toren_files.worker" in command:
            found.append(int(entry.name))
    return found


def still_present(pids: list[int]) -> list[int]:
    """Those of ``pids`` the system still has a process for (a zombie counts)."""
    return [pid for pid in pids if Path(f"/proc/{pid}").exists()]
