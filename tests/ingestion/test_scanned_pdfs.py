"""Scanned PDFs end to end: recognised at ingest, cited with rectangles, verified by
recognising again with the same engine, and refused (never silently re-read) by another."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evals.scanned import scanned_pdf, text_pdf
from groundkit import Collection, IngestConfig
from groundkit.contracts import (
    GEOMETRY_KEY,
    PAGE_STARTS_KEY,
    PageRect,
    RetrievalResult,
    page_frame_at,
    rects_at,
)
from groundkit.extraction import pdf_extractor
from groundkit.extraction.base import Extraction
from groundkit.extraction.ocr import ocr_engine
from groundkit.extraction.pdf_ocr import OCR_OFF, DeviceToPage, ocr_policy
from groundkit.testing.conformance.helpers import document_by_source
from groundkit.utils.geometry import decode_page
from tests.ocr_support import mixed_pdf, real_engine
from tests.support import write_tree

PAGES = (
    "Lighthouses once burned whale oil.\nKeepers trimmed the wicks every night.\n\n"
    "Fresnel lenses threw the beam much further.",
    "Foghorns sound when the light cannot be seen.\nEach station had its own rhythm.",
)
TOLERANCE = 3.0  # points: tesseract's ink boxes against pdfium's tight glyph boxes
# A page's typeset characters and their boxes.
Glyphs = list[tuple[str, tuple[float, float, float, float]]]


@pytest.fixture
def engine_cache() -> Iterator[None]:
    """Engines made in a test (another PATH, a changed identity) do not outlive it."""
    ocr_engine.cache_clear()
    yield
    ocr_engine.cache_clear()


def _without_tesseract(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "no-programs"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(empty))
    ocr_engine.cache_clear()


async def _search(collection: Collection, query: str) -> list[RetrievalResult]:
    response = await collection.search(query, mode="bm25", top_k=3)
    assert response.results, query
    return list(response.results)


async def test_a_scanned_pdf_is_recognised_searched_and_verified(
    tmp_path: Path, engine_cache: None
) -> None:
    engine = real_engine()
    base = tmp_path / "corpus"
    data = scanned_pdf(PAGES, size=14)
    write_tree(base, {"scan.pdf": data})
    read = await pdf_extractor().with_policy(ocr_policy("auto")).extract_bytes(data)
    assert read.text == "\n\f\n".join(PAGES)
    async with Collection.open(tmp_path / "index", base_dir=base) as collection:
        report = await collection.ingest(base)
        assert report.added == ["scan.pdf"]
        document = await document_by_source(collection.store, "scan.pdf")
        assert document is not None
        assert document.extractor == (
            f"{pdf_extractor().identity}+ocr:groundkit-ocr/1+{engine.identity}"
        )
        ocr_engine.cache_clear()  # checked by recognising again, not from memory
        for query, page in (("Fresnel lenses beam", 1), ("foghorns rhythm station", 2)):
            results = await _search(collection, query)
            top = results[0]
            assert top.citation.page == page
            assert top.citation.rects and {r.page for r in top.citation.rects} == {page}
            for result in results:
                checked = await collection.verify(result)
                assert checked.verification == "verified", checked.detail
        assert (await collection.verify_all()).ok


def _true_boxes(scan: bytes) -> dict[int, Glyphs]:
    """Per page, the characters of the typeset text and their boxes where the scan
    shows them (in the scanned page's user space), from the text layer of the PDF the
    scan was made from: a box goes to the shown page through pdfium's transforms."""
    import pypdfium2

    typeset = pypdfium2.PdfDocument(text_pdf(PAGES, size=14))
    scanned = pypdfium2.PdfDocument(scan)
    pages: dict[int, Glyphs] = {}
    try:
        for index in range(len(typeset)):
            page, shown = typeset[index], scanned[index]
            width = 2000
            height = round(width * page.get_height() / page.get_width())
            source = DeviceToPage.from_corners(
                pypdfium2.PdfPosConv(page, (0, 0, width, height, 0)).to_page, width, height
            )
            target = DeviceToPage.from_corners(
                pypdfium2.PdfPosConv(shown, (0, 0, width, height, 0)).to_page, width, height
            )
            textpage = page.get_textpage()
            chars = []
            for i in range(textpage.count_chars()):
                char = textpage.get_text_range(i, 1)
                if not char.strip():
                    continue
                x0, y0, x1, y1 = textpage.get_charbox(i, loose=False)
                # The typeset page is upright: pixel x follows page x, pixel y page y.
                corners = [
                    target(
                        (x - source.origin[0]) / source.per_x[0],
                        (y - source.origin[1]) / source.per_y[1],
                    )
                    for x, y in ((x0, y0), (x1, y1))
                ]
                xs, ys = [c[0] for c in corners], [c[1] for c in corners]
                chars.append((char, (min(xs), min(ys), max(xs), max(ys))))
            pages[index + 1] = chars
    finally:
        scanned.close()
        typeset.close()
    return pages


def _assert_over_words(rect: PageRect, truth: Glyphs) -> None:
    """``rect`` covers typeset glyphs, and the glyphs under it fill it to the tolerance."""
    under = [
        box
        for _, box in truth
        if rect.x0 - TOLERANCE <= (box[0] + box[2]) / 2 <= rect.x1 + TOLERANCE
        and rect.y0 - TOLERANCE <= (box[1] + box[3]) / 2 <= rect.y1 + TOLERANCE
    ]
    assert under, rect
    union = (
        min(b[0] for b in under),
        min(b[1] for b in under),
        max(b[2] for b in under),
        max(b[3] for b in under),
    )
    assert union == pytest.approx((rect.x0, rect.y0, rect.x1, rect.y1), abs=TOLERANCE), rect


@pytest.mark.parametrize("rotate", [0, 90, 180, 270])
async def test_rectangles_of_an_ocr_citation_lie_over_the_words(
    tmp_path: Path, rotate: int
) -> None:
    real_engine()
    base = tmp_path / "corpus"
    scan = scanned_pdf(PAGES, size=14, rotate=rotate)
    write_tree(base, {"scan.pdf": scan})
    truth = _true_boxes(scan)
    async with Collection.open(tmp_path / "index", base_dir=base) as collection:
        await collection.ingest(base)
        for query in ("whale oil wicks", "Fresnel lenses", "foghorns station rhythm"):
            for result in await _search(collection, query):
                assert result.citation.rects
                for rect in result.citation.rects:
                    _assert_over_words(rect, truth[rect.page])
                assert (await collection.verify(result)).verification == "verified"


async def test_another_ocr_engine_makes_the_citations_drifted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine_cache: None
) -> None:
    engine = real_engine()
    base = tmp_path / "corpus"
    write_tree(base, {"scan.pdf": scanned_pdf(PAGES, size=14)})
    async with Collection.open(tmp_path / "index", base_dir=base) as collection:
        await collection.ingest(base)
        (result, *_) = await _search(collection, "whale oil")
        recorded = engine.identity
        # The engine here now reports another identity (as after an upgrade): it is the
        # identity comparison under test, the recognition itself is real.
        changed = recorded.replace("tesseract/", "tesseract/99.", 1)
        monkeypatch.setattr(engine, "identity", changed)
        checked = await collection.verify(result)
        assert checked.verification == "drifted"
        assert recorded in checked.detail and changed in checked.detail


