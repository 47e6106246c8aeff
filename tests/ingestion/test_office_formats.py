"""DOCX, PPTX and EPUB as extracted sources, and the opt-in main-content HTML extractor.

Files are generated with the same libraries that read them; two real files from the
libraries' own distributions are in tests/data (see its README).
"""

from __future__ import annotations

import copy
import io
import re
import zipfile
from collections.abc import Callable
from pathlib import Path

import docx
import pptx
import pytest
from ebooklib import epub
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from pptx.util import Inches

import groundkit
from groundkit import Collection, ConfigurationError, IngestConfig, IngestionError
from groundkit.contracts import Document, page_at
from groundkit.extraction import (
    PAGE_SEPARATOR,
    ExtractorProtocol,
    active_extractors,
    docx_extractor,
    epub_extractor,
    main_content_extractor,
    pptx_extractor,
)
from groundkit.extraction import base as extraction_base
from groundkit.extraction.office import _import
from groundkit.ingestion.chunking import chunk_document
from tests.support import SMALL_CHUNKS

DATA = Path(__file__).resolve().parents[1] / "data"


def docx_bytes(blocks: list[str | list[list[str]]], **core: str) -> bytes:
    """A DOCX of paragraphs (str; a leading '# ' makes a heading) and tables (rows)."""
    document = docx.Document()
    for block in blocks:
        if isinstance(block, str):
            if block.startswith("# "):
                document.add_heading(block[2:], level=1)
            else:
                document.add_paragraph(block)
        else:
            table = document.add_table(rows=len(block), cols=len(block[0]))
            for r, row in enumerate(block):
                for c, value in enumerate(row):
                    table.cell(r, c).text = value
    for name, value in core.items():
        setattr(document.core_properties, name, value)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pptx_bytes(slides: list[list[str]], notes: dict[int, str] | None = None) -> bytes:
    """A PPTX whose slide i has one text box per string of ``slides[i]`` (none: blank)."""
    presentation = pptx.Presentation()
    blank = presentation.slide_layouts[6]
    for index, texts in enumerate(slides):
        slide = presentation.slides.add_slide(blank)
        for n, text in enumerate(texts):
            box = slide.shapes.add_textbox(Inches(1), Inches(1 + n), Inches(6), Inches(1))
            box.text_frame.text = text
        if notes and index in notes:
            slide.notes_slide.notes_text_frame.text = notes[index]
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def epub_bytes(chapters: list[tuple[str, str]], title: str = "A Book") -> bytes:
    """An EPUB with one XHTML chapter per ``(heading, body paragraph)``."""
    book = epub.EpubBook()
    book.set_identifier("groundkit-test")
    book.set_title(title)
    book.set_language("en")
    book.add_author("Ada Writer")
    items = []
    for number, (heading, body) in enumerate(chapters, start=1):
        item = epub.EpubHtml(title=heading, file_name=f"ch{number}.xhtml", lang="en")
        item.content = f"<h1>{heading}</h1><p>{body}</p>"
        book.add_item(item)
        items.append(item)
    book.toc = items
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = items
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()


async def test_docx_reading_order_headings_and_tables() -> None:
    data = docx_bytes(
        [
            "# Brewing",
            "Green tea wants 80 degrees.",
            [["Tea", "Minutes"], ["Black", "4"], ["", ""]],
            "  Oolong is rolled.  ",
            "",
        ],
        title="Tea handbook",
        author="Kitchen",
    )
    extraction = await docx_extractor().extract_bytes(data)
    assert extraction.text == (
        "Brewing\n\nGreen tea wants 80 degrees.\n\nTea | Minutes\nBlack | 4\n\nOolong is rolled."
    )
    assert extraction.page_starts == ()
    assert extraction.info["title"] == "Tea handbook"
    assert extraction.info["author"] == "Kitchen"


async def test_docx_merged_cells_count_once() -> None:
    document = docx.Document()
    table = document.add_table(rows=2, cols=3)
    merged = table.cell(0, 0).merge(table.cell(0, 1))
    merged.text = "wide"
    table.cell(0, 2).text = "right"
    table.cell(1, 0).text = "a"
    out = io.BytesIO()
    document.save(out)
    text = (await docx_extractor().extract_bytes(out.getvalue())).text
    assert text == "wide | right\na |  | "


