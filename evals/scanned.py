"""Scanned-looking PDFs whose true text is known, for the OCR tests and evals.

Each page of text is typeset by fpdf2 (a core font: no font file needed), rendered
by pdfium to a grayscale picture, and that picture alone becomes the page of a new
PDF: the result has no text layer, as a scan has none, and the text it shows is
the text given. Generated, never downloaded. A scan can be made worse the ways
real ones are: turned by a small angle, blurred, speckled; the speckle comes from
a seeded generator, so the same arguments give the same bytes.
"""

from __future__ import annotations

import io
import random
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = ["A4_MM", "scanned_pdf", "text_pdf"]

# Page size in millimetres (fpdf2's unit), portrait.
A4_MM = (210.0, 297.0)
# fpdf2 stamps the time of writing otherwise: the same arguments must give the same bytes.
_FIXED_DATE = datetime(2026, 1, 1, tzinfo=UTC)


def text_pdf(pages: Sequence[str], *, font: str = "Helvetica", size: float = 12) -> bytes:
    """An A4 PDF with a text layer: one page per string, wrapped in the margins."""
    from fpdf import FPDF

    pdf = FPDF(unit="mm", format="A4")
    pdf.set_creation_date(_FIXED_DATE)
    pdf.set_auto_page_break(False)
    pdf.set_font(font, size=size)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, size * 0.55, text)
    return bytes(pdf.output())


def _render(data: bytes, dpi: int) -> list[Any]:
    """Each page of ``data`` as a grayscale PIL image at ``dpi``."""
    import pypdfium2

    document = pypdfium2.PdfDocument(data)
    try:
        return [
            document[i].render(scale=dpi / 72, grayscale=True).to_pil()
            for i in range(len(document))
        ]
    finally:
        document.close()


def scanned_pdf(
    pages: Sequence[str],
    *,
    font: str = "Helvetica",
    size: float = 12,
    dpi: int = 200,
    rotate: int = 0,
    skew: float = 0.0,
    blur: float = 0.0,
    speckle: float = 0.0,
) -> bytes:
    """A PDF with no text layer showing ``pages`` as ``text_pdf`` typesets them.

    ``dpi`` is the scan's resolution. With ``rotate`` (90, 180, 270) each page is
    stored turned the other way and carries ``/Rotate``, as a scanner that fixes a
    sideways sheet in the page dictionary does: a viewer shows it upright.
    ``skew`` turns the picture by that many degrees (counter-clockwise), ``blur`` is a
    Gaussian radius in scan pixels, ``speckle`` the share of pixels flipped to black or
    white.
    """
    from fpdf import FPDF

    if rotate not in (0, 90, 180, 270):
        raise ValueError(f"rotate must be 0, 90, 180 or 270, not {rotate}")
    images = _render(text_pdf(pages, font=font, size=size), dpi)
    width, height = A4_MM if rotate in (0, 180) else A4_MM[::-1]
    out = FPDF(unit="mm", format=(width, height))
    out.set_creation_date(_FIXED_DATE)
    out.set_auto_page_break(False)
    for index, image in enumerate(images):
        image = _degrade(image, skew, blur, speckle, seed=index)
        # PIL turns counter-clockwise; /Rotate turns the shown page clockwise back.
        stored = image.rotate(rotate, expand=True) if rotate else image
        png = io.BytesIO()
        stored.save(png, format="PNG")
        out.add_page()
        out.image(png, x=0, y=0, w=width, h=height)
    data = bytes(out.output())
    return _set_rotation(data, rotate) if rotate else data


def _set_rotation(data: bytes, rotate: int) -> bytes:
    import pypdfium2

    document = pypdfium2.PdfDocument(data)
    try:
        for i in range(len(document)):
            document[i].set_rotation(rotate)
        buffer = io.BytesIO()
        document.save(buffer)
        return buffer.getvalue()
    finally:
        document.close()


def _degrade(image: Any, skew: float, blur: float, speckle: float, *, seed: int) -> Any:
    from PIL import ImageFilter

    if skew:
        image = image.rotate(skew, resample=3, fillcolor=255)  # bicubic, white corners
    if blur:
        image = image.filter(ImageFilter.GaussianBlur(blur))
    if speckle:
        pixels = image.load()
        chance = random.Random(seed)
        width, height = image.size
        for _ in range(int(width * height * speckle)):
            x, y = chance.randrange(width), chance.randrange(height)
            pixels[x, y] = chance.choice((0, 255))
    return image
