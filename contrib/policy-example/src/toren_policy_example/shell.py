"""A deny-list of shell commands: patterns that a command for the sandbox's ``bash`` tool may
not match. A deny-list is a seatbelt against a model's mistakes, not isolation: the sandbox
(bubblewrap, no network by default) is what contains a command that gets through."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

#: What is denied unless the agent's settings give ``denyCommands`` (regular expressions,
#: searched anywhere in the command, case-sensitive), with what the model is told.
DEFAULT_DENY: dict[str, str] = {
    r"\brm\s+(-[A-Za-z]*\s+)*-[A-Za-z]*([rR][A-Za-z]*f|f[A-Za-z]*[rR])":
        "recursive forced deletion (rm -rf)",
    r"\bsudo\b": "sudo",
    r"\b(curl|wget)\b[^|;&]*\|\s*(ba|z|da)?sh\b": "piping a download into a shell",
    r"\bmkfs(\.\w+)?\b": "formatting a file system",
    r"\bdd\s+[^;|&]*\bof=/dev/": "writing to a device with dd",
    r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:": "a fork bomb",
    r"\bchmod\s+(-[A-Za-z]+\s+)*0?777\s+/": "making / world-writable",
    r"\b(shutdown|reboot|halt|poweroff)\b": "shutting the machine down",
}


def denied(command: str, patterns: Sequence[str] | None = None) -> str | None:
    """Why ``command`` is denied (the first pattern it matches), or ``None``. ``patterns``
    replace the defaults when given."""
    rules: Iterable[tuple[str, str]] = (DEFAULT_DENY.items() if patterns is None
                                        else ((pattern, pattern) for pattern in patterns))
    for pattern, what in rules:
        if re.search(pattern, command):
            return what
    return None