async def test_pptx_slides_are_pages_with_notes() -> None:
    data = pptx_bytes(
        [["Quarterly review", "Revenue grew"], [], ["Hiring plan", "Two engineers"]],
        notes={2: "Say the budget is approved."},
    )
    extraction = await pptx_extractor().extract_bytes(data)
    pages = extraction.text.split(PAGE_SEPARATOR)
    assert pages == [
        "Quarterly review\n\nRevenue grew",
        "",
        "Hiring plan\n\nTwo engineers\n\nSay the budget is approved.",
    ]
    assert len(extraction.page_starts) == 3
    for number, start in enumerate(extraction.page_starts, start=1):
        assert page_at({"page_starts": list(extraction.page_starts)}, start) == number


async def test_epub_chapters_are_pages_without_the_title() -> None:
    data = epub_bytes([("One", "It was a dark night."), ("Two", "The kettle sang.")])
    extraction = await epub_extractor().extract_bytes(data)
    pages = extraction.text.split(PAGE_SEPARATOR)
    # The nav document is not in the spine; each chapter is its body.
    assert pages == ["One\n\nIt was a dark night.", "Two\n\nThe kettle sang."]
    assert extraction.title == "A Book"
    assert extraction.info["author"] == "Ada Writer"


def test_identities_pin_layout_and_libraries() -> None:
    from importlib.metadata import version

    assert docx_extractor().identity == f"groundkit-docx/1+python-docx/{version('python-docx')}"
    assert pptx_extractor().identity == f"groundkit-pptx/1+python-pptx/{version('python-pptx')}"
    assert epub_extractor().identity == (
        f"groundkit-epub/1+ebooklib/{version('ebooklib')}"
        f"+beautifulsoup4/{version('beautifulsoup4')}"
    )
    assert main_content_extractor().identity == (
        f"groundkit-main-content/1+trafilatura/{version('trafilatura')}"
        f"+lxml/{version('lxml')}+justext/{version('justext')}"
    )
    active = active_extractors()
    for extractor in (docx_extractor(), pptx_extractor(), epub_extractor()):
        assert active[extractor.identity] is extractor


async def test_a_folder_of_each_kind_ingests_searches_and_verifies(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "docs").mkdir(parents=True)
    (base / "docs" / "handbook.docx").write_bytes(
        docx_bytes(["# On call", "The pager rotates every Monday."], title="Handbook")
    )
    (base / "docs" / "deck.pptx").write_bytes(
        pptx_bytes([["Intro"], ["Roadmap"], ["The launch slips to March."]])
    )
    (base / "docs" / "novel.epub").write_bytes(
        epub_bytes([("Start", "A quiet village."), ("Middle", "The dragon woke at noon.")])
    )
    (base / "docs" / "real.docx").write_bytes(
        (DATA / "python-docx-blk-paras-and-tables.docx").read_bytes()
    )
    (base / "docs" / "real.pptx").write_bytes((DATA / "python-pptx-txt-text.pptx").read_bytes())
    async with Collection.open(tmp_path / "idx", base_dir=base, chunking=SMALL_CHUNKS) as col:
        report = await col.ingest(base / "docs")
        assert report.failed == []
        assert sorted(report.added) == [
            "docs/deck.pptx",
            "docs/handbook.docx",
            "docs/novel.epub",
            "docs/real.docx",
            "docs/real.pptx",
        ]
        pager = (await col.search("pager rotates")).results[0]
        assert pager.source == "docs/handbook.docx"
        assert pager.source_class == "extracted"
        assert pager.extractor == docx_extractor().identity
        assert pager.citation.page is None
        assert pager.fields["title"] == "Handbook"
        launch = (await col.search("launch slips")).results[0]
        assert (launch.source, launch.citation.page) == ("docs/deck.pptx", 3)
        dragon = (await col.search("dragon woke")).results[0]
        assert (dragon.source, dragon.citation.page) == ("docs/novel.epub", 2)
        lorem = (await col.search("lorem ipsum")).results[0]
        assert lorem.source == "docs/real.docx"
        zoo = (await col.search("baz zoo")).results[0]
        assert (zoo.source, zoo.citation.page) == ("docs/real.pptx", 1)
        cell = (await col.search("table cell")).results[0]
        assert (cell.source, cell.citation.page) == ("docs/real.pptx", 2)
        for hit in (pager, launch, dragon, lorem, zoo, cell):
            assert (await groundkit.check_citation(hit.citation, hit.content, col.base_dir)).ok
            assert (await col.fetch_chunk(hit.chunk_id)).verification == "verified"
        assert (await col.verify_all()).ok
        # Editing the deck moves its text: the old citation reads as drifted.
        (base / "docs" / "deck.pptx").write_bytes(
            pptx_bytes([["Intro"], ["Roadmap"], ["The launch is on time."]])
        )
        assert (await col.fetch_chunk(launch.chunk_id)).verification == "drifted"


