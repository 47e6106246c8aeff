"""Scanned pages too large for the OCR resolution within the pixel limit (A2 drawings,
posters): recognised at the highest whole dpi that fits, with boxes in the page's own
points; a page too large even at the lowest resolution is left unread, never failing
the PDF (adr/0098-large-pages-rendered-to-fit.md)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

pytest.importorskip("pypdfium2")

from groundkit import Collection
from groundkit.extraction import pdf_extractor
from groundkit.extraction.ocr import OCR_DPI, ocr_engine
from groundkit.extraction.pdf import MAX_EDGE_PX
from groundkit.extraction.pdf_ocr import (
    MIN_OCR_DPI,
    PageTooLargeError,
    ocr_policy,
    render_dpi,
    render_page,
)
from groundkit.testing.conformance.helpers import document_by_source
from tests.ocr_support import real_engine
from tests.support import write_tree

# A banner-sized drawing sheet: 10,000 pixels across at 300 dpi, 6,000 at 180.
BIG = (2400.0, 400.0)
BIG_DPI = 180
WORDS = "Girder spacing twelve metres"
TEXT_PAGE = "Specification of the bridge deck and its bearings."
TOLERANCE = 6.0  # points: tesseract's ink boxes against pdfium's typeset glyph boxes


@pytest.fixture
def engine_cache() -> Iterator[None]:
    """Engines made in a test do not outlive it."""
    ocr_engine.cache_clear()
    yield
    ocr_engine.cache_clear()


def _typeset() -> bytes:
    """``WORDS`` typeset on a ``BIG`` page, with a text layer."""
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format=BIG)
    pdf.add_page()
    pdf.set_font("helvetica", size=40)
    pdf.text(200, 220, WORDS)
    return bytes(pdf.output())


@cache
def _drawing() -> bytes:
    """Page 1: text on A4; page 2: a ``BIG`` sheet that is one image of ``WORDS`` (no
    text layer), as a plotter's scan of a drawing is."""
    import pypdfium2
    from fpdf import FPDF

    typeset = pypdfium2.PdfDocument(_typeset())
    try:
        image = typeset[0].render(scale=150 / 72, grayscale=True).to_pil()
    finally:
        typeset.close()
    png = io.BytesIO()
    image.save(png, format="PNG")
    pdf = FPDF(unit="pt", format="A4")
    pdf.set_font("helvetica", size=12)
    pdf.add_page()
    pdf.text(72, 100, TEXT_PAGE)
    pdf.add_page(format=BIG)
    pdf.image(png, x=0, y=0, w=BIG[0], h=BIG[1])
    return bytes(pdf.output())


def _typeset_box(word: str) -> tuple[float, float, float, float]:
    """Where ``word`` stands on the typeset page, in points (pdfium's glyph boxes)."""
    import pypdfium2

    document = pypdfium2.PdfDocument(_typeset())
    try:
        textpage = document[0].get_textpage()
        text = textpage.get_text_range()
        start = text.index(word)
        boxes = [textpage.get_charbox(i, loose=False) for i in range(start, start + len(word))]
    finally:
        document.close()
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )


def test_the_render_resolution_fits_the_pixel_limit() -> None:
    a4, a2, a0 = (595.0, 842.0), (1191.0, 1684.0), (2384.0, 3370.0)
    assert render_dpi(*a4, OCR_DPI, MAX_EDGE_PX) == OCR_DPI
    assert render_dpi(*a2, OCR_DPI, MAX_EDGE_PX) == 256  # 5,988 pixels along its long edge
    assert render_dpi(*a0, OCR_DPI, MAX_EDGE_PX) == 128
    assert render_dpi(*BIG, OCR_DPI, MAX_EDGE_PX) == BIG_DPI
    # A 20-inch page is exactly 6,000 pixels at 300 dpi: it fits, as it always did.
    assert render_dpi(1440.0, 1440.0, OCR_DPI, MAX_EDGE_PX) == OCR_DPI
    for size in (a2, a0, BIG, (1440.5, 100.0), (5999.0, 10.0)):
        dpi = render_dpi(*size, OCR_DPI, MAX_EDGE_PX)
        assert MIN_OCR_DPI <= dpi < OCR_DPI
        assert round(max(size) * dpi / 72) <= MAX_EDGE_PX < round(max(size) * (dpi + 1) / 72)
    # Past 6,000 pixels even at 72 dpi (83 inches), or no size at all: not rendered.
    for size in ((6001.0, 100.0), (14400.0, 14400.0), (float("nan"), 100.0)):
        with pytest.raises(PageTooLargeError):
            render_dpi(*size, OCR_DPI, MAX_EDGE_PX)


