"""Which workspace files ``read_file`` shows the model: images (PNG, JPEG, GIF, WebP) and PDFs,
known by their content, not their name."""

from __future__ import annotations

from toren.plugin import PDF_TYPE, image_size, image_type, pdf_pages


def shown_as(data: bytes) -> tuple[str, str] | None:
    """``(content type, what it is)`` of a file ``read_file`` shows the model: an image whose
    header gives its size (``"640x480"``) or a PDF (``"3 pages"``, or ``""`` when its page
    objects are compressed out of sight); ``None`` for every other file, read as text."""
    if data.startswith(b"%PDF-"):
        pages = pdf_pages(data)
        return PDF_TYPE, f"{pages} page{'s' if pages != 1 else ''}" if pages else ""
    content_type = image_type(data[:16])
    size = image_size(data) if content_type else None
    if content_type is None or size is None:  # a truncated or broken image is read as bytes
        return None
    return content_type, f"{size[0]}x{size[1]}"
