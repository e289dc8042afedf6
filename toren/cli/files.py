"""``toren files``: upload, list, show and delete the files agents read (``read_document``)."""

from __future__ import annotations

import asyncio
import getpass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from toren.cli.common import run_async, with_database
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe
from toren.core.actors import cli_actor
from toren.core.attachments import SHOWABLE_TYPES
from toren.files import (
    CHUNK_BYTES,
    BadFile,
    FileNotFound,
    FileTooLarge,
    StoredFile,
    UploadSpool,
    max_file_bytes,
    parse_file_id,
)
from toren.server.cursors import InvalidCursor, decode_page_cursor, encode_page_cursor

if TYPE_CHECKING:
    from toren.host.runtime import Runtime

app = typer.Typer(help="Files for agents to read: add, list, show, rm.", no_args_is_help=True)
JsonOption = Annotated[bool, typer.Option("--json", help=JSON_OPTION_HELP)]
FileId = Annotated[str, typer.Argument(metavar="FILE_ID", help="The file's id.")]
#: Files per page of ``toren files list`` at most (as ``GET /files``).
MAX_PAGE = 1000


def check_path(path: Path) -> int:
    """The size of the regular file at ``path``; ``BadFile`` saying what ``path`` is instead
    (missing, a directory, a device) and what to give."""
    try:
        if not path.exists():
            raise BadFile(f"{path}: not a file: nothing is there (check the path)")
        if path.is_dir():
            raise BadFile(f"{path}: not a file but a directory; give the files in it one "
                          "by one")
        if not path.is_file():
            raise BadFile(f"{path}: not a file (a device, a pipe or a socket); give a regular "
                          "file")
        return path.stat().st_size
    except OSError as exc:
        raise BadFile(f"{path}: cannot be read: {exc.strerror or exc}") from None


def open_upload(path: Path, limit: int) -> IO[bytes]:
    """``path`` opened for reading, after the checks that need no reading; ``BadFile`` or
    ``FileTooLarge`` saying what is wrong."""
    size = check_path(path)
    if size > limit:
        raise FileTooLarge(f"{path} is {size:,} bytes; uploads may be at most {limit:,} "
                           "bytes (TOREN_MAX_FILE_BYTES)")
    try:
        return path.open("rb")
    except OSError as exc:
        raise BadFile(f"{path}: cannot be read: {exc.strerror or exc}") from None


def cli_uploader() -> str:
    """``uploaded_by`` of a file the CLI stores: ``cli <user name>``."""
    try:
        return f"cli {getpass.getuser()}"
    except (KeyError, OSError):  # no name for this uid (a container)
        return "cli"


async def add_path(path: Path, limit: int, uploaded_by: str, *,
                   runtime: Runtime | None = None) -> StoredFile:
    """Spool ``path`` a piece at a time (at most ``limit`` + 1 bytes: a device or a growing
    file cannot exhaust memory), check it, and only then store it: with ``runtime`` (started)
    or, without one, a runtime started for it (the database is not touched for a bad file)."""
    async with UploadSpool(path.name, limit) as spool:
        handle = await asyncio.to_thread(open_upload, path, limit)
        try:
            while piece := await asyncio.to_thread(handle.read, CHUNK_BYTES):
                await spool.write(piece)
        except OSError as exc:
            raise BadFile(f"{path}: cannot be read: {exc.strerror or exc}") from None
        finally:
            await asyncio.to_thread(handle.close)
        upload = await spool.check()
        if runtime is not None:
            return await runtime.files.add(upload, uploaded_by=uploaded_by)
        from toren.host.runtime import Runtime

        runtime = Runtime(agents=[])
        await runtime.start(workers=False)
        try:  # `toren files add`: recorded here (an operator's runtime records it itself)
            async with runtime.audit.recording(cli_actor(), "file.upload", "cli",
                                               details={"name": path.name}) as note:
                stored = await runtime.files.add(upload, uploaded_by=uploaded_by)
                note.target = stored.id
            return stored
        finally:
            await runtime.stop()


def attachment_source(value: str) -> Path | str:
    """What ``--file``/``/attach`` names: a file on this machine (checked: it exists and is
    a regular file), or the id of an uploaded file (a UUID that is no path here).

    Raises:
        BadFile: ``value`` is neither, saying what it is and what to give instead.
    """
    path = Path(value).expanduser()
    file_id = parse_file_id(value.strip())
    if file_id is not None and not path.exists():
        return file_id
    check_path(path)
    return path


