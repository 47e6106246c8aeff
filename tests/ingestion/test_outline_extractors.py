"""Outlines recorded by the loaders: HTML, DOCX and EPUB extractions, text files,
URL snapshots, and through the public ``Collection`` into search results."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from groundkit import Collection
from groundkit.config import IngestConfig
from groundkit.contracts import HEADINGS_KEY
from groundkit.extraction import Extraction, html_extractor
from groundkit.ingestion.extracted import extracted_metadata
from groundkit.ingestion.files import FileLoader
from groundkit.ingestion.outline import markdown_outline
from groundkit.ingestion.url_loader import UrlLoader
from groundkit.utils.url_safety import AddressPolicy
from tests.sources import Route, Site
from tests.support import SMALL_CHUNKS, write_tree

HTML = """<html><head><title>Page</title></head><body>
<nav>Home | About</nav>
<h1>  The   <em>Guide</em> </h1>
<p>Intro paragraph.</p>
<section><h2>Install</h2><p>Run the installer.</p>
<h3></h3>
<h3>On <code>linux</code><br>and BSD</h3><pre>make install</pre></section>
<h2>Usage</h2>text after
</body></html>"""


def line_starts(text: str, offset: int) -> bool:
    return offset == 0 or text[offset - 1] == "\n"


class TestHtml:
    async def test_headings_point_at_their_text(self) -> None:
        extraction = await html_extractor().extract_bytes(HTML.encode())
        text = extraction.text
        assert [(level, title) for _, level, title in extraction.headings] == [
            (1, "The Guide"),
            (2, "Install"),
            (3, "On linux and BSD"),
            (2, "Usage"),
        ]
        offsets = [offset for offset, _, _ in extraction.headings]
        assert offsets == sorted(offsets)
        for offset, _, title in extraction.headings:
            assert line_starts(text, offset)
            if title != "On linux and BSD":
                assert text[offset:].startswith(title)
        # A <br> in a heading is a line break in the text, a space in the title.
        assert text[offsets[2] :].startswith("On linux\nand BSD")

    async def test_recording_headings_leaves_the_text_alone(self) -> None:
        extraction = await html_extractor().extract_bytes(HTML.encode())
        assert extraction.text == (
            "Page\n\nHome | About\n\nThe Guide\n\nIntro paragraph.\n\nInstall\n\n"
            "Run the installer.\n\nOn linux\nand BSD\n\nmake install\n\nUsage\n\ntext after"
        )

    async def test_no_headings(self) -> None:
        extraction = await html_extractor().extract_bytes(b"<p>Only a paragraph.</p>")
        assert extraction.headings == ()
        assert HEADINGS_KEY not in extracted_metadata(extraction)

    async def test_nested_heading_counts_once(self) -> None:
        extraction = await html_extractor().extract_bytes(b"<h1><h2>Inner</h2></h1><p>x</p>")
        assert extraction.headings == ((0, 2, "Inner"),)

    async def test_html_file_loader_records_the_outline(self, tmp_path: Path) -> None:
        from groundkit.ingestion.extracted import HtmlLoader

        (tmp_path / "page.html").write_text(HTML, encoding="utf-8")
        document = await HtmlLoader().load(tmp_path / "page.html", base_dir=tmp_path)
        outline = document.metadata[HEADINGS_KEY]
        assert outline[0] == [document.content.index("The Guide"), 1, "The Guide"]
        assert [entry[2] for entry in outline] == [
            "The Guide",
            "Install",
            "On linux and BSD",
            "Usage",
        ]


def test_extracted_metadata_writes_lists() -> None:
    extraction = Extraction(text="Title\n\nbody", headings=((0, 1, "Title"),))
    assert extracted_metadata(extraction)[HEADINGS_KEY] == [[0, 1, "Title"]]


def _docx_module() -> Any:
    return pytest.importorskip("docx")


class TestDocx:
    async def test_heading_styles_make_the_outline(self) -> None:
        docx = _docx_module()
        from groundkit.extraction import docx_extractor

        document = docx.Document()
        document.add_heading("Tea handbook", 0)  # the "Title" style
        document.add_paragraph("Notes from the kitchen.")
        document.add_heading("Brewing   green", 1)
        document.add_paragraph("")
        table = document.add_table(rows=1, cols=2)
        table.cell(0, 0).text = "Tea"
        table.cell(0, 1).text = "Minutes"
        document.add_heading("Temperatures", 2)
        document.add_heading("", 2)  # empty: no block, no heading
        document.add_heading("Deep", 9)
        document.add_paragraph("Green tea wants 80 degrees.")
        out = io.BytesIO()
        document.save(out)
        extraction = await docx_extractor().extract_bytes(out.getvalue())
        text = extraction.text
        assert text == (
            "Tea handbook\n\nNotes from the kitchen.\n\nBrewing   green\n\nTea | Minutes\n\n"
            "Temperatures\n\nDeep\n\nGreen tea wants 80 degrees."
        )
        assert [(level, title) for _, level, title in extraction.headings] == [
            (1, "Tea handbook"),
            (1, "Brewing green"),
            (2, "Temperatures"),
            (6, "Deep"),
        ]
        for offset, _, title in extraction.headings:
            assert line_starts(text, offset)
            assert " ".join(text[offset:].split("\n", 1)[0].split()) == title

    async def test_styles_are_read_once_not_per_paragraph(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A file with many styles and paragraphs must not cost styles x paragraphs:
        python-docx finds a paragraph's style by scanning every style, so its lookup
        is never called per paragraph (a 54 KB file of 3,000 of each took 27 s)."""
        docx = _docx_module()
        from docx.styles.styles import Styles

        from groundkit.extraction import docx_extractor

        document = docx.Document()
        odd = document.add_paragraph("Unknown style")
        odd._p.get_or_add_pPr().get_or_add_pStyle().val = "NoSuchStyle"
        for n in range(300):
            document.add_heading(f"Part {n}", 1 + n % 3)
            document.add_paragraph(f"Body {n}.")
        out = io.BytesIO()
        document.save(out)
        lookups = 0
        original = Styles.get_by_id

        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal lookups
            lookups += 1
            return original(self, *args, **kwargs)

        monkeypatch.setattr(Styles, "get_by_id", counted)
        extraction = await docx_extractor().extract_bytes(out.getvalue())
        assert lookups <= 1
        assert [(level, title) for _, level, title in extraction.headings][:4] == [
            (1, "Part 0"),
            (2, "Part 1"),
            (3, "Part 2"),
            (1, "Part 3"),
        ]
        assert len(extraction.headings) == 300

    async def test_plain_paragraphs_make_no_outline(self) -> None:
        docx = _docx_module()
        from groundkit.extraction import docx_extractor

        document = docx.Document()
        document.add_paragraph("Just a paragraph.")
        out = io.BytesIO()
        document.save(out)
        assert (await docx_extractor().extract_bytes(out.getvalue())).headings == ()


