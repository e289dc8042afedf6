"""Text out of documents: PDF (pypdf), docx (python-docx), xlsx (openpyxl) and text formats.

Runs in a thread (parsing is CPU-bound). Every failure is a ``ToolError`` saying what is wrong
with the file; archives (docx and xlsx are zip files) are checked for bombs before opening.
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from html.parser import HTMLParser

from toren.config import positive_number
from toren.errors import ToolError
from toren.files import DOCX, PDF, XLSX

MAX_UNCOMPRESSED_ENV = "TOREN_FILES_MAX_UNCOMPRESSED"
DEFAULT_MAX_UNCOMPRESSED = 256 * 1024 * 1024
#: An entry expanding more than this many times its compressed size (past 1 MiB) is a bomb.
MAX_RATIO = 200
_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def extract_text(data: bytes, content_type: str, name: str, *, pages: str | None = None,
                 sheet: str | None = None, cell_range: str | None = None) -> tuple[str, str]:
    """The document's text and a one-line description of what part of it that is."""
    if content_type == PDF:
        return _pdf(data, name, pages)
    if content_type in (DOCX, XLSX):
        _check_archive(data, name)
        return _docx(data, name) if content_type == DOCX else _xlsx(data, name, sheet, cell_range)
    if content_type.startswith("text/") or content_type in (
            "application/json", "application/yaml", "application/xml"):
        text = data.decode("utf-8", errors="replace")
        if content_type == "text/html":
            return _html_text(text), "the page's text (HTML tags removed)"
        return text, "the whole file"
    raise ToolError(f"{name} is {content_type}, which read_document cannot read; it reads PDF, "
                    "Word (docx), Excel (xlsx) and text files (markdown, CSV, JSON, YAML, HTML, "
                    "logs)")


def page_numbers(spec: str | None, count: int, name: str) -> list[int]:
    """``"1-3,7"`` as 1-based page numbers within ``count``; all pages when ``spec`` is empty."""
    if not spec or not spec.strip():
        return list(range(1, count + 1))
    chosen: list[int] = []
    for item in spec.split(","):
        match = _RANGE.match(item)
        if match is None:
            raise ToolError(f"pages={spec!r}: write page numbers and ranges like '1-3,7'")
        first = int(match.group(1))
        last = int(match.group(2) or first)
        if not 1 <= first <= last <= count:
            raise ToolError(f"pages={spec!r}: {name} has pages 1 to {count}")
        chosen += [n for n in range(first, last + 1) if n not in chosen]
    return chosen


def _pdf(data: bytes, name: str, pages: str | None) -> tuple[str, str]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:  # many "encrypted" PDFs only restrict printing: their user password is empty
                opened = bool(reader.decrypt(""))
            except Exception:  # an unsupported algorithm, say: still just encrypted
                opened = False
            if not opened:
                raise ToolError(f"{name} is an encrypted PDF that needs a password; upload a "
                                "copy without the password")
        count = len(reader.pages)
        chosen = page_numbers(pages, count, name)
        parts = [f"--- page {n} ---\n{(reader.pages[n - 1].extract_text() or '').strip()}"
                 for n in chosen]
    except ToolError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, IndexError,
            RecursionError, zipfile.BadZipFile) as exc:
        raise ToolError(f"{name} is not a readable PDF (corrupt or truncated: "
                        f"{type(exc).__name__}: {exc})") from None
    label = f"pages {_describe(chosen)} of {count}"
    return "\n\n".join(parts), label


def _describe(numbers: list[int]) -> str:
    return ",".join(str(n) for n in numbers) if len(numbers) <= 10 else (
        f"{numbers[0]}-{numbers[-1]} ({len(numbers)} pages)")


def _check_archive(data: bytes, name: str) -> None:
    """Refuse a corrupt zip, and a zip bomb (too large or too compressed once expanded)."""
    limit = positive_number(os.environ, MAX_UNCOMPRESSED_ENV, DEFAULT_MAX_UNCOMPRESSED, int)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ToolError(f"{name} is damaged: it should be a zip archive (as docx and xlsx files "
                        f"are) but cannot be opened ({exc})") from None
    total = sum(entry.file_size for entry in entries)
    if total > limit:
        raise ToolError(f"{name} would expand to {total:,} bytes, more than the {limit:,} "
                        f"read_document opens ({MAX_UNCOMPRESSED_ENV}); it is refused as a "
                        "possible zip bomb")
    for entry in entries:
        if entry.file_size > 1024 * 1024 and entry.file_size > MAX_RATIO * max(
                1, entry.compress_size):
            raise ToolError(f"{name}: the entry {entry.filename} expands {entry.file_size:,} "
                            f"bytes from {entry.compress_size:,}, more than {MAX_RATIO} times; "
                            "it is refused as a possible zip bomb")


def _docx(data: bytes, name: str) -> tuple[str, str]:
    import docx

    try:
        document = docx.Document(io.BytesIO(data))
        blocks = [p.text for p in document.paragraphs if p.text.strip()]
        for index, table in enumerate(document.tables, 1):
            blocks.append(f"--- table {index} ---")
            blocks += ["\t".join(cell.text.strip() for cell in row.cells) for row in table.rows]
    except Exception as exc:  # python-docx raises many kinds for a damaged part
        raise ToolError(f"{name} is not a readable Word document ({type(exc).__name__}: "
                        f"{exc})") from None
    return "\n".join(blocks), "the whole document (paragraphs, then tables)"


def _xlsx(data: bytes, name: str, sheet: str | None,
          cell_range: str | None) -> tuple[str, str]:
    import openpyxl
    from openpyxl.utils import range_boundaries

    try:
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:
        raise ToolError(f"{name} is not a readable Excel workbook ({type(exc).__name__}: "
                        f"{exc})") from None
    try:
        names = workbook.sheetnames
        chosen = sheet or names[0]
        if chosen not in names:
            raise ToolError(f"{name} has no sheet {chosen!r}; its sheets: {', '.join(names)}")
        worksheet = workbook[chosen]
        bounds: dict[str, int | None] = {}
        if cell_range:
            try:
                min_col, min_row, max_col, max_row = range_boundaries(cell_range.upper())
            except (ValueError, TypeError):
                raise ToolError(f"cell_range={cell_range!r}: write a range like 'A1:D20'"
                                ) from None
            bounds = {"min_col": min_col, "min_row": min_row, "max_col": max_col,
                      "max_row": max_row}
        lines = ["\t".join("" if value is None else str(value) for value in row)
                 for row in worksheet.iter_rows(values_only=True, **bounds)]
    except ToolError:
        raise
    except Exception as exc:
        raise ToolError(f"{name}: the sheet cannot be read ({type(exc).__name__}: {exc})"
                        ) from None
    finally:
        workbook.close()
    where = f"sheet {chosen!r}" + (f", cells {cell_range.upper()}" if cell_range else "")
    return "\n".join(lines), f"{where} (sheets: {', '.join(names)}), tab-separated rows"


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


def _html_text(html: str) -> str:
    parser = _TextOfHtml()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    return re.sub(r"\n\s*\n+", "\n\n", re.sub(r"[ \t]+", " ", text)).strip()