@pytest.mark.parametrize("suffix", [".docx", ".pptx", ".epub"])
async def test_a_damaged_file_of_each_kind_fails_alone(tmp_path: Path, suffix: str) -> None:
    base = tmp_path / "base"
    base.mkdir()
    good = {
        ".docx": docx_bytes(["Fine text here."]),
        ".pptx": pptx_bytes([["Fine text here."]]),
        ".epub": epub_bytes([("Fine", "Fine text here.")]),
    }[suffix]
    (base / f"good{suffix}").write_bytes(good)
    (base / f"truncated{suffix}").write_bytes(good[: len(good) // 2])
    (base / f"not-a-zip{suffix}").write_bytes(b"this is plain text, not a container")
    # A valid ZIP that is not the format at all.
    other = io.BytesIO()
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("hello.txt", "hi")
    (base / f"wrong-zip{suffix}").write_bytes(other.getvalue())
    (base / "note.txt").write_text("a plain note", encoding="utf-8")
    async with Collection.open(tmp_path / "idx", base_dir=base) as col:
        report = await col.ingest(base)
    assert sorted(report.added) == [f"good{suffix}", "note.txt"]
    failed = {f.source: f.reason for f in report.failed}
    assert sorted(failed) == [f"not-a-zip{suffix}", f"truncated{suffix}", f"wrong-zip{suffix}"]
    kind = suffix[1:].upper()
    for source, reason in failed.items():
        assert reason.startswith(f"{source}: not a readable {kind}"), reason
        assert "Traceback" not in reason and "\n" not in reason


async def test_a_container_that_unpacks_too_far_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = docx_bytes(["x" * 5000])
    monkeypatch.setattr(extraction_base, "MAX_UNPACKED_BYTES", 2000)
    with pytest.raises(IngestionError, match=r"unpacks to .* over the limit of 2000"):
        await docx_extractor().extract_bytes(data)


def _repeated_spine(times: int) -> bytes:
    """A real EPUB whose spine names its one chapter ``times`` times."""
    book = io.BytesIO(epub_bytes([("Tea", "leaf " * 400)]))
    out = io.BytesIO()
    with zipfile.ZipFile(book) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            part = source.read(info.filename)
            if info.filename.endswith(".opf"):
                ref = re.search(rb"<itemref [^>]*/>", part)
                assert ref is not None
                part = part.replace(ref.group(0), ref.group(0) * times, 1)
            target.writestr(info, part)
    return out.getvalue()


def _repeated_slide(times: int) -> bytes:
    """A real PPTX whose slide list names its one slide ``times`` times."""
    presentation = pptx.Presentation(io.BytesIO(pptx_bytes([["leaf " * 400]])))
    slide_ids = presentation.slides._sldIdLst
    first = slide_ids[0]
    for n in range(1, times):
        again = copy.deepcopy(first)
        again.set("id", str(int(first.get("id")) + n))
        slide_ids.append(again)
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def _merged_down(rows: int) -> bytes:
    """A real DOCX with a table whose first cell is merged down ``rows`` rows."""
    document = docx.Document()
    table = document.add_table(rows=rows, cols=2)
    table.cell(0, 0).text = "leaf " * 400
    table.cell(0, 0).merge(table.cell(rows - 1, 0))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("make", "extractor"),
    [
        (_repeated_spine, epub_extractor),
        (_repeated_slide, pptx_extractor),
        (_merged_down, docx_extractor),
    ],
)
async def test_a_part_read_many_times_cannot_expand_past_the_text_limit(
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[[int], bytes],
    extractor: Callable[[], ExtractorProtocol],
) -> None:
    # Each part is small and the container's declared size too; read 40 times over,
    # one part is 80,000 characters. At 10,000 times, a few KB of file came to
    # gigabytes of text held in memory.
    monkeypatch.setattr(extraction_base, "MAX_TEXT_CHARS", 50_000, raising=False)
    once = await extractor().extract_bytes(make(1))
    assert "leaf leaf" in once.text
    with pytest.raises(IngestionError, match=r"more than 50000 characters of text"):
        await extractor().extract_bytes(make(40))


async def test_more_chapters_or_slides_than_a_container_holds_parts_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The PPTX has 38 parts, fewer than the limit; its slide list names 40 slides.
    monkeypatch.setattr(extraction_base, "_MAX_MEMBERS", 39)
    with pytest.raises(IngestionError, match=r"lists 40 spine entries, over the limit of 39"):
        await epub_extractor().extract_bytes(_repeated_spine(40))
    with pytest.raises(IngestionError, match=r"lists 40 slides, over the limit of 39"):
        await pptx_extractor().extract_bytes(_repeated_slide(40))


def test_a_missing_extra_names_its_install() -> None:
    with pytest.raises(ConfigurationError, match=r"pip install groundkit\[docx\]"):
        _import("groundkit_no_such_module", "docx", "DOCX")


_TEXT = st.text(st.characters(blacklist_categories=["Cs", "Cc"]), min_size=0, max_size=60)


@hsettings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    blocks=st.lists(
        st.one_of(_TEXT, st.lists(st.lists(_TEXT, min_size=2, max_size=2), min_size=1, max_size=3)),
        min_size=1,
        max_size=6,
    )
)
async def test_docx_chunks_are_exact_slices_of_the_extraction(
    blocks: list[str | list[list[str]]],
) -> None:
    extraction = await docx_extractor().extract_bytes(docx_bytes(blocks))
    again = await docx_extractor().extract_bytes(docx_bytes(blocks))
    assert again.text == extraction.text  # bytes -> text is a function
    text = extraction.text
    # Every non-empty paragraph is in the text, in order, as written (stripped).
    position = 0
    for block in blocks:
        if isinstance(block, str) and block.strip():
            found = text.find(block.strip(), position)
            assert found >= 0
            position = found + len(block.strip())
    document = Document(document_id="d", source="d.docx", content=text)
    for chunk in chunk_document(document, SMALL_CHUNKS):
        assert text[chunk.start_offset : chunk.end_offset] == chunk.content