async def test_epub_headings_are_offsets_into_the_joined_text() -> None:
    pytest.importorskip("ebooklib")
    from ebooklib import epub

    from groundkit.extraction import epub_extractor

    book = epub.EpubBook()
    book.set_identifier("outline-test")
    book.set_title("A Book")
    book.set_language("en")
    chapters = []
    for number, (heading, body) in enumerate(
        [("Start", "A quiet village."), ("Middle", "The dragon woke."), ("End", "Calm.")], 1
    ):
        item = epub.EpubHtml(title=heading, file_name=f"ch{number}.xhtml", lang="en")
        item.content = f"<h1>{heading}</h1><h2>Part {number}</h2><p>{body}</p>"
        book.add_item(item)
        chapters.append(item)
    book.toc = chapters
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = chapters
    out = io.BytesIO()
    epub.write_epub(out, book)
    extraction = await epub_extractor().extract_bytes(out.getvalue())
    text = extraction.text
    assert [(level, title) for _, level, title in extraction.headings] == [
        (1, "Start"),
        (2, "Part 1"),
        (1, "Middle"),
        (2, "Part 2"),
        (1, "End"),
        (2, "Part 3"),
    ]
    for offset, _, title in extraction.headings:
        assert text[offset:].startswith(title)
    # Each chapter's first heading starts its page.
    assert [o for o, level, _ in extraction.headings if level == 1] == list(extraction.page_starts)


