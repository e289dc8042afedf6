"""Hostile documents (issue 35, item 4): each is read in a limited reader process, answers with
a clear error or capped text in bounded time, and leaves this process's memory flat."""

from __future__ import annotations

import asyncio
import io
import time
import zipfile
from collections.abc import Callable

import documents
import pytest
from reading import MIB, Files, peak_memory_growth, read, reader_processes, still_present

from toren.config import ConfigError
from toren.errors import ToolError

#: The growth of the server's peak memory a hostile document may cause (its own bytes aside).
FLAT = 100 * MIB
#: Seconds any one hostile read may take: generous, the machine is shared.
BOUND_S = 120


@pytest.fixture
def files() -> Files:
    return Files()


async def read_flat(files: Files, name: str, data: bytes, **arguments: object
                    ) -> tuple[dict[str, object], str]:
    """Read ``data`` within ``BOUND_S`` seconds; the peak memory of this process (standing for
    the server's) grows by less than ``FLAT`` meanwhile."""
    file_id = files.add(name, data)
    with peak_memory_growth() as growth:
        async with asyncio.timeout(BOUND_S):
            result = await read(files, file_id, **arguments)
    assert growth[0] < FLAT, f"reading {name} grew this process by {growth[0] // MIB} MiB"
    return result


async def refused_flat(files: Files, name: str, data: bytes, message: str,
                       **arguments: object) -> str:
    """The ToolError reading ``data`` ends in (matching ``message``), within the bounds."""
    file_id = files.add(name, data)
    with peak_memory_growth() as growth:
        async with asyncio.timeout(BOUND_S):
            with pytest.raises(ToolError, match=message) as raised:
                await read(files, file_id, **arguments)
    assert growth[0] < FLAT, f"reading {name} grew this process by {growth[0] // MIB} MiB"
    assert reader_processes() == []
    return str(raised.value)


# --- spreadsheets ---

async def test_a_sheet_of_two_cells_spanning_the_whole_grid_reads_two_cells(
        files: Files) -> None:
    data = documents.two_cell_xlsx()
    assert len(data) < 6000
    header, text = await read_flat(files, "grid.xlsx", data)
    assert text == "a\n[empty: rows 2 to 1048575]\n[empty: columns A to XFC]\tb"
    assert header["next_cursor"] is None
    # the same with a range over the whole grid, and one over its last few rows
    _, text = await read_flat(files, "grid.xlsx", data, cell_range="A1:XFD1048576")
    assert text == "a\n[empty: rows 2 to 1048575]\n[empty: columns A to XFC]\tb"
    _, text = await read_flat(files, "grid.xlsx", data, cell_range="XFB1048574:XFD1048576")
    assert text == "\n\n\t\tb"


async def test_a_sparse_sheet_keeps_short_gaps_as_blank_cells_and_rows(files: Files) -> None:
    import openpyxl

    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet["B2"], sheet["D2"], sheet["A4"], sheet["AZ4"] = "b2", "d2", "a4", "az4"
    sheet["A200"] = "a200"
    out = io.BytesIO()
    workbook.save(out)
    _, text = await read_flat(files, "sparse.xlsx", out.getvalue())
    assert text.splitlines() == ["", "\tb2\t\td2", "", "a4\t[empty: columns B to AY]\taz4",
                                 "[empty: rows 5 to 199]", "a200"]


async def test_a_workbook_of_many_sheets_with_a_long_name_fits_the_output_limit(
        files: Files) -> None:
    sheets: dict[str, list[list[object]]] = {f"{n:03d}" + "s" * 28: [[n]] for n in range(300)}
    name = 'q"\\' * 60 + "\u00e9" * 60 + ".xlsx"
    data = documents.xlsx(sheets)
    header, text = await read_flat(files, name, data, max_output_bytes=1000)
    assert text == "0" and str(header["document"]).endswith("...")
    await refused_flat(files, name, data, "has no sheet 'x'; its sheets: 000s.*, 019s+ and "
                       "280 more", sheet="x")


async def test_a_sparse_csv_of_the_same_shape_comes_capped(files: Files) -> None:
    data = b"a\n" + b"," * 1_048_576 + b"\n"
    header, text = await read_flat(files, "sparse.csv", data, max_output_bytes=4096)
    assert text.startswith("a\n,,,") and header["next_cursor"] == len(text)
    assert header["total_characters"] == len(data)


async def test_an_ods_is_not_parsed(files: Files) -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.spreadsheet")
        archive.writestr("content.xml", "<office:document-content/>")
    await refused_flat(files, "sparse.ods", out.getvalue(), "cannot read; it reads PDF")


async def test_a_zip_bomb_inside_an_xlsx_is_refused_before_it_is_expanded(
        files: Files) -> None:
    data = documents.shared_strings_bomb_xlsx()
    assert len(data) < 2 * MIB
    await refused_flat(files, "bomb.xlsx", data,
                       r"would expand to 1,07\d,\d+,\d+ bytes, more than the 268,435,456 "
                       r"read_document opens \(TOREN_FILES_MAX_UNCOMPRESSED\); it is refused")


async def test_an_xlsx_inside_the_archive_limits_stops_at_the_memory_limit(
        files: Files) -> None:
    data = documents.shared_strings_within_limits_xlsx()
    message = await refused_flat(files, "strings.xlsx", data,
                                 r"strings.xlsx needs more than 512 MiB of memory to read "
                                 r"\(TOREN_FILES_MAX_MEMORY\); read one sheet")
    assert "raise the limit" in message


