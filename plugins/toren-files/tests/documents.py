"""Documents the tests generate: PDFs (plain, encrypted, broken), docx, xlsx, zip bombs."""

from __future__ import annotations

import io
import zipfile

from toren.testing import pdf_bytes


def pdf(pages: list[str]) -> bytes:
    """A valid PDF with one line of Helvetica text per page."""
    return pdf_bytes(*pages)


def encrypted_pdf(pages: list[str], password: str = "secret") -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for page in PdfReader(io.BytesIO(pdf(pages))).pages:
        writer.add_page(page)
    writer.encrypt(user_password=password, owner_password=password + "-owner",
                   algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx(paragraphs: list[str], table: list[list[str]] | None = None) -> bytes:
    import docx as python_docx

    document = python_docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def xlsx(sheets: dict[str, list[list[object]]]) -> bytes:
    import openpyxl

    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)  # type: ignore[arg-type]
    for name, rows in sheets.items():
        sheet = workbook.create_sheet(name)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def zip_bomb_docx(expanded_bytes: int = 20 * 1024 * 1024) -> bytes:
    """A docx-shaped zip whose document part is megabytes of zeros compressed to kilobytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", b"\0" * expanded_bytes)
    return out.getvalue()


def corrupt_zip(valid: bytes) -> bytes:
    """A zip whose local headers survive but whose central directory is overwritten."""
    return valid[:200] + b"\x00garbage" * 50


# --- hostile documents: each is small, and costs a naive reader far more than its size ---

SHARED_STRINGS_TYPE = ("application/vnd.openxmlformats-officedocument.spreadsheetml."
                       "sharedStrings+xml")


def two_cell_xlsx() -> bytes:
    """4.8 KB: one cell at A1 and one at XFD1048576, so the sheet's dimension spans the whole
    grid (17 billion cells)."""
    import openpyxl

    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet["A1"] = "a"
    sheet["XFD1048576"] = "b"
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def replace_part(archive: bytes, part: str, content: bytes) -> bytes:
    """The zip ``archive`` with ``part`` holding ``content`` instead."""
    source = zipfile.ZipFile(io.BytesIO(archive))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            target.writestr(info.filename,
                            content if info.filename == part else source.read(info.filename))
    return out.getvalue()


def _document_xml(archive: bytes) -> str:
    return zipfile.ZipFile(io.BytesIO(archive)).read("word/document.xml").decode()


def billion_laughs_docx() -> bytes:
    """A docx whose text is an entity that expands to 10^9 'lol's (3 GB)."""
    base = docx(["hello"])
    head, rest = _document_xml(base).split("?>", 1)
    entities = '<!ENTITY lol0 "lol">' + "".join(
        f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10}">' for n in range(1, 10))
    xml = f"{head}?><!DOCTYPE w:document [{entities}]>{rest.replace('>hello<', '>&lol9;<')}"
    return replace_part(base, "word/document.xml", xml.encode())


def relationship_loop_docx() -> bytes:
    """A docx whose main part relates to itself, twice (a cycle in the package's graph)."""
    base = docx(["hello"])
    rels_part = "word/_rels/document.xml.rels"
    rels = zipfile.ZipFile(io.BytesIO(base)).read(rels_part).decode()
    kind = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"
    rels = rels.replace("</Relationships>",
                        f'<Relationship Id="rLoop1" Type="{kind}" Target="document.xml"/>'
                        f'<Relationship Id="rLoop2" Type="{kind}" Target="../word/document.xml"/>'
                        "</Relationships>")
    return replace_part(base, rels_part, rels.encode())


def wide_span_docx(span: int = 100_000_000) -> bytes:
    """A docx whose table cell spans 100 million grid columns (python-docx makes a cell object
    for each)."""
    base = docx(["hello"], [["a", "b"]])
    xml = _document_xml(base).replace("<w:tcPr>", f'<w:tcPr><w:gridSpan w:val="{span}"/>', 1)
    return replace_part(base, "word/document.xml", xml.encode())


def xlsx_with_shared_strings(block: bytes, blocks: int, level: int) -> bytes:
    """An xlsx whose shared-strings part is one string of ``blocks`` times ``block``,
    compressed as it is written (nothing that size is held in memory)."""
    source = zipfile.ZipFile(io.BytesIO(xlsx({"S": [["x"]]})))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as target:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename == "[Content_Types].xml":
                data = data.replace(b"</Types>", (
                    f'<Override PartName="/xl/sharedStrings.xml" '
                    f'ContentType="{SHARED_STRINGS_TYPE}"/></Types>').encode())
            target.writestr(info.filename, data)
        with target.open("xl/sharedStrings.xml", "w", force_zip64=True) as part:
            part.write(b'<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
                       b"<si><t>")
            for _ in range(blocks):
                part.write(block)
            part.write(b"</t></si></sst>")
    return out.getvalue()


def shared_strings_bomb_xlsx() -> bytes:
    """About 1 MB: a 1 GiB shared-strings part (far past the archive limits)."""
    return xlsx_with_shared_strings(b"A" * (1 << 20), 1024, 9)


def shared_strings_within_limits_xlsx() -> bytes:
    """About 1.6 MB: a 250 MiB shared-strings part compressed 166 times, inside both archive
    limits (256 MiB in all, 200 times per entry), so only the reader's memory limit stops it."""
    import random

    rnd = random.Random(7)
    block = bytes(66 if rnd.random() < 0.002 else 65 for _ in range(1 << 20))
    return xlsx_with_shared_strings(block, 250, 6)


def raw_pdf(objects: list[bytes]) -> bytes:
    """A PDF of these objects (numbered from 1; the first is the catalog)."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    out += (f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
            ).encode()
    return bytes(out)


def one_page_pdf(content: bytes, stream_keys: bytes = b"") -> bytes:
    """A one-page PDF whose content stream is ``content``."""
    return raw_pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R "
        b"/Resources << /Font << /F1 3 0 R >> >> >>",
        b"<< /Length %d %s >>\nstream\n" % (len(content), stream_keys) + content
        + b"\nendstream"])


def flate_bomb_pdf() -> bytes:
    """About 250 KB: a page whose content stream inflates to 256 MiB (pypdf stops at 75 MB)."""
    import zlib

    compressor = zlib.compressobj(9)
    spaces = b" " * (1 << 20)
    content = compressor.compress(b"BT /F1 12 Tf 72 720 Td (x) Tj ET\n") + b"".join(
        compressor.compress(spaces) for _ in range(256)) + compressor.flush()
    return one_page_pdf(content, b"/Filter /FlateDecode")


def page_loop_pdf() -> bytes:
    """A PDF whose page tree holds itself."""
    return raw_pdf([b"<< /Type /Catalog /Pages 2 0 R >>",
                    b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
                    b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R 3 0 R] /Count 2 >>"])


def busy_pdf() -> bytes:
    """21 MB: a page of three million text operators (seconds of CPU to extract)."""
    return one_page_pdf(b"BT /F1 12 Tf 72 720 Td " + b"(x) Tj " * 3_000_000 + b"ET")
