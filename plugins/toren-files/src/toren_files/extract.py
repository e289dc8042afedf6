"""Text out of documents: PDF (pypdf), docx (python-docx), xlsx (openpyxl) and text formats.

Runs inside the reader process (``toren_files.worker``), never in the server: a hostile file
costs that process's memory and time, within its limits. Each format yields its text in pieces,
so reading stops as soon as the window the caller asked for is full (``Window``); a workbook is
read by the cells its sheet holds, never by the grid they span. Every failure is an
``Unreadable`` saying what is wrong with the file; archives (docx and xlsx are zip files) are
checked for bombs before opening. It imports nothing of Toren (the reader starts faster).
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

MAX_UNCOMPRESSED_ENV = "TOREN_FILES_MAX_UNCOMPRESSED"
DEFAULT_MAX_UNCOMPRESSED = 256 * 1024 * 1024
#: An entry expanding more than this many times its compressed size (past 1 MiB) is a bomb.
MAX_RATIO = 200
#: Empty rows (or cells in a row) written out as blank lines (empty cells); a longer run of
#: them is one ``[empty: ...]`` marker, so a sparse sheet costs what it holds.
MAX_GAP = 32
_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


@dataclass
class Extracted:
    """What part of a document is read (``label``) and its text, piece by piece (``length``:
    its characters, where known before reading it all)."""

    label: str
    pieces: Iterable[str]
    length: int | None = None


class Unreadable(Exception):
    """The document cannot be read as asked; the message says why, in words for the model."""


def extract(data: bytes, kind: str, name: str, *, pages: str | None = None,
            sheet: str | None = None, cell_range: str | None = None,
            max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED) -> Extracted:
    """The document's text as pieces, and a one-line description of what part of it that is.
    ``kind`` is ``pdf``, ``docx``, ``xlsx``, ``html`` or ``text``."""
    if kind == "pdf":
        return _pdf(data, name, pages)
    if kind in ("docx", "xlsx"):
        check_archive(data, name, max_uncompressed)
        return _docx(data, name) if kind == "docx" else _xlsx(data, name, sheet, cell_range)
    text = data.decode("utf-8", errors="replace")
    if kind == "html":
        return Extracted("the page's text (HTML tags removed)", html_text(text))
    return Extracted("the whole file", [text], len(text))


class Window:
    """The characters from ``cursor`` that fit ``budget`` UTF-8 bytes, taken from a stream of
    pieces; ``add`` says when the window is full and one character beyond it was seen."""

    def __init__(self, cursor: int, budget: int) -> None:
        self.cursor = cursor
        self.budget = budget
        self.seen = 0  # characters of the text so far
        self.kept: list[str] = []
        self.used = 0  # UTF-8 bytes kept
        self.more = False

    @property
    def text(self) -> str:
        return "".join(self.kept)

    def add(self, piece: str) -> bool:
        """Take ``piece``; ``True`` once the window is full and more text follows it."""
        start = max(0, self.cursor - self.seen)
        self.seen += len(piece)
        if start >= len(piece):
            return False
        room = self.budget - self.used
        # room + 1 characters are more than room bytes: enough to know whether the rest fits.
        # A lone surrogate (from a PDF's text, say) becomes "?", still one character.
        encoded = piece[start:start + room + 1].encode("utf-8", errors="replace")
        if len(encoded) <= room:
            self.kept.append(encoded.decode("utf-8"))
            self.used += len(encoded)
            return False
        fits = encoded[:room].decode("utf-8", errors="ignore")  # a cut character is dropped
        self.kept.append(fits)
        self.used += len(fits.encode("utf-8"))
        self.more = True
        return True


def read_window(extracted: Extracted, cursor: int, budget: int, name: str) -> dict[str, Any]:
    """Read ``extracted`` from ``cursor`` until ``budget`` bytes are full (or the text ends):
    the answer the reader process gives."""
    window = Window(cursor, budget)
    for piece in extracted.pieces:
        if window.add(piece):
            break
    if not window.more and window.seen < cursor:
        raise Unreadable(f"cursor={cursor} is outside the text, which has {window.seen} "
                         "characters; start again from cursor 0")
    text = window.text
    return {"label": extracted.label, "text": text, "start": cursor, "end": cursor + len(text),
            "more": window.more, "total": extracted.length if window.more else window.seen}


def page_numbers(spec: str | None, count: int, name: str) -> list[int]:
    """``"1-3,7"`` as 1-based page numbers within ``count``; all pages when ``spec`` is empty."""
    if not spec or not spec.strip():
        return list(range(1, count + 1))
    chosen: list[int] = []
    for item in spec.split(","):
        match = _RANGE.match(item)
        if match is None:
            raise Unreadable(f"pages={spec!r}: write page numbers and ranges like '1-3,7'")
        first = int(match.group(1))
        last = int(match.group(2) or first)
        if not 1 <= first <= last <= count:
            raise Unreadable(f"pages={spec!r}: {name} has pages 1 to {count}")
        chosen += [n for n in range(first, last + 1) if n not in chosen]
    return chosen


def _pdf_failure(name: str, exc: BaseException) -> Unreadable:
    from pypdf.errors import LimitReachedError

    if isinstance(exc, LimitReachedError):
        return Unreadable(f"{name}: a part of the PDF expands past what pypdf reads ({exc}); it "
                          "is refused as a possible decompression bomb")
    return Unreadable(f"{name} is not a readable PDF (corrupt or truncated: "
                      f"{type(exc).__name__}: {exc})")


_PDF_ERRORS: tuple[type[BaseException], ...] = (
    ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError,
    zipfile.BadZipFile, AssertionError, ZeroDivisionError, OverflowError)


def _pdf(data: bytes, name: str, pages: str | None) -> Extracted:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    # PyPdfError: pypdf's own (a damaged file, and its limits: a stream that expands past
    # 75 MB, too many tokens)
    errors: tuple[type[BaseException], ...] = (PyPdfError, *_PDF_ERRORS)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:  # many "encrypted" PDFs only restrict printing: their user password is empty
                opened = bool(reader.decrypt(""))
            except MemoryError:
                raise
            except Exception:  # an unsupported algorithm, say: still just encrypted
                opened = False
            if not opened:
                raise Unreadable(f"{name} is an encrypted PDF that needs a password; upload a "
                                 "copy without the password")
        count = len(reader.pages)
    except errors as exc:
        raise _pdf_failure(name, exc) from None
    chosen = page_numbers(pages, count, name)

    def text() -> Iterator[str]:
        for position, number in enumerate(chosen):
            try:
                page = (reader.pages[number - 1].extract_text() or "").strip()
            except errors as exc:
                raise _pdf_failure(name, exc) from None
            yield f"{'' if position == 0 else chr(10) * 2}--- page {number} ---\n{page}"

    return Extracted(f"pages {_describe(chosen)} of {count}", text())


def _describe(numbers: list[int]) -> str:
    return ",".join(str(n) for n in numbers) if len(numbers) <= 10 else (
        f"{numbers[0]}-{numbers[-1]} ({len(numbers)} pages)")


def check_archive(data: bytes, name: str, limit: int) -> None:
    """Refuse a corrupt zip, and a zip bomb (too large or too compressed once expanded)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise Unreadable(f"{name} is damaged: it should be a zip archive (as docx and xlsx files "
                         f"are) but cannot be opened ({exc})") from None
    total = sum(entry.file_size for entry in entries)
    if total > limit:
        raise Unreadable(f"{name} would expand to {total:,} bytes, more than the {limit:,} "
                         f"read_document opens ({MAX_UNCOMPRESSED_ENV}); it is refused as a "
                         "possible zip bomb")
    for entry in entries:
        if entry.file_size > 1024 * 1024 and entry.file_size > MAX_RATIO * max(
                1, entry.compress_size):
            raise Unreadable(f"{name}: the entry {entry.filename} expands {entry.file_size:,} "
                             f"bytes from {entry.compress_size:,}, more than {MAX_RATIO} times; "
                             "it is refused as a possible zip bomb")


