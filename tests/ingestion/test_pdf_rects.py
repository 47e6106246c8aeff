"""PDF citations carry the rectangles their span covers, and those lie over its glyphs.

The PDFs are generated line by line at known places (evals/pdf_layouts.py): plain
pages, pages under /Rotate 90/180/270 with a line drawn upright, two columns,
ligatures and hyphenated words. A rectangle must cover the span's glyphs to within
``TOLERANCE`` points, run past them by no more than that along the line and by no
more than one line across it.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evals.pdf_layouts import DEJAVU, LAYOUTS, Layout, judge, layout, run_offsets
from groundkit import Collection
from groundkit.contracts import (
    GEOMETRY_KEY,
    PAGE_STARTS_KEY,
    Citation,
    PageRect,
    citation_for,
    page_frame_at,
    rects_at,
)
from groundkit.errors import StorageError
from groundkit.extraction import Extraction
from groundkit.extraction.pdf import pdf_extractor
from groundkit.extraction.pdf_legacy import pypdf_extractor
from groundkit.utils.geometry import decode_page
from scripts.extra_smoke import one_page_pdf
from tests.support import write_tree

pytest.importorskip("pypdfium2")

_SHAPED = pytest.mark.skipif(not DEJAVU.exists(), reason="DejaVu Sans is not installed")
_CASES = [pytest.param(name, marks=_SHAPED) if name == "ligatures" else name for name in LAYOUTS]


def _extract(pdf: Layout) -> Extraction:
    import asyncio

    return asyncio.run(pdf_extractor().extract_bytes(pdf.data))


def _metadata(extraction: Extraction) -> dict[str, Any]:
    assert extraction.geometry is not None
    return {PAGE_STARTS_KEY: list(extraction.page_starts), GEOMETRY_KEY: extraction.geometry}


def _tuples(rects: tuple[PageRect, ...]) -> list[tuple[int, float, float, float, float]]:
    return [(r.page, r.x0, r.y0, r.x1, r.y1) for r in rects]


_EXTRACTED: dict[str, tuple[Layout, Extraction, list[int]]] = {}


def _case(name: str) -> tuple[Layout, Extraction, list[int]]:
    if name not in _EXTRACTED:
        pdf = layout(name)
        extraction = _extract(pdf)
        _EXTRACTED[name] = (
            pdf,
            extraction,
            run_offsets(extraction.text, extraction.page_starts, pdf.runs),
        )
    return _EXTRACTED[name]


@pytest.mark.parametrize("name", _CASES)
def test_every_line_and_word_is_boxed_where_it_was_drawn(name: str) -> None:
    pdf, extraction, offsets = _case(name)
    metadata = _metadata(extraction)
    checked = 0
    for run, at in zip(pdf.runs, offsets, strict=True):
        spans = [(at, at + len(run.text))]
        position = 0
        for word in run.text.split(" "):
            spans.append((at + position, at + position + len(word)))
            position += len(word) + 1
        for start, end in spans:
            rects = _tuples(rects_at(metadata, start, end))
            assert len(rects) == 1, (run.text, extraction.text[start:end], rects)
            verdict = judge(start, end, rects, pdf.runs, offsets)
            assert verdict.ok, (extraction.text[start:end], verdict, rects, run)
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("name", _CASES)
def test_spans_across_lines_get_one_rectangle_per_line(name: str) -> None:
    pdf, extraction, offsets = _case(name)
    metadata = _metadata(extraction)
    rng = random.Random(name)
    for _ in range(60):
        first = rng.randrange(len(pdf.runs) - 3)
        last = first + rng.randrange(1, 3)
        if pdf.runs[first].page != pdf.runs[last].page:
            continue
        start = offsets[first] + rng.randrange(len(pdf.runs[first].text) - 1)
        end = offsets[last] + rng.randrange(1, len(pdf.runs[last].text))
        rects = _tuples(rects_at(metadata, start, end))
        verdict = judge(start, end, rects, pdf.runs, offsets)
        assert verdict.ok, (extraction.text[start:end], verdict, rects)
        # one per run the span touches: never one box over two lines or two columns
        assert len(rects) == sum(
            1
            for run, at in zip(pdf.runs, offsets, strict=True)
            if max(start, at) < min(end, at + len(run.text))
            and extraction.text[max(start, at) : min(end, at + len(run.text))].strip()
        )


def test_hyphenated_words_are_two_fragments_and_the_text_keeps_the_hyphen() -> None:
    pdf, extraction, offsets = _case("hyphenation")
    run, after = pdf.runs[0], pdf.runs[1]
    assert run.text.endswith("-")
    start = offsets[0] + run.text.rindex(" ") + 1
    end = offsets[1] + after.text.index(" ")
    word = extraction.text[start:end]
    assert word.count("-\n") == 1  # the end-of-line hyphen pdfium joins is a hyphen again
    rects = _tuples(rects_at(_metadata(extraction), start, end))
    assert len(rects) == 2 and rects[0][2] > rects[1][2]  # the second line is lower
    assert judge(start, end, rects, pdf.runs, offsets).ok


def test_rotated_pages_keep_their_frames_and_unrotated_coordinates() -> None:
    pdf, extraction, offsets = _case("rotated")
    metadata = _metadata(extraction)
    frames = [page_frame_at(metadata, page) for page in (1, 2, 3, 4)]
    assert [f.rotation for f in frames if f is not None] == [90, 180, 270, 0]
    assert all(f is not None and (f.x1, f.y1) == (595.0, 842.0) for f in frames)
    assert page_frame_at(metadata, 5) is None and page_frame_at({}, 1) is None
    # The same line on an unrotated and a rotated page has the same rectangle.
    upright = [r for r in pdf.runs if r.angle == 90]
    assert len(upright) == 4
    for run in upright:
        at = offsets[pdf.runs.index(run)]
        [rect] = _tuples(rects_at(metadata, at, at + len(run.text)))
        assert rect[4] - rect[2] > rect[3] - rect[1]  # taller than wide: it runs up the page


# -- invariants over random spans ----------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(["two columns", "rotated", "hyphenation"]))
def test_random_spans_rectangles_are_in_the_page_ordered_and_hold_every_box(
    data: st.DataObject, name: str
) -> None:
    _, extraction, _ = _case(name)
    metadata = _metadata(extraction)
    size = len(extraction.text)
    start = data.draw(st.integers(0, size - 1), label="start")
    end = data.draw(st.integers(start, min(size, start + 400)), label="end")
    citation = citation_for(
        document_id="d",
        chunk_id="c",
        source="x.pdf",
        source_class="extracted",
        extractor=pdf_extractor().identity,
        start_offset=start,
        end_offset=end,
        metadata=metadata,
        version=1,
    )
    rects = citation.rects
    assert [r.page for r in rects] == sorted(r.page for r in rects)
    if rects:
        assert citation.page is not None and citation.end_page is not None
        assert citation.page <= rects[0].page and rects[-1].page <= citation.end_page
    for rect in rects:
        frame = page_frame_at(metadata, rect.page)
        assert frame is not None
        assert frame.x0 <= rect.x0 < rect.x1 <= frame.x1
        assert frame.y0 <= rect.y0 < rect.y1 <= frame.y1
    # every boxed character of the span lies inside one of its rectangles
    geometry = metadata[GEOMETRY_KEY]
    for page in range(citation.page or 1, (citation.end_page or 0) + 1):
        lines = decode_page(geometry["pages"][page - 1][5])
        for offsets, boxes in zip(lines.offsets, lines.boxes, strict=True):
            for offset, (x0, y0, x1, y1) in zip(offsets, boxes, strict=True):
                if start <= offset < end and x0 < x1 and y0 < y1:
                    assert any(
                        r.page == page
                        and r.x0 <= x0 / 100
                        and r.y0 <= y0 / 100
                        and x1 / 100 <= r.x1
                        and y1 / 100 <= r.y1
                        for r in rects
                    ), (offset, extraction.text[start:end])
    # what a citation says is what it reads back as
    again = Citation.model_validate_json(citation.model_dump_json())
    assert again == citation
    if rects:
        assert citation.to_dict()["rects"] == [
            [r.page, r.x0, r.y0, r.x1, r.y1] for r in citation.rects
        ]
    else:
        assert "rects" not in citation.to_dict()


def test_same_bytes_give_the_same_geometry_in_another_process(tmp_path: Path) -> None:
    pdf = layout("two columns")
    path = tmp_path / "two.pdf"
    path.write_bytes(pdf.data)
    code = (
        "import asyncio, json, sys; from pathlib import Path;"
        "from groundkit.extraction.pdf import pdf_extractor;"
        "e = asyncio.run(pdf_extractor().extract_file(Path(sys.argv[1])));"
        "print(json.dumps([e.text, e.geometry]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    _, extraction, _ = _case("two columns")
    assert json.loads(done.stdout) == [extraction.text, extraction.geometry]


# -- end to end ----------------------------------------------------------------------


async def test_search_results_carry_rectangles_and_still_verify(tmp_path: Path) -> None:
    base = tmp_path / "corpus"
    names = [name for name in LAYOUTS if name != "ligatures" or DEJAVU.exists()]
    write_tree(base, {name.replace(" ", "-") + ".pdf": layout(name).data for name in names})
    async with Collection.open(tmp_path / "index", base_dir=base) as col:
        report = await col.ingest(base)
        assert len(report.added) == len(names) and not report.failed
        response = await col.search("harbour lantern marble", top_k=10)
        assert response.results
        for result in response.results:
            citation = result.citation
            assert citation.rects and citation.extractor == pdf_extractor().identity
            assert citation.page is not None and citation.rects[0].page >= citation.page
            assert result.to_dict()["citation"]["rects"] == citation.to_dict()["rects"]
            checked = await col.verify(result)
            assert checked.verification == "verified", checked.detail
            fetched = await col.fetch_chunk(result.chunk_id)
            assert fetched.citation.rects == citation.rects
            annotation = result.to_annotation()
            assert annotation["target"]["groundkit:rects"] == citation.to_dict()["rects"]
        assert (await col.verify_all()).ok


async def test_damaged_geometry_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "corpus"
    write_tree(base, {"plain.pdf": layout("plain").data})
    async with Collection.open(tmp_path / "index", base_dir=base) as col:
        await col.ingest(base)
        [hit, *_] = (await col.search("harbour")).results
    metadata = dict(hit.metadata)
    geometry = json.loads(json.dumps(metadata[GEOMETRY_KEY]))
    entry = geometry["pages"][(hit.citation.page or 1) - 1]
    entry[5] = entry[5][:-8] + ("A" * 8 if not entry[5].endswith("A" * 8) else "B" * 8)
    with pytest.raises(StorageError, match="damaged geometry"):
        rects_at({**metadata, GEOMETRY_KEY: geometry}, hit.start_offset, hit.end_offset)
    with pytest.raises(StorageError, match="damaged geometry"):
        rects_at({GEOMETRY_KEY: geometry}, 0, 5)  # no page starts to place it
    # Every way to dump the result says so with groundkit's error, not pydantic's wrapper.
    broken = hit.model_copy(update={"metadata": {**metadata, GEOMETRY_KEY: geometry}})
    for dump in (
        lambda: broken.to_dict(full=True),
        broken.model_dump,
        lambda: broken.model_dump(mode="json"),
        broken.model_dump_json,
    ):
        with pytest.raises(StorageError, match="damaged geometry"):
            dump()


def test_damaged_geometry_in_a_stored_row_is_refused(tmp_path: Path) -> None:
    from groundkit.storage._rows import parse_metadata

    _, extraction, _ = _case("plain")
    good = _metadata(extraction)
    assert parse_metadata(json.dumps(good))[GEOMETRY_KEY] == good[GEOMETRY_KEY]
    for broken in (
        {**good, GEOMETRY_KEY: {"format": 2, "pages": good[GEOMETRY_KEY]["pages"]}},
        {**good, GEOMETRY_KEY: {"format": 1, "pages": good[GEOMETRY_KEY]["pages"][:-1]}},
        {**good, GEOMETRY_KEY: {"format": 1, "pages": [[0, 0, 1, 1, 45, ""]] * 3}},
        {GEOMETRY_KEY: good[GEOMETRY_KEY]},  # geometry without page starts
    ):
        with pytest.raises(StorageError, match="geometry"):
            parse_metadata(json.dumps(broken))


async def test_documents_ingested_with_pypdf_still_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index built before pdfium: its PDF documents name pypdf, and verify where it is."""
    import groundkit.ingestion.extracted as extracted

    base = tmp_path / "corpus"
    write_tree(base, {"plain.pdf": layout("plain").data})
    with monkeypatch.context() as patch:
        patch.setattr(extracted, "pdf_extractor", pypdf_extractor)
        async with Collection.open(tmp_path / "index", base_dir=base) as col:
            await col.ingest(base)
    async with Collection.open(tmp_path / "index", base_dir=base) as col:
        [hit, *_] = (await col.search("harbour")).results
        assert hit.citation.extractor == pypdf_extractor().identity
        assert hit.citation.rects == () and hit.citation.page is not None
        assert (await col.verify(hit)).verification == "verified"
        # The next ingest reads the file with pdfium: new text, so a new version with rectangles.
        again = await col.ingest(base)
        assert again.updated == ["plain.pdf"], again
        [hit, *_] = (await col.search("harbour")).results
        assert hit.citation.extractor == pdf_extractor().identity and hit.citation.rects


