"""A PDF span names the page it starts on and the page it ends on."""

from __future__ import annotations

from pathlib import Path

from groundkit import Citation, Collection, RetrievalResult
from tests.sources import make_pdf


async def test_a_chunk_crossing_page_breaks_names_both_pages(tmp_path: Path) -> None:
    base = tmp_path / "docs"
    base.mkdir()
    pages = [
        "Solar panels turn sunlight into power.",
        "Wind turbines turn moving air into power.",
        "Tides move water twice a day.",
    ]
    (base / "energy.pdf").write_bytes(make_pdf(pages))
    async with Collection.open(tmp_path / "index", base_dir=base) as col:
        await col.ingest(base)
        hits = (await col.search("solar wind tides", 10)).results
        assert hits
        record_starts: list[int] = hits[0].metadata["page_starts"]
        for hit in hits:
            c = hit.citation
            assert c.page is not None and c.end_page is not None and c.end_page >= c.page
            # The end page is the page of the span's last character.
            last = c.end_offset - 1
            assert record_starts[c.end_page - 1] <= last
            assert c.end_page == len(record_starts) or last < record_starts[c.end_page]
            # Chunks never cross a page start, so a chunk names one page.
            assert c.end_page == c.page and c.pages == f"p. {c.page}"
            fetched = await col.fetch_chunk(hit.chunk_id)
            assert fetched.citation == c
            # Payload stays small: no page list in the citation itself.
            assert set(c.model_dump()) >= {"page", "end_page"}
            assert "page_starts" not in c.model_dump()


def test_a_span_crossing_a_page_break_names_both_pages() -> None:
    result = RetrievalResult(
        content="x" * 20,
        score=1.0,
        document_id="d",
        chunk_id="c",
        chunk_index=0,
        source="a.pdf",
        source_class="extracted",
        extractor="pdf",
        start_offset=5,
        end_offset=25,
        metadata={"page_starts": [0, 10, 20, 30]},
    )
    assert (result.citation.page, result.citation.end_page) == (1, 3)
    assert result.citation.pages == "pp. 1-3"
    edge = result.model_copy(update={"start_offset": 10, "end_offset": 20, "content": "y" * 10})
    assert (edge.citation.page, edge.citation.end_page) == (2, 2)


def test_single_page_and_no_page_citations() -> None:
    one = Citation(
        document_id="d",
        chunk_id="c",
        source="a.pdf",
        source_class="extracted",
        extractor="x",
        start_offset=0,
        end_offset=5,
        page=2,
        end_page=2,
    )
    assert one.pages == "p. 2"
    plain = Citation(
        document_id="d",
        chunk_id="c",
        source="a.txt",
        source_class="text",
        extractor=None,
        start_offset=0,
        end_offset=5,
    )
    assert plain.pages is None and plain.end_page is None
