"""Options and helpers shared by commands that load agents."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toren.runtime import Runtime

DirsOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--dir", "-d",
        help="An agent directory, or a directory of agent directories (repeatable). "
             "Default: the current directory.",
        envvar="TOREN_DIRS",
    ),
]


def load_runtime(dirs: list[Path] | None) -> Runtime:
    """Load plugins, agents and drivers, validating everything before touching the database."""
    return Runtime(dirs or None)