def describe_stored(stored: dict[str, Any]) -> str:
    """One line for an uploaded file's record (its JSON): name, type, size, id, and whether
    a model can be shown it."""
    shown = "" if stored["content_type"] in SHOWABLE_TYPES else (
        " (listed for read_document; only images and PDFs are shown to the model)")
    return (f"{safe(stored['name'])}: {safe(stored['content_type'])}, "
            f"{stored['size_bytes']:,} bytes, file id {safe(stored['id'])}{shown}")


def attachment_lines(attachments: list[dict[str, Any]] | None) -> list[str]:
    """A line per attachment of an event (``TaskStarted``, ``UserMessage``,
    ``ToolCallCompleted``): the files the model was shown, for the terminal."""
    lines = []
    for found in attachments or []:
        shape = (f", {found['width']}x{found['height']} px"
                 if found.get("width") and found.get("height") else
                 f", {found['pages']} page(s)" if found.get("pages") else "")
        lines.append(f"[dim]📎 {safe(found['name'])} ({safe(found['content_type'])}{shape}, "
                     f"{found['size_bytes']:,} bytes) shown to the model[/]")
    return lines


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
    stored = run_async(add_path(path, max_file_bytes(), cli_uploader()))
    if as_json:
        print_json(stored.to_json())
        return
    console.print(f"Added {safe(stored.name)} ({stored.content_type}, {stored.size_bytes:,} "
                  f"bytes) as [bold]{stored.id}[/]")


@app.command("list")
def list_files(
    limit: Annotated[int, typer.Option(metavar="N", min=1, max=MAX_PAGE,
                                       help="At most this many (a page).")] = 100,
    cursor: Annotated[str | None, typer.Option(
        metavar="CURSOR", help="The page after the one that printed this next_cursor.")] = None,
    every: Annotated[bool, typer.Option(
        "--all", help="Every file, page after page (--limit sets the page size).")] = False,
    as_json: JsonOption = False,
) -> None:
    """List files, newest first, a page at a time (--cursor for the next, --all for all)."""
    after = decode_page_cursor(cursor)
    if after is not None and parse_file_id(after[1]) is None:
        raise InvalidCursor("the page cursor is malformed: pass back the next_cursor that "
                            "toren files list printed")

    async def pages(runtime: Runtime) -> tuple[list[StoredFile], str | None]:
        found: list[StoredFile] = []
        before = after
        while True:
            page = await runtime.files.page(limit=limit, before=before)
            found += page.items
            before = page.after
            if before is None or not every:
                return found, None if before is None else encode_page_cursor(*before)

    files, next_cursor = with_database(pages)
    if as_json:
        print_json({"files": [stored.to_json() for stored in files], "next_cursor": next_cursor})
        return
    if not files:
        console.print("No files yet: upload one with `toren files add PATH`." if after is None
                      else "No more files.")
        return
    print_table(_table(files))
    if next_cursor:
        console.print(f"More: toren files list --cursor {next_cursor} (or --all)")


@app.command("show")
def show(file_id: FileId, as_json: JsonOption = False) -> None:
    """Show one file's record (name, type, size, SHA-256, who uploaded it)."""
    stored = _found(with_database(lambda rt: rt.files.get(file_id)), file_id)
    if as_json:
        print_json(stored.to_json())
        return
    for key, value in stored.to_json().items():
        console.print(f"{key}: {safe(str(value) if value is not None else '')}")


async def _delete_recorded(runtime: Runtime, file_id: str) -> StoredFile:
    """Delete the file, recorded in the audit trail by the CLI's user (``file.delete``;
    outcome ``file_not_found`` when there was none)."""
    async with runtime.audit.recording(cli_actor(), "file.delete", "cli", target=file_id):
        return _found(await runtime.files.delete(file_id), file_id)


@app.command("rm")
def remove(file_id: FileId, as_json: JsonOption = False) -> None:
    """Delete a file (its content goes once no other file shares it)."""
    stored = with_database(lambda rt: _delete_recorded(rt, file_id))
    if as_json:
        print_json({"id": stored.id, "deleted": True})
        return
    console.print(f"Deleted {safe(stored.name)} ({stored.id}).")