# --- Word documents ---

async def test_a_docx_with_a_billion_laughs_entity_is_a_clear_error(files: Files) -> None:
    await refused_flat(files, "laughs.docx", documents.billion_laughs_docx(),
                       "laughs.docx is not a readable Word document .*amplification")


async def test_a_docx_whose_parts_relate_in_a_loop_is_read(files: Files) -> None:
    header, text = await read_flat(files, "loop.docx", documents.relationship_loop_docx())
    assert text == "hello" and header["next_cursor"] is None


async def test_a_docx_table_cell_spanning_100_million_columns_stops_at_the_memory_limit(
        files: Files, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_FILES_MAX_MEMORY", str(256 * MIB))  # the limit is a setting
    await refused_flat(files, "span.docx", documents.wide_span_docx(),
                       r"span.docx needs more than 256 MiB of memory to read "
                       r"\(TOREN_FILES_MAX_MEMORY\)")


# --- PDFs ---

@pytest.mark.parametrize("name,make,message", [
    ("inflate.pdf", documents.flate_bomb_pdf, "expands past what pypdf reads .*decompression "
                                              "bomb"),
    ("loop.pdf", documents.page_loop_pdf, "not a readable PDF .*cyclic page references"),
])
async def test_hostile_pdfs_are_clear_errors(files: Files, name: str,
                                             make: Callable[[], bytes], message: str) -> None:
    await refused_flat(files, name, make(), message)


async def test_a_pdf_past_the_cpu_limit_is_stopped(files: Files,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_FILES_MAX_CPU", "1")
    await refused_flat(files, "busy.pdf", documents.busy_pdf(),
                       r"busy.pdf needs more than 1 s of CPU time to read "
                       r"\(TOREN_FILES_MAX_CPU\); read fewer pages at a time")


async def test_a_pdf_past_the_wall_clock_is_killed(files: Files,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOREN_FILES_TIMEOUT", "0.5")
    started = time.monotonic()
    await refused_flat(files, "busy.pdf", documents.busy_pdf(),
                       r"busy.pdf took longer than 0.5 s to read \(TOREN_FILES_TIMEOUT\)")
    assert time.monotonic() - started < 60


async def test_a_cancelled_read_leaves_no_reader_behind(files: Files) -> None:
    file_id = files.add("busy.pdf", documents.busy_pdf())
    call = asyncio.create_task(read(files, file_id))
    async with asyncio.timeout(60):
        while not (readers := reader_processes()):
            assert not call.done(), "the read ended without a reader process"
            await asyncio.sleep(0.05)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    # the reader was killed and reaped: nothing of it is left, not even a zombie
    assert still_present(readers) == []


async def test_readers_at_once_are_bounded(files: Files, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setenv("TOREN_FILES_MAX_READERS", "1")
    monkeypatch.setenv("TOREN_FILES_TIMEOUT", "1")
    file_id = files.add("busy.pdf", documents.busy_pdf())
    calls = asyncio.gather(*(read(files, file_id) for _ in range(3)), return_exceptions=True)
    most = 0
    async with asyncio.timeout(BOUND_S):
        while not calls.done():
            most = max(most, len(reader_processes()))
            await asyncio.sleep(0.02)
    assert most == 1  # one at a time, each stopped by the wall clock in its turn
    for outcome in await calls:
        assert isinstance(outcome, ToolError) and "took longer than 1 s" in str(outcome)


# --- the window: what one call returns of a long document ---

async def test_pdf_pages_and_sheet_rows_come_in_chunks_that_join_up(files: Files) -> None:
    pdf = files.add("long.pdf", documents.pdf([f"page {n} " + "words " * 40 for n in range(30)]))
    rows = [[f"r{n}", n, "caf\u00e9 \U0001f600"] for n in range(400)]
    sheet = files.add("long.xlsx", documents.xlsx({"S": rows}))
    for file_id in (pdf, sheet):
        header, whole = await read(files, file_id)
        assert header["next_cursor"] is None and header["total_characters"] == len(whole)
        pieces, cursor = [], 0
        while cursor is not None:
            header, text = await read(files, file_id, max_output_bytes=2600, cursor=cursor)
            if header["next_cursor"] is not None:  # stopped at the window: not counted
                assert header["total_characters"] is None
            pieces.append(text)
            cursor = header["next_cursor"]  # type: ignore[assignment]
        assert "".join(pieces) == whole and len(pieces) > 2


def test_the_limits_are_checked_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from toren_files.reader import ReaderLimits

    limits = ReaderLimits.from_env({"TOREN_FILES_MAX_MEMORY": str(64 * MIB),
                                    "TOREN_FILES_MAX_CPU": "5", "TOREN_FILES_TIMEOUT": "2.5",
                                    "TOREN_FILES_MAX_READERS": "1"})
    assert (limits.memory_bytes, limits.cpu_s, limits.timeout_s, limits.max_readers) == (
        64 * MIB, 5, 2.5, 1)
    with pytest.raises(ConfigError, match="TOREN_FILES_MAX_MEMORY='lots' is not a valid int"):
        ReaderLimits.from_env({"TOREN_FILES_MAX_MEMORY": "lots"})