@hsettings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    slides=st.lists(
        st.lists(_TEXT.filter(lambda t: "\f" not in t), max_size=3), min_size=1, max_size=5
    )
)
async def test_pptx_every_chunk_cites_the_slide_it_is_on(slides: list[list[str]]) -> None:
    extraction = await pptx_extractor().extract_bytes(pptx_bytes(slides))
    text = extraction.text
    metadata = {"page_starts": list(extraction.page_starts)}
    assert len(extraction.page_starts) == len(slides)
    pages = text.split(PAGE_SEPARATOR)
    document = Document(document_id="d", source="d.pptx", content=text, metadata=metadata)
    for chunk in chunk_document(document, SMALL_CHUNKS):
        assert text[chunk.start_offset : chunk.end_offset] == chunk.content
        page = page_at(metadata, chunk.start_offset)
        assert page is not None
        # The chunk lies inside the text of the slide it names: no chunk crosses slides.
        start = extraction.page_starts[page - 1]
        assert chunk.end_offset <= start + len(pages[page - 1])


ARTICLE = b"""<!doctype html><html><head><title>Kettles, explained</title>
<meta name="author" content="Ada"></head><body>
<nav><a href="/">Home</a> | <a href="/shop">Shop</a> | <a href="/about">About us</a></nav>
<article><h1>Kettles, explained</h1>
<p>A kettle boils water by running current through a heating element at its base.
Most electric kettles switch off by themselves once the water boils, using a bimetallic
strip that bends as the steam reaches it.</p>
<p>Limescale builds up where the water is hard. Descaling with citric acid once a month
keeps the element efficient and the water tasting clean.</p>
<p>Cordless kettles sit on a base with a central connector, so they can be lifted from
any direction, which is why nearly every modern design uses one.</p>
</article>
<footer>Copyright 2024 Kettle Corp. All rights reserved. Privacy. Cookies. Imprint.</footer>
</body></html>"""


