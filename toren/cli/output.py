"""Terminal output shared by the commands: rich for people, one JSON document for machines."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

JSON_OPTION_HELP = "Print machine-readable JSON instead of text."


def print_json(data: Any) -> None:
    """One JSON document on stdout (no colour, no wrapping)."""
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def print_error(code: str, message: str, *, as_json: bool = False) -> None:
    """One line on stderr; with ``as_json`` also the error body on stdout."""
    if as_json:
        print_json({"error": {"code": code, "message": message}})
    err_console.print(f"[bold red]Error:[/] {message}", soft_wrap=True, markup=True,
                      emoji=False)