def _docx(data: bytes, name: str) -> Extracted:
    import docx

    def failure(exc: Exception) -> Unreadable:
        return Unreadable(f"{name} is not a readable Word document ({type(exc).__name__}: "
                          f"{exc})")

    try:
        document = docx.Document(io.BytesIO(data))
    except MemoryError:
        raise
    except Exception as exc:  # python-docx raises many kinds for a damaged part
        raise failure(exc) from None

    def text() -> Iterator[str]:
        separator = ""
        try:
            for paragraph in document.paragraphs:
                if paragraph.text.strip():
                    yield separator + paragraph.text
                    separator = "\n"
            for index, table in enumerate(document.tables, 1):
                yield f"{separator}--- table {index} ---"
                separator = "\n"
                for row in table.rows:
                    yield "\n" + "\t".join(cell.text.strip() for cell in row.cells)
        except MemoryError:
            raise
        except Exception as exc:
            raise failure(exc) from None

    return Extracted("the whole document (paragraphs, then tables)", text())


def _xlsx(data: bytes, name: str, sheet: str | None, cell_range: str | None) -> Extracted:
    import openpyxl
    from openpyxl.utils import range_boundaries
    from openpyxl.worksheet._read_only import ReadOnlyWorksheet

    try:
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except MemoryError:
        raise
    except Exception as exc:
        raise Unreadable(f"{name} is not a readable Excel workbook ({type(exc).__name__}: "
                         f"{exc})") from None
    names = workbook.sheetnames
    chosen = sheet or names[0]
    if chosen not in names:
        raise Unreadable(f"{name} has no sheet {chosen!r}; its sheets: {_listed(names)}")
    worksheet = workbook[chosen]
    if not isinstance(worksheet, ReadOnlyWorksheet):
        raise Unreadable(f"{name}: the sheet {chosen!r} is a chart, which has no cells to read; "
                         f"its sheets: {_listed(names)}")
    bounds = (1, 1, None, None)
    if cell_range:
        try:
            bounds = range_boundaries(cell_range.upper())
        except (ValueError, TypeError):
            raise Unreadable(f"cell_range={cell_range!r}: write a range like 'A1:D20'") from None

    def text() -> Iterator[str]:
        try:
            first = True
            for line in sheet_lines(_used_cells(workbook, worksheet), *bounds):
                yield line if first else "\n" + line
                first = False
        except (Unreadable, MemoryError):
            raise
        except Exception as exc:
            raise Unreadable(f"{name}: the sheet cannot be read ({type(exc).__name__}: {exc})"
                             ) from None
        finally:
            workbook.close()

    where = f"sheet {chosen!r}" + (f", cells {cell_range.upper()}" if cell_range else "")
    return Extracted(f"{where} (sheets: {_listed(names)}), tab-separated rows", text())