async def test_without_tesseract_the_citations_are_unresolvable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine_cache: None
) -> None:
    real_engine()
    base = tmp_path / "corpus"
    write_tree(base, {"scan.pdf": scanned_pdf(PAGES, size=14)})
    async with Collection.open(tmp_path / "index", base_dir=base) as collection:
        await collection.ingest(base)
        (result, *_) = await _search(collection, "whale oil")
        _without_tesseract(monkeypatch, tmp_path)
        checked = await collection.verify(result)
        assert checked.verification == "unresolvable"
        assert "apt-get install tesseract-ocr" in checked.detail


async def test_without_tesseract_a_scanned_pdf_fails_naming_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine_cache: None
) -> None:
    _without_tesseract(monkeypatch, tmp_path)
    base = tmp_path / "corpus"
    write_tree(base, {"ok.md": "Plain text.\n", "scan.pdf": scanned_pdf(PAGES)})
    for mode in ("auto", "required"):
        async with Collection.open(
            tmp_path / f"index-{mode}", base_dir=base, ingest=IngestConfig(ocr=mode)
        ) as collection:
            report = await collection.ingest(base)
            assert report.added == ["ok.md"]
            (failed,) = report.failed
            assert "no text layer" in failed.reason
            assert "pip install groundkit[ocr]" in failed.reason
            assert "apt-get install tesseract-ocr" in failed.reason


