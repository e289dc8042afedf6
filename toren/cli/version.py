"""``toren version``."""

from __future__ import annotations

import platform
from typing import Annotated

import typer

import toren
from toren.cli.output import JSON_OPTION_HELP, console, print_json


def version(as_json: Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)] = False
            ) -> None:
    """Print Toren's version."""
    info = {"version": toren.__version__, "python": platform.python_version()}
    if as_json:
        print_json(info)
    else:
        console.print(f"toren {info['version']} (Python {info['python']})")
