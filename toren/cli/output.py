"""Terminal output shared by the commands: rich for people, one JSON document for machines.

Everything a user, a model or a tool wrote (key names, agent output, run inputs, tool names,
error messages) goes through ``safe`` (text inside rich markup) or ``plain`` (text printed with
``markup=False``): rich would read ``[/]`` as markup (and crash) or ``[link=...]`` as a link,
and a terminal would act on ANSI escape sequences and carriage returns.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.tree import Tree

console = Console(highlight=False, soft_wrap=True, emoji=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)

JSON_OPTION_HELP = "Print machine-readable JSON instead of text."

#: ANSI/VT escape sequences: CSI (colours, cursor moves), OSC (titles, hyperlinks), and the
#: two-character ones. Removed whole, so no stray ``[31m`` is left behind.
_ESCAPE_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"           # CSI ... final byte
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC ... BEL or ST
    r"|\x1b[@-Z\\-_]"                   # other two-character sequences
    r"|\x9b[0-?]*[ -/]*[@-~]")          # 8-bit CSI
#: C0 and C1 control characters except tab and newline, DEL, and the Unicode bidirectional
#: overrides and isolates, which can make printed text read differently from what it is.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def plain(text: object) -> str:
    """``text`` as a string without escape sequences or control characters (tab and newline
    stay): safe to print with ``markup=False``."""
    return _CONTROL.sub("", _ESCAPE_SEQUENCE.sub("", str(text)))


def safe(text: object) -> str:
    """``text`` made safe to put inside rich markup: ``plain`` plus escaped ``[``."""
    return escape(plain(text))


def print_json(data: Any) -> None:
    """One JSON document on stdout (no colour, no wrapping)."""
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def print_error(code: str, message: str, *, as_json: bool = False) -> None:
    """One line on stderr; with ``as_json`` also the error body on stdout."""
    if as_json:
        print_json({"error": {"code": code, "message": message}})
    err_console.print(f"[bold red]Error:[/] {safe(message)}", soft_wrap=True, markup=True,
                      emoji=False)


def print_table(table: Table | Tree) -> None:
    """Print a table (or a tree) on stdout: fitted to the terminal, or at its natural width
    when stdout is not a terminal (piped into a file, ``grep`` or ``less``), so no cell is cut
    to ``…`` and no tree line is cut short (rich cuts a tree's lines without an ellipsis:
    ``$0.0041`` read ``$0.00`` at 80 columns)."""
    if console.is_terminal:
        console.print(table)
        return
    natural = Measurement.get(console, console.options.update_width(1_000_000), table).maximum
    width = console.width
    console.width = max(width, natural)  # print() caps its width at the console's
    try:
        console.print(table)
    finally:
        console.width = width


def toren_command() -> str:
    """How to run this ``toren`` in a command line printed for the user: ``toren`` when that
    name on ``PATH`` is this executable, else this executable's absolute path (e.g. a venv's
    ``bin/toren`` that is not on ``PATH``)."""
    running = Path(sys.argv[0])
    if running.name != "toren":  # not the console script (embedded, or under a test runner)
        return "toren"
    on_path = shutil.which("toren")
    if on_path is not None and Path(on_path).resolve() == running.resolve():
        return "toren"
    return shlex.quote(str(running.absolute()))