def test_a_documents_large_metadata_is_parsed_once_and_never_shared() -> None:
    from groundkit.storage import _rows

    _, extraction, _ = _case("plain")
    raw = json.dumps({**_metadata(extraction), "pages": 3})
    assert len(raw) >= _rows._MEMO_MIN_CHARS
    first = _rows._document_metadata("d1", "h", 1, raw)
    second = _rows._document_metadata("d1", "h", 1, raw)
    assert first == second and first is not second
    assert second[GEOMETRY_KEY] is first[GEOMETRY_KEY]  # parsed once
    first["pages"] = -1  # a caller's edit stays its own
    assert _rows._document_metadata("d1", "h", 1, raw)["pages"] == 3
    # Another text under the same key (a rewritten row) is parsed again, and checked.
    changed = json.dumps({**_metadata(extraction), "pages": 3, "x": 1})
    assert _rows._document_metadata("d1", "h", 1, changed)["x"] == 1
    with pytest.raises(StorageError):
        _rows._document_metadata("d1", "h", 1, raw.replace('"format": 1', '"format": 9'))


async def test_extractions_from_many_threads_are_those_of_one() -> None:
    """pdfium is not thread-safe: the extractor serialises it, so concurrent runs (each in
    a worker thread) give exactly what one run at a time gives."""
    import asyncio

    datas = [layout(name).data for name in ("plain", "two columns", "hyphenation")] * 3
    alone = [await pdf_extractor().extract_bytes(data) for data in datas[:3]]
    together = await asyncio.gather(*(pdf_extractor().extract_bytes(d) for d in datas))
    assert list(together) == alone * 3