class TestTextFiles:
    async def test_markdown_outline_counts_from_the_top_of_the_file(self, tmp_path: Path) -> None:
        text = "---\ntitle: Guide\n---\n# Guide\n\nIntro.\n\nInstall\n-------\n\nSteps.\n"
        (tmp_path / "guide.md").write_text(text, encoding="utf-8")
        document = await FileLoader().load(tmp_path / "guide.md", base_dir=tmp_path)
        assert document.content == text
        assert document.fields == {"title": "Guide"}
        assert document.metadata[HEADINGS_KEY] == [
            [text.index("# Guide"), 1, "Guide"],
            [text.index("Install"), 2, "Install"],
        ]

    async def test_outline_without_reading_fields(self, tmp_path: Path) -> None:
        text = "---\ntitle: Guide\n---\n## Only\n"
        (tmp_path / "a.markdown").write_text(text, encoding="utf-8")
        loader = FileLoader(IngestConfig(read_fields=False))
        document = await loader.load(tmp_path / "a.markdown", base_dir=tmp_path)
        assert document.metadata == {HEADINGS_KEY: [[text.index("## Only"), 2, "Only"]]}

    async def test_rst(self, tmp_path: Path) -> None:
        text = "=====\nTitle\n=====\n\nSection\n-------\n\nBody.\n"
        (tmp_path / "doc.rst").write_text(text, encoding="utf-8")
        document = await FileLoader().load(tmp_path / "doc.rst", base_dir=tmp_path)
        assert document.metadata[HEADINGS_KEY] == [
            [0, 1, "Title"],
            [text.index("Section"), 2, "Section"],
        ]

    async def test_plain_text_and_headingless_files_have_no_outline(self, tmp_path: Path) -> None:
        write_tree(tmp_path, {"notes.txt": "# Not markdown\n\nplain\n", "flat.md": "no heads\n"})
        for name in ("notes.txt", "flat.md"):
            document = await FileLoader().load(tmp_path / name, base_dir=tmp_path)
            assert HEADINGS_KEY not in document.metadata


MARKDOWN_BODY = "# Tides\n\nThe sea rises.\n\n## Power\n\nTurbines turn.\n"


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    served = Site()
    served.routes.update(
        {
            "/page.html": Route(body=HTML.encode(), headers={"Content-Type": "text/html"}),
            "/notes.md": Route(
                body=MARKDOWN_BODY.encode(), headers={"Content-Type": "text/markdown"}
            ),
            "/plain.txt": Route(
                body=MARKDOWN_BODY.encode(), headers={"Content-Type": "text/plain"}
            ),
        }
    )
    try:
        yield served
    finally:
        served.close()


class TestUrls:
    def loader(self) -> UrlLoader:
        return UrlLoader(policy=AddressPolicy.allowing("127.0.0.0/8"), timeout=5.0)

    async def test_html_page(self, site: Site) -> None:
        document = await self.loader().load(site.url("/page.html"))
        outline = document.metadata[HEADINGS_KEY]
        assert [entry[2] for entry in outline] == [
            "The Guide",
            "Install",
            "On linux and BSD",
            "Usage",
        ]
        assert document.content[outline[0][0] :].startswith("The Guide")

    async def test_markdown_body(self, site: Site) -> None:
        document = await self.loader().load(site.url("/notes.md"))
        assert document.content == MARKDOWN_BODY
        assert document.metadata[HEADINGS_KEY] == markdown_outline(MARKDOWN_BODY)
        assert document.metadata[HEADINGS_KEY] == [
            [0, 1, "Tides"],
            [MARKDOWN_BODY.index("## Power"), 2, "Power"],
        ]

    async def test_plain_text_body_has_no_outline(self, site: Site) -> None:
        document = await self.loader().load(site.url("/plain.txt"))
        assert HEADINGS_KEY not in document.metadata


async def test_search_results_carry_the_markdown_outline(tmp_path: Path) -> None:
    base = tmp_path / "corpus"
    text = (
        "# Handbook\n\nWelcome to the team.\n\n"
        "## On call\n\nThe pager rotates every Monday morning.\n\n"
        "### Escalation\n\nCall the duty manager after ten minutes.\n"
    )
    write_tree(base, {"handbook.md": text, "other.txt": "# plain heron notes\n"})
    async with Collection.open(tmp_path / "idx", base_dir=base, chunking=SMALL_CHUNKS) as col:
        report = await col.ingest(base)
        assert sorted(report.added) == ["handbook.md", "other.txt"]
        outline = [
            [0, 1, "Handbook"],
            [text.index("## On call"), 2, "On call"],
            [text.index("### Escalation"), 3, "Escalation"],
        ]
        hit = (await col.search("duty manager")).results[0]
        assert hit.source == "handbook.md"
        assert hit.metadata[HEADINGS_KEY] == outline
        assert hit.heading_path[:1] == ["Handbook"]
        heron = (await col.search("heron")).results[0]
        assert heron.source == "other.txt"
        assert HEADINGS_KEY not in heron.metadata
