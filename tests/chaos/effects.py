"""Tools that record their effects outside the database: which process ran which call.

A chaos test compares this record with the event log: a tool call the log shows once may have
run twice only where a crash or a lost lease explains it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def recording_tools_source(names: Sequence[str], effects: Path) -> str:
    """``tools.py`` source of idempotent tools ``name(text) -> "result <i> for <text>"``, each
    appending ``<idempotency key> <pid>`` to ``effects`` (one line, an atomic ``O_APPEND``
    write) when it runs."""
    lines = ["import os", "from toren import current_tool_call, tool", ""]
    for i, name in enumerate(names):
        lines += [
            "@tool(idempotent=True)",
            f"def {name}(text: str) -> str:",
            f'    """Tool number {i}."""',
            f"    with open({str(effects)!r}, 'a') as f:",
            "        f.write(f'{current_tool_call().idempotency_key} {os.getpid()}\\n')",
            f"    return f'result {i} for ' + text",
            "",
        ]
    return "\n".join(lines) + "\n"


def executions(effects: Path) -> list[tuple[str, int]]:
    """``(idempotency key, pid)`` of every tool execution recorded in ``effects``, in order."""
    if not effects.exists():
        return []
    return [(key, int(pid)) for key, pid in
            (line.split() for line in effects.read_text().splitlines())]
