"""read_document on files the tests generate: each format, selection, chunking, bad files."""

from __future__ import annotations

import documents
import pytest
from reading import Files, read

from toren.errors import ToolError


@pytest.fixture
def files() -> Files:
    return Files()


async def test_a_pdf_by_pages(files: Files) -> None:
    file_id = files.add("report.pdf", documents.pdf(["Revenue grew", "Costs fell", "Outlook"]))
    header, text = await read(files, file_id)
    assert "pages 1,2,3 of 3" in str(header["document"])
    assert "--- page 2 ---\nCosts fell" in text
    header, text = await read(files, file_id, pages="3,1")
    assert "Outlook" in text and "Revenue grew" in text and "Costs fell" not in text
    with pytest.raises(ToolError, match="has pages 1 to 3"):
        await read(files, file_id, pages="2-9")
    with pytest.raises(ToolError, match="like '1-3,7'"):
        await read(files, file_id, pages="first")


async def test_a_word_document_with_a_table(files: Files) -> None:
    file_id = files.add("memo.docx", documents.docx(
        ["Quarterly memo", "Ship the durable runtime."], [["region", "sales"], ["EU", "12"]]))
    header, text = await read(files, file_id)
    assert text.splitlines() == ["Quarterly memo", "Ship the durable runtime.",
                                 "--- table 1 ---", "region\tsales", "EU\t12"]
    assert header["next_cursor"] is None


async def test_an_excel_workbook_by_sheet_and_range(files: Files) -> None:
    file_id = files.add("numbers.xlsx", documents.xlsx({
        "Summary": [["total", 42]],
        "Sales": [["region", "q1", "q2"], ["EU", 10, 12], ["US", 20, 25]]}))
    header, text = await read(files, file_id)
    assert text == "total\t42" and "sheets: Summary, Sales" in str(header["document"])
    _, text = await read(files, file_id, sheet="Sales", cell_range="b2:c3")
    assert text == "10\t12\n20\t25"
    with pytest.raises(ToolError, match="has no sheet 'Costs'; its sheets: Summary, Sales"):
        await read(files, file_id, sheet="Costs")
    with pytest.raises(ToolError, match="like 'A1:D20'"):
        await read(files, file_id, cell_range="everything")


@pytest.mark.parametrize("name,content,expected", [
    ("notes.md", "# Title\n\nSome *notes*.", "# Title\n\nSome *notes*."),
    ("data.csv", "a,b\n1,2\n", "a,b\n1,2\n"),
    ("config.yaml", "key: value\n", "key: value\n"),
    ("data.json", '{"a": [1, 2]}', '{"a": [1, 2]}'),
    ("app.log", "INFO started\nERROR failed\n", "INFO started\nERROR failed\n"),
    ("page.html", "<html><head><title>t</title><style>p{}</style></head><body><h1>Hello"
                  "</h1><script>alert(1)</script><p>World &amp; more</p></body></html>",
     "Hello\n\nWorld & more"),
])
async def test_text_formats(files: Files, name: str, content: str, expected: str) -> None:
    _, text = await read(files, files.add(name, content.encode()))
    assert text == expected


async def test_a_long_document_comes_in_chunks_that_fit_the_output_limit(files: Files) -> None:
    original = "".join(f"line {n}: caf\u00e9 \U0001f600 data\n" for n in range(2000))
    file_id = files.add("long.txt", original.encode())
    pieces, cursor, calls = [], 0, 0
    while cursor is not None:
        header, text = await read(files, file_id, max_output_bytes=2048, cursor=cursor)
        pieces.append(text)
        assert header["characters"] == [cursor, cursor + len(text)]
        cursor = header["next_cursor"]  # type: ignore[assignment]
        calls += 1
    assert "".join(pieces) == original and calls > 20
    with pytest.raises(ToolError, match="outside the text"):
        await read(files, file_id, cursor=len(original) + 1)


async def test_an_encrypted_pdf_is_a_clear_error(files: Files) -> None:
    file_id = files.add("secret.pdf", documents.encrypted_pdf(["classified"]))
    with pytest.raises(ToolError, match="encrypted PDF that needs a password"):
        await read(files, file_id)


async def test_a_pdf_encrypted_with_an_empty_password_is_read(files: Files) -> None:
    file_id = files.add("open.pdf", documents.encrypted_pdf(["readable"], password=""))
    assert "readable" in (await read(files, file_id))[1]


@pytest.mark.parametrize("name,make,message", [
    ("broken.pdf", lambda: documents.pdf(["x"])[:60], "not a readable PDF"),
    ("broken.docx", lambda: documents.corrupt_zip(documents.docx(["x"])), "is damaged"),
    ("broken.xlsx", lambda: documents.corrupt_zip(documents.xlsx({"S": [[1]]})), "is damaged"),
    ("bomb.docx", documents.zip_bomb_docx, "possible zip bomb"),
    ("fake.docx", lambda: b"PK\x03\x04" + b"\x00" * 100, "is damaged"),
])
async def test_bad_documents_are_clear_errors(files: Files, name: str, make: object,
                                              message: str) -> None:
    data = make()  # type: ignore[operator]
    with pytest.raises(ToolError, match=message):
        await read(files, files.add(name, data))


async def test_a_binary_file_and_an_unknown_id(files: Files) -> None:
    with pytest.raises(ToolError, match="cannot read"):
        await read(files, files.add("blob.bin", b"\x00\x01\x02\xff"))
    with pytest.raises(ToolError, match="no file has the id 'nope'"):
        await read(files, "nope")
