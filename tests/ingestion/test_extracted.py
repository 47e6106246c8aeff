"""PDF and HTML in a mixed folder: routed, stored as extracted text, verified by re-extraction."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from groundkit import (
    ChunkingConfig,
    Collection,
    ConfigurationError,
    IngestConfig,
    RetrievalError,
    resolve_citation,
)
from groundkit.extraction import active_extractors, html_extractor, pdf_extractor
from groundkit.ingestion import LoaderProtocol
from groundkit.ingestion.dispatch import RoutingLoader
from groundkit.ingestion.extracted import (
    DocxLoader,
    EpubLoader,
    HtmlLoader,
    PdfLoader,
    PptxLoader,
)
from groundkit.ingestion.files import FileLoader
from groundkit.testing.conformance.helpers import document_by_source, document_sources
from tests.sources import HTML_PAGE, PAGES, image_only_pdf, make_pdf
from tests.support import assert_all_verify, write_tree

CHUNKS = ChunkingConfig(max_chars=120, overlap_chars=0)


def mixed_tree(root: Path) -> None:
    write_tree(
        root,
        {
            "notes.md": "Plain notes about tea.\n\nGreen tea likes cooler water.\n",
            "energy/report.pdf": make_pdf(),
            "coffee/guide.html": HTML_PAGE.encode("cp1252"),
            "coffee/legacy.htm": b"<html><body><p>Moka pots brew on a stove.</p></body></html>",
            "images/photo.png": b"\x89PNG\r\n\x1a\n",
            "data/table.csv": "a,b\n1,2\n",
        },
    )


@pytest.fixture
async def mixed(tmp_path: Path) -> AsyncIterator[Collection]:
    base = tmp_path / "corpus"
    mixed_tree(base)
    async with Collection.open(tmp_path / "index", base_dir=base, chunking=CHUNKS) as col:
        yield col


def _clear_caches() -> None:
    for cached in (pdf_extractor, html_extractor, active_extractors):
        cached.cache_clear()


async def _chunks(col: Collection, source: str) -> list[str]:
    return [
        s.chunk_id async for batch in col.store.iter_chunks() for s in batch if s.source == source
    ]


async def test_one_folder_one_collection(mixed: Collection) -> None:
    report = await mixed.ingest(mixed.base_dir)
    assert report.added == [
        "coffee/guide.html",
        "coffee/legacy.htm",
        "energy/report.pdf",
        "notes.md",
    ]
    assert report.failed == []
    assert report.skipped == 2  # the .png and the .csv
    pdf = await document_by_source(mixed.store, "energy/report.pdf")
    html = await document_by_source(mixed.store, "coffee/guide.html")
    notes = await document_by_source(mixed.store, "notes.md")
    assert pdf is not None and html is not None and notes is not None
    assert (pdf.source_class, pdf.extractor) == ("extracted", pdf_extractor().identity)
    assert (html.source_class, html.extractor) == ("extracted", html_extractor().identity)
    assert (notes.source_class, notes.extractor) == ("text", None)
    assert pdf.metadata["pages"] == len(PAGES)
    assert html.fields["title"] == "Café “Guide”"

    # Every chunk of every class verifies: by search, by fetch, and all at once.
    checked = 0
    for query in ("photovoltaic sunlight", "espresso crema", "moka stove", "green tea"):
        response = await mixed.search(query, 5)
        assert response.results, query
        checked += await assert_all_verify(response.results, mixed.base_dir)
        for result in response.results:
            fetched = await mixed.fetch_chunk(result.chunk_id)
            assert fetched.verification == "verified", fetched.detail
            assert fetched.citation == result.citation
    assert checked >= 4
    verify = await mixed.verify_all()
    assert verify.ok and verify.verified == await mixed.store.chunk_count()
    assert not (await mixed.search("scriptword", 5)).results  # script text was never indexed


async def test_pdf_citations_name_their_page(mixed: Collection) -> None:
    await mixed.ingest(mixed.base_dir)
    for number, text in enumerate(PAGES, start=1):
        word = text.split()[0].rstrip(":")
        response = await mixed.search(word, 3)
        hits = [r for r in response.results if r.source == "energy/report.pdf"]
        assert hits, word
        assert hits[0].citation.page == number, (word, hits[0].citation)
        assert (await mixed.fetch_chunk(hits[0].chunk_id)).citation.page == number
    # Every chunk's page is the page its start offset falls in.
    record = await document_by_source(mixed.store, "energy/report.pdf")
    assert record is not None
    starts = record.metadata["page_starts"]
    async for batch in mixed.store.iter_chunks():
        for stored in batch:
            if stored.source == "energy/report.pdf":
                page = stored.citation.page
                assert page is not None
                assert starts[page - 1] <= stored.start_offset
                assert page == len(starts) or stored.start_offset < starts[page]
            else:
                assert stored.citation.page is None


async def test_changed_files_drift(mixed: Collection) -> None:
    await mixed.ingest(mixed.base_dir)
    pdf_ids = await _chunks(mixed, "energy/report.pdf")
    html_ids = await _chunks(mixed, "coffee/guide.html")
    (mixed.base_dir / "energy/report.pdf").write_bytes(make_pdf(["A different first page."]))
    guide = mixed.base_dir / "coffee/guide.html"
    guide.write_bytes(guide.read_bytes().replace(b"Espresso", b"Expresso"))
    pdf_verdicts = {(await mixed.fetch_chunk(i)).verification for i in pdf_ids}
    html_verdicts = {(await mixed.fetch_chunk(i)).verification for i in html_ids}
    assert pdf_verdicts == {"drifted"}
    assert "drifted" in html_verdicts and html_verdicts <= {"drifted", "verified"}
    report = await mixed.verify_all()
    assert not report.ok and report.unresolvable == 0
    assert {p.citation.source for p in report.problems} == {
        "energy/report.pdf",
        "coffee/guide.html",
    }


async def test_corrupted_source_is_unresolvable(mixed: Collection) -> None:
    await mixed.ingest(mixed.base_dir)
    ids = await _chunks(mixed, "energy/report.pdf")
    (mixed.base_dir / "energy/report.pdf").write_bytes(b"%PDF-1.4 truncated")
    result = await mixed.fetch_chunk(ids[0])
    assert result.verification == "unresolvable"
    assert "re-extraction" in result.detail


async def test_other_extractor_identity_is_unresolvable(mixed: Collection, tmp_path: Path) -> None:
    await mixed.ingest(mixed.base_dir)
    ids = await _chunks(mixed, "energy/report.pdf")
    with sqlite3.connect(tmp_path / "index" / "default.sqlite3") as conn:
        conn.execute(
            "UPDATE documents SET extractor = 'pypdf/0.0.1' WHERE source = 'energy/report.pdf'"
        )
    result = await mixed.fetch_chunk(ids[0])
    assert result.verification == "unresolvable"
    assert "pypdf/0.0.1" in result.detail
    assert pdf_extractor().identity in result.detail
    assert result.citation.extractor == "pypdf/0.0.1"
    verify = await mixed.verify_all()
    assert verify.unresolvable == len(ids) and verify.drifted == 0

    # Same text, other extractor: re-ingest takes the document again under the
    # active identity instead of calling it unchanged.
    report = await mixed.ingest(mixed.base_dir)
    assert report.updated == ["energy/report.pdf"]
    record = await document_by_source(mixed.store, "energy/report.pdf")
    assert record is not None and record.extractor == pdf_extractor().identity
    assert (await mixed.verify_all()).ok
    assert (await mixed.ingest(mixed.base_dir)).unchanged == [
        "coffee/guide.html",
        "coffee/legacy.htm",
        "energy/report.pdf",
        "notes.md",
    ]


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("locked.pdf", make_pdf(user_password="s3cret"), "needs a password"),
        ("cut.pdf", make_pdf()[:2000], "not a readable PDF"),
        ("junk.pdf", b"this is not a pdf", "not a readable PDF"),
        ("scan.pdf", image_only_pdf(), "no extractable text"),
        ("empty.html", b"<html><script>x()</script></html>", "no text"),
    ],
)
async def test_bad_files_fail_alone_and_store_nothing(
    tmp_path: Path, name: str, data: bytes, reason: str
) -> None:
    base = tmp_path / "corpus"
    write_tree(base, {"ok.md": "Fine text.\n", f"bad/{name}": data})
    async with Collection.open(tmp_path / "index", base_dir=base) as col:
        report = await col.ingest(base)
        assert report.added == ["ok.md"]
        assert [f.source for f in report.failed] == [f"bad/{name}"]
        assert reason in report.failed[0].reason
        assert f"bad/{name}" in report.failed[0].reason
        assert await document_by_source(col.store, f"bad/{name}") is None
        assert await document_sources(col.store) == ["ok.md"]


async def test_a_page_declaring_the_undefined_charset_is_read(tmp_path: Path) -> None:
    # Its bytes are not UTF-8 and its label names Python's "undefined" codec: the page
    # is read as UTF-8 with replacements (an unknown label), not a crash of the ingest.
    base = tmp_path / "corpus"
    page = b"<html><meta charset='undefined'><p>Caf\xe9 crema tastes bitter.</p></html>"
    write_tree(base, {"a.md": "Plain notes about tea.\n", "page.html": page})
    async with Collection.open(tmp_path / "index", base_dir=base) as col:
        report = await col.ingest(base)
        assert report.added == ["a.md", "page.html"]
        assert report.failed == []
        results = (await col.search("crema bitter")).results
        assert [r.source for r in results] == ["page.html"]
        assert results[0].content == "Caf\ufffd crema tastes bitter."
        assert await assert_all_verify(results, base) == 1


async def test_missing_pdf_extra_fails_only_the_pdf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "corpus"
    mixed_tree(base)
    monkeypatch.setitem(sys.modules, "pypdfium2", None)
    _clear_caches()
    try:
        async with Collection.open(tmp_path / "index", base_dir=base) as col:
            report = await col.ingest(base)
            assert report.added == ["coffee/guide.html", "coffee/legacy.htm", "notes.md"]
            assert [f.source for f in report.failed] == ["energy/report.pdf"]
            assert "pip install groundkit[pdf]" in report.failed[0].reason
        with pytest.raises(ConfigurationError, match=r"groundkit\[pdf\]"):
            await PdfLoader().load(base / "energy/report.pdf", base_dir=base)
    finally:
        monkeypatch.undo()
        _clear_caches()


async def test_size_cap_applies(tmp_path: Path) -> None:
    base = tmp_path / "corpus"
    write_tree(base, {"big.pdf": make_pdf()})
    config = IngestConfig(max_file_bytes=1000)
    async with Collection.open(tmp_path / "index", base_dir=base, ingest=config) as col:
        report = await col.ingest(base)
    assert "exceeds the cap of 1000" in report.failed[0].reason


async def test_extensions_are_configurable(tmp_path: Path) -> None:
    base = tmp_path / "corpus"
    mixed_tree(base)
    config = IngestConfig(pdf_extensions=(), html_extensions=("html",))
    async with Collection.open(tmp_path / "index", base_dir=base, ingest=config) as col:
        report = await col.ingest(base)
    assert report.added == ["coffee/guide.html", "notes.md"]
    assert report.skipped == 4


def test_one_loader_per_extension() -> None:
    with pytest.raises(ConfigurationError, match="more than one loader"):
        IngestConfig(extensions=(".txt", ".html"))


def test_routing_loader() -> None:
    router = RoutingLoader()
    assert isinstance(router, LoaderProtocol)
    assert isinstance(router.loader_for(Path("a.PDF")), PdfLoader)
    assert isinstance(router.loader_for(Path("a.xhtml")), HtmlLoader)
    assert isinstance(router.loader_for(Path("a.rst")), FileLoader)
    assert isinstance(router.loader_for(Path("a.docx")), DocxLoader)
    assert isinstance(router.loader_for(Path("a.PPTX")), PptxLoader)
    assert isinstance(router.loader_for(Path("a.epub")), EpubLoader)
    assert router.loader_for(Path("a.xlsx")) is None
    assert not router.accepts(Path("Makefile"))


async def test_extracted_containment_comes_first(mixed: Collection, tmp_path: Path) -> None:
    await mixed.ingest(mixed.base_dir)
    stored = await mixed.store.get_chunk((await _chunks(mixed, "energy/report.pdf"))[0])
    assert stored is not None
    outside = tmp_path / "elsewhere.pdf"
    outside.write_bytes(make_pdf())
    # A real, readable PDF with the recorded extractor: only containment refuses it.
    citation = stored.citation.model_copy(update={"source": str(outside)})
    with pytest.raises(RetrievalError, match="outside") as info:
        await resolve_citation(citation, mixed.base_dir)
    assert info.value.verdict == "unresolvable"