async def test_ocr_off_refuses_a_scanned_pdf_saying_so(tmp_path: Path) -> None:
    base = tmp_path / "corpus"
    write_tree(base, {"scan.pdf": scanned_pdf(PAGES)})
    async with Collection.open(
        tmp_path / "index", base_dir=base, ingest=IngestConfig(ocr="off")
    ) as collection:
        (failed,) = (await collection.ingest(base)).failed
        assert "no extractable text" in failed.reason and "OCR is off" in failed.reason


async def test_a_mixed_pdf_without_tesseract_keeps_its_text_pages_and_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine_cache: None
) -> None:
    _without_tesseract(monkeypatch, tmp_path)
    base = tmp_path / "corpus"
    write_tree(base, {"mixed.pdf": mixed_pdf(PAGES[0], PAGES[1])})
    async with Collection.open(tmp_path / "index-auto", base_dir=base) as collection:
        report = await collection.ingest(base)
        assert report.added == ["mixed.pdf"]
        (warning,) = report.warnings
        assert warning.source == "mixed.pdf"
        assert warning.reason.startswith("page 2 has no text layer and was not read: ")
        assert "apt-get install tesseract-ocr" in warning.reason
        document = await document_by_source(collection.store, "mixed.pdf")
        assert document is not None and document.extractor == pdf_extractor().identity
        results = await _search(collection, "Fresnel lenses")
        assert (await collection.verify(results[0])).verification == "verified"
    async with Collection.open(
        tmp_path / "index-required", base_dir=base, ingest=IngestConfig(ocr="required")
    ) as collection:
        (failed,) = (await collection.ingest(base)).failed
        assert "page 2 has no text layer" in failed.reason


async def test_a_mixed_pdf_with_tesseract_recognises_only_the_scanned_page() -> None:
    real_engine()
    extraction = (
        await pdf_extractor()
        .with_policy(ocr_policy("auto"))
        .extract_bytes(mixed_pdf(PAGES[0], PAGES[1]))
    )
    assert extraction.identity is not None and "+ocr:" in extraction.identity
    first, second = extraction.text.split("\n\f\n")
    assert "Fresnel" in first and "Foghorns" in second


async def test_a_page_too_large_to_render_for_ocr_is_left_unread_not_rendered() -> None:
    # Pages too large for 300 dpi are read at less (tests/test_ocr_large_pages.py);
    # this one is too large even at 72 dpi (adr/0098-large-pages-rendered-to-fit.md).
    real_engine()
    from fpdf import FPDF

    pdf = FPDF(unit="pt", format=(8000, 2000))  # 8,000 pixels across at 72 dpi
    pdf.add_page()
    pdf.rect(100, 100, 500, 300, style="F")  # drawn, no text: a scanned page
    extractor = pdf_extractor().with_policy(ocr_policy("auto"))
    extraction = await extractor.extract_bytes(bytes(pdf.output()))
    assert extraction.text.strip() == ""
    assert extraction.unread is not None and "too large to recognise" in extraction.unread


