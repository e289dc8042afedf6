"""The ``toren`` command line: one typer sub-app or command module per noun."""

from __future__ import annotations

import inspect
import logging
import os
import sys
from typing import Annotated, Any

import typer

from toren.cli.group import TorenGroup
from toren.cli.output import err_console, print_error
from toren.errors import TorenError

#: The kernel's commands are listed in toren.cli.command_table and imported at their first
#: use (toren.cli.group); the plugins' come from their toren.commands entry points.
app = typer.Typer(
    name="toren",
    cls=TorenGroup,
    help="Toren: a self-hosted durable agent runtime on a Postgres event log.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        from toren.cli.version import version

        version(as_json=False)
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version,
        help="Print Toren's version and exit (as `toren version`).")] = False,
) -> None:
    """Toren: a self-hosted durable agent runtime on a Postgres event log."""


def _tidy_help(command: Any) -> None:
    """One placeholder style in every command's help, plugin commands included: arguments and
    valued options show an upper-case name (``RUN_ID``, ``--port PORT``) instead of a Python
    type (``<int>``, ``<list[Path]>``), and flags show none instead of ``<bool>``.

    ``command`` is the click command typer builds (typer vendors its own click, so this goes
    by attributes, not classes).
    """
    for param in command.params:
        if param.param_type_name == "argument":
            param.display_type_rich = _no_type  # the name column shows RUN_ID already
        if param.metavar is not None:
            continue
        if param.param_type_name == "option" and (param.is_flag or param.count):
            param.metavar = ""
        elif param.name:
            param.metavar = param.name.upper()
    make_help_option = command.get_help_option

    def help_option(ctx: Any) -> Any:
        option = make_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = help_option
    command.help = reflow(command.help)
    if isinstance(command, TorenGroup):
        return  # its commands are tidied as they are built (toren.cli.group)
    for sub in getattr(command, "commands", {}).values():
        _tidy_help(sub)


def reflow(text: str | None) -> str | None:
    """A help text whose paragraphs are one line each, so rich wraps them at the terminal's
    width: a docstring hard-wrapped at 96 columns otherwise keeps its line breaks in the
    command lists (``toren --help``) and in later paragraphs, and reads ragged. Paragraphs
    that start with click's ``\b`` marker, and list items (``- ...``), keep their lines."""
    if not text:
        return text
    paragraphs = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        if paragraph.startswith("\b"):
            paragraphs.append(paragraph)
            continue
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not line.lstrip().startswith(("- ", "* ")):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line.rstrip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def _no_type(ctx: Any) -> None:
    return None


def _configure_logging() -> None:
    """Log to stderr: through rich, or as ``TOREN_LOG_FORMAT`` says (``plain``, ``json``);
    ``TOREN_LOG_LEVEL`` (default WARNING) sets the level (``toren.logs``)."""
    from toren.logs import log_format, make_handler

    level = os.environ.get("TOREN_LOG_LEVEL", "WARNING").upper()
    try:
        chosen = log_format(os.environ)
    except TorenError as exc:
        print_error(exc.code, exc.message, as_json=False)
        sys.exit(1)
    handler = make_handler(chosen, stream=sys.stderr, rich_console=err_console)
    logging.basicConfig(level=level if level in logging.getLevelNamesMapping() else "WARNING",
                        format="%(message)s", handlers=[handler])
    logging.getLogger("pgserver").setLevel(max(logging.WARNING, logging.root.level))
    # stevedore logs a warning for a driver it cannot find; DriverNotFound says it better
    logging.getLogger("stevedore").setLevel(logging.ERROR)


def build_command() -> Any:
    """The ``toren`` click group (``toren.cli.group.TorenGroup``): the kernel's commands, the
    installed plugins' commands and the absent ones' hints, each built with tidy help at its
    first use."""
    TorenGroup.tidy = staticmethod(_tidy_help)
    command = typer.main.get_command(app)
    _tidy_help(command)
    return command


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``toren`` console script.

    User errors print one line (``--debug`` or ``TOREN_DEBUG=1`` adds the traceback) and exit 1;
    with ``--json`` the error is also printed to stdout as ``{"error": {"code", "message"}}``.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["version"], ["--version"], ["version", "--json"]):
        # nothing to load: no plugin, no secret, no command tree (bench/cli_start.py)
        from toren.cli.version import version

        version(as_json="--json" in args)
        return
    debug = "--debug" in args or os.environ.get("TOREN_DEBUG") == "1"
    args = [arg for arg in args if arg != "--debug"]
    as_json = "--json" in args
    _configure_logging()
    try:
        command = build_command()
        command(args=args, prog_name="toren")  # standalone: handles usage errors, then exits
    except TorenError as exc:
        if debug:
            raise
        print_error(exc.code, exc.message, as_json=as_json)
        sys.exit(1)