def test_a_large_page_is_rendered_within_the_limit_and_maps_back_to_its_points() -> None:
    import pypdfium2

    document = pypdfium2.PdfDocument(_drawing())
    try:
        image, to_page = render_page(document[1], OCR_DPI, MAX_EDGE_PX)
    finally:
        document.close()
    assert image.dpi == BIG_DPI
    assert (image.width, image.height) == (MAX_EDGE_PX, 1000)
    # The map follows the render actually made: the far corner is the page's.
    assert to_page(0, image.height) == pytest.approx((0.0, 0.0), abs=0.01)
    assert to_page(image.width, 0) == pytest.approx(BIG, abs=0.01)


async def test_a_large_scanned_page_is_recognised_not_failing_the_pdf() -> None:
    real_engine()
    extraction = await pdf_extractor().with_policy(ocr_policy("auto")).extract_bytes(_drawing())
    assert extraction.unread is None
    assert extraction.identity is not None and "+ocr:" in extraction.identity
    first, second = extraction.text.split("\n\f\n")
    assert first == TEXT_PAGE
    assert second == WORDS


async def test_a_large_drawing_is_ingested_searched_and_its_citations_verified(
    tmp_path: Path, engine_cache: None
) -> None:
    real_engine()
    base = tmp_path / "corpus"
    write_tree(base, {"plan.pdf": _drawing()})
    async with Collection.open(tmp_path / "index", base_dir=base) as collection:
        report = await collection.ingest(base)
        assert report.added == ["plan.pdf"] and not report.failed and not report.warnings
        document = await document_by_source(collection.store, "plan.pdf")
        assert document is not None and "+ocr:" in (document.extractor or "")
        response = await collection.search("girder spacing metres", mode="bm25", top_k=3)
        top = response.results[0]
        assert top.citation.page == 2
        assert WORDS in top.content
        rects = [r for r in top.citation.rects if r.page == 2]
        assert rects
        for rect in rects:
            assert 0 <= rect.x0 < rect.x1 <= BIG[0] and 0 <= rect.y0 < rect.y1 <= BIG[1]
        # Where the words were typeset, at the page's scale (not 300/180 of it).
        x0, y0, x1, y1 = _typeset_box(WORDS)
        assert min(r.x0 for r in rects) == pytest.approx(x0, abs=TOLERANCE)
        assert max(r.x1 for r in rects) == pytest.approx(x1, abs=TOLERANCE)
        assert min(r.y0 for r in rects) == pytest.approx(y0, abs=TOLERANCE)
        assert max(r.y1 for r in rects) == pytest.approx(y1, abs=TOLERANCE)
        ocr_engine.cache_clear()  # checked by rendering and recognising again
        checked = await collection.verify(top)
        assert checked.verification == "verified", checked.detail
        assert (await collection.verify_all()).ok


async def test_a_page_too_large_even_at_the_lowest_resolution_is_left_unread() -> None:
    real_engine()
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format="A4")
    pdf.set_font("helvetica", size=12)
    pdf.add_page()
    pdf.text(72, 100, TEXT_PAGE)
    pdf.add_page(format=(7000, 200))  # 7,000 pixels across at 72 dpi
    pdf.rect(100, 50, 500, 100, style="F")  # drawn, no text: a scanned page
    extraction = (
        await pdf_extractor().with_policy(ocr_policy("required")).extract_bytes(bytes(pdf.output()))
    )
    assert extraction.text.startswith(TEXT_PAGE)
    assert extraction.unread is not None
    assert extraction.unread.startswith("page 2 has no text layer and was not read")
    assert "too large to recognise" in extraction.unread