async def test_text_drawn_far_off_the_page_is_indexed_without_a_box(tmp_path: Path) -> None:
    """A run placed 10^8 points away read as text but its box overflowed the encoding:
    the whole file failed with a bare OverflowError. Now such a character has no box."""
    far = one_page_pdf(
        "BT /F1 12 Tf 1 0 0 1 100000000 800 Tm (Faraway lighthouse keeper) Tj ET "
        "BT /F1 12 Tf 1 0 0 1 40 700 Tm (Nearby harbour crane) Tj ET"
    )
    base = tmp_path / "corpus"
    write_tree(base, {"far.pdf": far})
    async with Collection.open(tmp_path / "index", base_dir=base) as col:
        report = await col.ingest(base)
        assert report.added == ["far.pdf"] and not report.failed
        [lighthouse] = (await col.search("faraway lighthouse", top_k=1)).results
        assert "Faraway lighthouse keeper" in lighthouse.content
        assert (await col.verify(lighthouse)).verification == "verified"
        assert (await col.verify_all()).ok
        # The one line with boxes is the near one, on the page.
        [rect] = lighthouse.citation.rects
        assert 0 < rect.x0 < rect.x1 < 595 and 690 < rect.y0 < rect.y1 < 720


@pytest.mark.parametrize("name", [n for n in LAYOUTS if n != "ligatures" or DEJAVU.exists()])
async def test_a_text_only_read_gives_the_text_of_the_whole_extraction(name: str) -> None:
    """Citation checks read a PDF without its boxes; the text must be the very same."""
    data = layout(name).data
    whole = await pdf_extractor().extract_bytes(data)
    assert await pdf_extractor().extract_text(data) == whole.text
    far = one_page_pdf("BT /F1 12 Tf 1 0 0 1 100000000 800 Tm (Faraway) Tj ET")
    whole_far = await pdf_extractor().extract_bytes(far)
    assert await pdf_extractor().extract_text(far) == whole_far.text