def _listed(names: list[str], most: int = 20) -> str:
    """The sheets' names, the first ``most`` of them (a workbook may have thousands)."""
    shown = ", ".join(name[:100] for name in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _used_cells(workbook: Any, worksheet: Any) -> Iterator[tuple[int, list[tuple[int, Any]]]]:
    """Each row the sheet's XML holds, as its number and its cells with a value (column,
    value), in the file's order. openpyxl's own row iterators pad every row out to the sheet's
    declared dimension (A1:XFD1048576 is 17 billion cells), so this reads with the parser they
    use, which yields the cells the file has."""
    from openpyxl.worksheet._reader import WorkSheetParser

    with worksheet._get_source() as source:
        parser = WorkSheetParser(source, worksheet._shared_strings, data_only=True,
                                 epoch=workbook.epoch, date_formats=workbook._date_formats,
                                 timedelta_formats=workbook._timedelta_formats)
        for number, cells in parser.parse():
            parser.row_dimensions.clear()  # it keeps each row's attributes: not needed here
            yield number, [(cell["column"], cell["value"]) for cell in cells
                           if cell["value"] is not None]


def sheet_lines(rows: Iterable[tuple[int, list[tuple[int, Any]]]], min_col: int, min_row: int,
                max_col: int | None, max_row: int | None) -> Iterator[str]:
    """Tab-separated lines of the cells in the bounds, from ``min_row`` and ``min_col``: a few
    empty rows or cells are written out, a longer run of them is one ``[empty: ...]`` marker."""
    next_row = min_row
    for number, cells in rows:
        if number < min_row:
            continue
        if max_row is not None and number > max_row:
            break
        inside = sorted(((column, value) for column, value in cells
                         if column >= min_col and (max_col is None or column <= max_col)),
                        key=lambda cell: cell[0])
        if not inside:
            continue
        gap = number - next_row
        if gap > MAX_GAP:
            yield f"[empty: rows {next_row} to {number - 1}]"
        else:
            yield from [""] * gap
        yield _row_line(inside, min_col)
        next_row = max(next_row, number + 1)


def _row_line(cells: list[tuple[int, Any]], min_col: int) -> str:
    from openpyxl.utils import get_column_letter

    parts: list[str] = []
    next_col = min_col
    for column, value in cells:
        gap = column - next_col
        if gap > MAX_GAP:
            parts.append(f"[empty: columns {get_column_letter(next_col)} to "
                         f"{get_column_letter(column - 1)}]")
        else:
            parts += [""] * gap
        parts.append(str(value))
        next_col = max(next_col, column + 1)
    return "\t".join(parts)


class _TextOfHtml(HTMLParser):
    SKIP = {"script", "style", "head", "noscript", "template"}
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section",
             "article", "table", "ul", "ol", "pre", "blockquote"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self.skipping:
            self.skipping -= 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)


def html_text(html: str) -> Iterator[str]:
    """The text of ``html`` without tags, scripts and styles, runs of spaces as one and blank
    lines as one, produced as the page is parsed (a slice at a time)."""
    parser = _TextOfHtml()
    held = ""  # trailing whitespace: it may join what the next slice starts with
    started = False
    for start in range(0, len(html) + 1, 65536):
        if start < len(html):
            parser.feed(html[start:start + 65536])
        else:
            parser.close()
        text = held + "".join(parser.parts)
        parser.parts.clear()
        cut = len(text.rstrip())
        ready, held = text[:cut], text[cut:]
        if not started:
            ready = ready.lstrip()
            started = bool(ready)
        if ready:
            yield re.sub(r"\n\s*\n+", "\n\n", re.sub(r"[ \t]+", " ", ready))
