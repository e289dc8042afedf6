"""Documents the tests generate: PDFs (plain, encrypted, broken), docx, xlsx, zip bombs."""

from __future__ import annotations

import io
import zipfile


def pdf(pages: list[str]) -> bytes:
    """A valid PDF with one line of Helvetica text per page."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", ""]
    kids = []
    for index, text in enumerate(pages):
        page_id, content_id = 4 + 2 * index, 5 + 2 * index
        kids.append(f"{page_id} 0 R")
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET"
        objects += [f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents "
                    f"{content_id} 0 R /Resources << /Font << /F1 3 0 R >> >> >>",
                    f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream"]
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(pages)} >>"
    objects.insert(2, "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    out += (f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
            ).encode()
    return bytes(out)


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
