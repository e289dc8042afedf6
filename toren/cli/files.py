"""``toren files``: upload, list, show and delete the files agents read (``read_document``)."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from toren.cli.common import with_database
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe
from toren.files import (
    BadFile,
    FileNotFound,
    FileTooLarge,
    StoredFile,
    check_upload,
    max_file_bytes,
)

app = typer.Typer(help="Files for agents to read: add, list, show, rm.", no_args_is_help=True)
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
FileId = Annotated[str, typer.Argument(metavar="FILE_ID", help="The file's id.")]


def read_upload(path: Path, limit: int) -> bytes:
    """The file's bytes, reading at most ``limit`` + 1 of them (a device or a growing file
    cannot exhaust memory); ``BadFile`` or ``FileTooLarge`` saying what is wrong."""
    try:
        if not path.is_file():
            raise BadFile(f"{path}: not a file")
        size = path.stat().st_size
        if size > limit:
            raise FileTooLarge(f"{path} is {size:,} bytes; uploads may be at most {limit:,} "
                               "bytes (TOREN_MAX_FILE_BYTES)")
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise BadFile(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise FileTooLarge(f"{path} holds more than {limit:,} bytes, the most an upload may be "
                           "(TOREN_MAX_FILE_BYTES)")
    return data


def _found(stored: StoredFile | None, file_id: str) -> StoredFile:
    if stored is None:
        raise FileNotFound(f"no file has the id {file_id!r}; see `toren files list`")
    return stored


def _row(stored: StoredFile) -> list[str]:
    return [stored.id, safe(stored.name), stored.content_type, f"{stored.size_bytes:,}",
            stored.created_at.strftime("%Y-%m-%d %H:%M"), safe(stored.uploaded_by or "")]


def _table(files: list[StoredFile]) -> Table:
    table = Table()
    for column in ("id", "name", "type", "bytes", "uploaded", "by"):
        table.add_column(column, no_wrap=column in ("id", "bytes"))
    for stored in files:
        table.add_row(*_row(stored))
    return table


@app.command("add")
def add(
    path: Annotated[Path, typer.Argument(help="The file to upload (PDF, docx, xlsx, text...).")],
    as_json: JsonOption = False,
) -> None:
    """Upload a file; prints its id, which agents pass to read_document."""
    limit = max_file_bytes()
    upload = check_upload(path.name, read_upload(path, limit), max_bytes=limit)
    try:
        who = f"cli {getpass.getuser()}"
    except (KeyError, OSError):  # no name for this uid (a container)
        who = "cli"
    stored = with_database(lambda rt: rt.store.add_file(
        name=upload.name, content_type=upload.content_type, data=upload.data,
        sha256=upload.sha256, uploaded_by=who))
    if as_json:
        print_json(stored.to_json())
        return
    console.print(f"Added {safe(stored.name)} ({stored.content_type}, {stored.size_bytes:,} "
                  f"bytes) as [bold]{stored.id}[/]")


@app.command("list")
def list_files(as_json: JsonOption = False) -> None:
    """List files, newest first."""
    files = with_database(lambda rt: rt.store.list_files())
    if as_json:
        print_json({"files": [stored.to_json() for stored in files]})
        return
    if not files:
        console.print("No files yet: upload one with `toren files add PATH`.")
        return
    print_table(_table(files))


@app.command("show")
def show(file_id: FileId, as_json: JsonOption = False) -> None:
    """Show one file's record (name, type, size, SHA-256, who uploaded it)."""
    stored = _found(with_database(lambda rt: rt.store.get_file(file_id)), file_id)
    if as_json:
        print_json(stored.to_json())
        return
    for key, value in stored.to_json().items():
        console.print(f"{key}: {safe(str(value) if value is not None else '')}")


@app.command("rm")
def remove(file_id: FileId, as_json: JsonOption = False) -> None:
    """Delete a file (its content goes once no other file shares it)."""
    stored = _found(with_database(lambda rt: rt.store.delete_file(file_id)), file_id)
    if as_json:
        print_json({"id": stored.id, "deleted": True})
        return
    console.print(f"Deleted {safe(stored.name)} ({stored.id}).")
