"""One task, several worker processes (``toren worker --processes N``): which process speaks
for the task, and what it knows of the others' work.

ECS task protection is one state per task; processes that each set it from their own work
would take it away from each other (an idle one giving it up while another works). So the
process in slot 1 of its supervisor alone asks the ECS agent, protecting the task while it or
any sibling is busy; the others mark their busy state in a file of a directory the siblings
share (under the temporary directory, a task's scratch volume), touched every tick while busy.
A mark not touched for ``FRESH_S`` (its process died) counts as idle.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import time
from pathlib import Path

#: Seconds a busy mark counts after its process last touched it.
FRESH_S = 5.0


class BusyMarks:
    """The busy marks of one supervisor's worker processes.

    Args:
        supervisor: the supervisor's id (``TOREN_SUPERVISOR``).
        slot: this process's slot (``TOREN_SUPERVISOR_SLOT``).
        directory: where the siblings' directories are (default: the temporary directory).
    """

    def __init__(self, supervisor: str, slot: int, directory: Path | None = None) -> None:
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", supervisor)[:100]
        self.directory = (directory or Path(tempfile.gettempdir())) / f"toren-busy-{name}"
        self.slot = slot
        self._mine = self.directory / f"slot-{slot}"

    @property
    def speaks_for_the_task(self) -> bool:
        """Whether this process sets the task's protection (slot 1)."""
        return self.slot == 1

    def mark(self, busy: bool) -> None:
        """Record this process's state: a fresh mark while busy, none when idle."""
        if busy:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._mine.touch()
        else:
            with contextlib.suppress(FileNotFoundError):
                self._mine.unlink()

    def others_busy(self, now: float | None = None) -> bool:
        """Whether a sibling process marked itself busy within ``FRESH_S``."""
        now = time.time() if now is None else now
        try:
            marks = [path for path in self.directory.iterdir() if path != self._mine]
        except FileNotFoundError:
            return False
        for path in marks:
            with contextlib.suppress(FileNotFoundError):
                if now - path.stat().st_mtime < FRESH_S:
                    return True
        return False