async def test_main_content_extractor_keeps_the_article_only(tmp_path: Path) -> None:
    extraction = await main_content_extractor().extract_bytes(ARTICLE)
    assert "bimetallic strip" in extraction.text
    assert "Cookies" not in extraction.text and "About us" not in extraction.text
    base = tmp_path / "base"
    base.mkdir()
    (base / "kettles.html").write_bytes(ARTICLE)
    config = IngestConfig(html_extractor="main-content")
    async with Collection.open(tmp_path / "idx", base_dir=base, ingest=config) as col:
        assert (await col.ingest(base)).added == ["kettles.html"]
        top = (await col.search("limescale descaling")).results[0]
        assert top.extractor == main_content_extractor().identity
        assert (await col.fetch_chunk(top.chunk_id)).verification == "verified"
        assert (await col.search("privacy cookies imprint")).total_results == 0
    # The default extractor keeps every block: a second identity, side by side.
    async with Collection.open(tmp_path / "idx", "full", base_dir=base) as col:
        await col.ingest(base)
        assert (await col.search("privacy cookies imprint")).total_results == 1


async def test_main_content_refuses_a_page_without_any() -> None:
    with pytest.raises(IngestionError, match="no main content found"):
        await main_content_extractor().extract_bytes(
            b"<html><body><script>x()</script></body></html>"
        )


def test_grk_ingest_html_main_content(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from groundkit.cli import main

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "kettles.html").write_bytes(ARTICLE)
    where = ["--index-dir", str(tmp_path / "idx"), "--base-dir", str(tmp_path)]
    assert main(["ingest", str(tmp_path / "site"), *where, "--html", "main-content"]) == 0
    assert main(["search", "privacy cookies imprint", *where]) == 0
    assert "no results" in capsys.readouterr().out
    assert main(["verify", *where]) == 0


_WORDS = st.text(
    st.characters(whitelist_categories=["L", "N", "Zs", "P"], blacklist_characters="<>&"),
    min_size=1,
    max_size=120,
).filter(str.strip)


@hsettings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chapters=st.lists(st.tuples(_WORDS, _WORDS), min_size=1, max_size=4))
async def test_epub_chapters_are_pages_and_chunks_stay_inside_them(
    chapters: list[tuple[str, str]],
) -> None:
    extraction = await epub_extractor().extract_bytes(epub_bytes(chapters))
    text = extraction.text
    pages = text.split(PAGE_SEPARATOR)
    assert len(pages) == len(extraction.page_starts) == len(chapters)
    for page_text, (heading, body) in zip(pages, chapters, strict=True):
        # The HTML rules: whitespace runs become one space, blocks a blank line apart.
        assert page_text == f"{' '.join(heading.split())}\n\n{' '.join(body.split())}"
    metadata = {"page_starts": list(extraction.page_starts)}
    document = Document(document_id="d", source="d.epub", content=text, metadata=metadata)
    for chunk in chunk_document(document, SMALL_CHUNKS):
        assert text[chunk.start_offset : chunk.end_offset] == chunk.content
        page = page_at(metadata, chunk.start_offset)
        assert page is not None
        assert chunk.end_offset <= extraction.page_starts[page - 1] + len(pages[page - 1])


@hsettings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(["docx", "pptx", "epub"]),
    texts=st.lists(_WORDS, min_size=1, max_size=5),
)
async def test_every_stored_citation_resolves_to_its_chunk(
    tmp_path_factory: pytest.TempPathFactory, kind: str, texts: list[str]
) -> None:
    root = tmp_path_factory.mktemp(kind)
    data = {
        "docx": lambda: docx_bytes(list(texts)),
        "pptx": lambda: pptx_bytes([[t] for t in texts]),
        "epub": lambda: epub_bytes([(f"Chapter {i}", t) for i, t in enumerate(texts)]),
    }[kind]()
    (root / f"file.{kind}").write_bytes(data)
    async with Collection.open(root / "idx", base_dir=root, chunking=SMALL_CHUNKS) as col:
        report = await col.ingest(root / f"file.{kind}")
        assert report.added == [f"file.{kind}"], report.failed
        async for batch in col.store.iter_chunks():
            for stored in batch:
                span = await groundkit.resolve_citation(stored.citation, col.base_dir)
                assert span == stored.content
        assert (await col.verify_all()).ok