async def test_text_and_blank_pages_keep_the_plain_identity() -> None:
    real_engine()
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=12)
    pdf.add_page()
    pdf.cell(text="Only this page has text.")
    pdf.add_page()  # blank: nothing drawn, nothing to recognise
    extraction = (
        await pdf_extractor().with_policy(ocr_policy("auto")).extract_bytes(bytes(pdf.output()))
    )
    assert extraction.identity in (None, pdf_extractor().identity)
    assert extraction.unread is None


async def test_recognition_is_the_same_every_run(engine_cache: None) -> None:
    real_engine()
    data = scanned_pdf(PAGES, size=11)
    first = await pdf_extractor().with_policy(ocr_policy("required")).extract_bytes(data)
    ocr_engine.cache_clear()  # a new engine: nothing remembered, tesseract runs again
    second = await pdf_extractor().with_policy(ocr_policy("required")).extract_bytes(data)
    assert (first.text, first.geometry, first.identity) == (
        second.text,
        second.geometry,
        second.identity,
    )


async def test_the_plain_extractor_never_recognises() -> None:
    extraction = await pdf_extractor().with_policy(OCR_OFF).extract_bytes(scanned_pdf(PAGES))
    assert extraction.text.strip() == ""
    assert extraction.unread is not None and "OCR is off" in extraction.unread


@cache
def _recognised(rotate: int) -> Extraction:
    extractor = pdf_extractor().with_policy(ocr_policy("required"))
    return asyncio.run(extractor.extract_bytes(scanned_pdf(PAGES, size=14, rotate=rotate)))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), rotate=st.sampled_from([0, 90, 180, 270]))
def test_random_spans_of_a_scan_have_rectangles_in_the_page_holding_every_box(
    data: st.DataObject, rotate: int
) -> None:
    real_engine()
    extraction = _recognised(rotate)
    assert extraction.geometry is not None
    metadata = {PAGE_STARTS_KEY: list(extraction.page_starts), GEOMETRY_KEY: extraction.geometry}
    start = data.draw(st.integers(0, len(extraction.text) - 1), label="start")
    end = data.draw(st.integers(start, len(extraction.text)), label="end")
    rects = rects_at(metadata, start, end)
    assert [r.page for r in rects] == sorted(r.page for r in rects)
    for rect in rects:
        frame = page_frame_at(metadata, rect.page)
        assert frame is not None and frame.rotation == rotate
        assert frame.x0 <= rect.x0 < rect.x1 <= frame.x1
        assert frame.y0 <= rect.y0 < rect.y1 <= frame.y1
    # Every recognised character of the span lies inside one of its rectangles.
    for page, page_start in enumerate(extraction.page_starts, start=1):
        lines = decode_page(extraction.geometry["pages"][page - 1][5])
        for offsets, boxes in zip(lines.offsets, lines.boxes, strict=True):
            for offset, (x0, y0, x1, y1) in zip(offsets, boxes, strict=True):
                if start <= offset < end:
                    assert offset >= page_start
                    assert any(
                        r.page == page
                        and r.x0 <= x0 / 100 <= x1 / 100 <= r.x1
                        and r.y0 <= y0 / 100 <= y1 / 100 <= r.y1
                        for r in rects
                    ), (offset, extraction.text[start:end])


async def test_scans_read_at_once_in_threads_are_those_read_one_by_one(
    engine_cache: None,
) -> None:
    real_engine()
    datas = [
        scanned_pdf([page], size=14, rotate=rotate)
        for page, rotate in zip(PAGES, (0, 90), strict=True)
    ]
    datas.append(mixed_pdf(PAGES[1], PAGES[0]))
    extractor = pdf_extractor().with_policy(ocr_policy("required"))
    # Each extraction renders under the pdfium lock and recognises outside it, so
    # their steps interleave here.
    together = await asyncio.gather(*(extractor.extract_bytes(d) for d in datas * 2))
    ocr_engine.cache_clear()  # a new engine: each page recognised again
    alone = [
        await pdf_extractor().with_policy(ocr_policy("required")).extract_bytes(d) for d in datas
    ]
    for got, want in zip(together, alone * 2, strict=True):
        assert (got.text, got.geometry, got.identity) == (want.text, want.geometry, want.identity)
