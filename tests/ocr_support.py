"""What the OCR tests share: the real engine, or a skip (a failure under CI)."""

from __future__ import annotations

import shutil

from groundkit.errors import ConfigurationError
from groundkit.extraction.ocr import OCR_DPI, GrayImage, OcrEngine, ocr_engine
from groundkit.extraction.pdf import MAX_EDGE_PX
from groundkit.extraction.pdf_ocr import DeviceToPage, render_page
from tests.services import unavailable

__all__ = ["mixed_pdf", "pdfium_page_image", "real_engine"]


def real_engine() -> OcrEngine:
    """The installed tesseract with English data; skipped where it is missing
    (apt-get install tesseract-ocr), except under CI, where it must be there."""
    if shutil.which("tesseract") is None:
        unavailable("tesseract is not installed (apt-get install tesseract-ocr)")
    try:
        return ocr_engine("eng")
    except ConfigurationError as exc:
        unavailable(str(exc))


def pdfium_page_image(data: bytes, index: int = 0) -> tuple[GrayImage, DeviceToPage]:
    """Page ``index`` of a PDF as it is rendered for OCR, and the map back to its points."""
    import pypdfium2

    document = pypdfium2.PdfDocument(data)
    try:
        return render_page(document[index], OCR_DPI, MAX_EDGE_PX)
    finally:
        document.close()


def mixed_pdf(text_page: str, scanned_page: str) -> bytes:
    """A PDF whose page 1 has a text layer and page 2 is a scan of ``scanned_page``."""
    import io

    import pypdfium2

    from evals.scanned import scanned_pdf, text_pdf

    document = pypdfium2.PdfDocument(text_pdf([text_page]))
    scan = pypdfium2.PdfDocument(scanned_pdf([scanned_page], size=14))
    try:
        document.import_pages(scan)
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()
    finally:
        scan.close()
        document.close()
