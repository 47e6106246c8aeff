"""Every built-in extractor passes the shipped extractor conformance suite.

Files are generated with the libraries that write each format (the helpers of the
format tests) plus the two real office files in tests/data. Each class builds fresh
instances through the undecorated factory, so "a new instance" is one, not the
process's memoised extractor.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

import docx
import pytest

from evals.scanned import scanned_pdf, text_pdf
from groundkit.extraction import (
    active_extractors,
    docx_extractor,
    epub_extractor,
    html_extractor,
    main_content_extractor,
    pdf_extractor,
    pptx_extractor,
)
from groundkit.extraction.base import ExtractorProtocol
from groundkit.extraction.pdf_legacy import pypdf_extractor
from groundkit.testing.conformance.extractors import ExtractorConformance
from tests.ingestion.test_office_formats import ARTICLE, docx_bytes, epub_bytes, pptx_bytes
from tests.ocr_support import mixed_pdf, real_engine
from tests.sources import HTML_PAGE, PAGES, make_pdf

DATA = Path(__file__).resolve().parents[1] / "data"
Samples = Sequence[tuple[str, bytes]]
Factory = Callable[[], ExtractorProtocol]

OUTLINED_HTML = """<html><head><title>Page</title>
<meta name="description" content="A page with an outline"></head><body>
<nav>Home | About</nav>
<h1>  The   <em>Guide</em> </h1>
<p>Intro paragraph.</p>
<section><h2>Install</h2><p>Run the installer.</p>
<h3></h3>
<h3>On <code>linux</code><br>and BSD</h3><pre>make install
  then   run</pre></section>
<h1><h2>Nested</h2></h1>
<h2>Usage</h2>text after, 東京 の 天気 🌊 e\u0301
<table><tr><th>key</th><td>value</td></tr></table>
</body></html>"""


def _zip(members: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return out.getvalue()


NOT_A_CONTAINER = b"this is plain text, not a container"
WRONG_ZIP = _zip({"hello.txt": "hi"})


@cache
def pdf_samples() -> tuple[tuple[str, bytes], ...]:
    from datetime import UTC, datetime

    info = {
        "title": "Energy sources",
        "author": "Ada Writer",
        "subject": "Renewables",
        "creation_date": datetime(2024, 5, 1, tzinfo=UTC),
    }
    return (
        ("four-pages.pdf", make_pdf(PAGES, info=info)),
        ("one-page.pdf", make_pdf(["A single page about tidal power and the moon."])),
        # A blank page between two with text: an empty page keeps its number.
        ("with-blank.pdf", make_pdf(["First page words.", "", "Third page words."])),
        (
            "long.pdf",
            text_pdf(
                [
                    "Hyphen-\nated words, columns and lines. " * 40,
                    "Second page of the long document. " * 60,
                ]
            ),
        ),
    )


@cache
def scan_after_text() -> bytes:
    """Page 1 with a text layer, page 2 a scan: unread with OCR off, recognised with it."""
    return mixed_pdf("A text page comes first.", "Foghorns sound when the light cannot be seen.")


@cache
def pdf_damaged() -> tuple[tuple[str, bytes], ...]:
    good = make_pdf(PAGES)
    return (
        ("truncated.pdf", good[: len(good) // 2]),
        ("encrypted.pdf", make_pdf(PAGES, user_password="secret")),
        ("not-a.pdf", NOT_A_CONTAINER),
        ("empty.pdf", b""),
    )


@cache
def html_samples() -> tuple[tuple[str, bytes], ...]:
    return (
        ("cafe.html", HTML_PAGE.encode("cp1252")),
        ("outline.html", OUTLINED_HTML.encode("utf-8")),
        ("bom.htm", b"\xef\xbb\xbf<p>Byte order mark \xe2\x80\x93 then text.</p>"),
        ("article.html", ARTICLE),
        (
            "long.html",
            (
                "<html><body>"
                + "".join(
                    f"<h2>Section {n}</h2><p>Paragraph {n} about wind, water and sun.</p>"
                    for n in range(400)
                )
                + "</body></html>"
            ).encode(),
        ),
    )


@cache
def main_content_samples() -> tuple[tuple[str, bytes], ...]:
    body = "".join(
        f"<p>Paragraph {n}: a kettle boils water by running current through an element, "
        "and switches itself off with a bimetallic strip once the steam reaches it.</p>"
        for n in range(40)
    )
    long_article = (
        "<html><head><title>Long read</title></head><body><nav>Home | Shop</nav>"
        f"<article><h1>Kettles at length</h1>{body}</article><footer>Imprint</footer>"
        "</body></html>"
    ).encode()
    return (("article.html", ARTICLE), ("long.html", long_article))


def _outlined_docx() -> bytes:
    document = docx.Document()
    document.add_heading("Tea handbook", 0)  # the "Title" style: level 1
    document.add_paragraph("Notes from the kitchen.\tTabbed.")
    document.add_heading("Brewing   green", 1)
    table = document.add_table(rows=2, cols=2)
    for r, row in enumerate([["Tea", "Minutes"], ["Green", "3"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_heading("Temperatures", 2)
    document.add_heading("", 2)  # empty: no block, no heading
    document.add_heading("Deep", 9)  # past 6: level 6
    document.add_paragraph("Green tea wants 80 degrees. 東京 🌊")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


@cache
def docx_samples() -> tuple[tuple[str, bytes], ...]:
    return (
        ("outline.docx", _outlined_docx()),
        (
            "tables.docx",
            docx_bytes(
                ["# Report", "Intro text.", [["a", "b"], ["c", ""]], "After the table."],
                title="Report",
                author="Ada",
            ),
        ),
        ("python-docx.docx", (DATA / "python-docx-blk-paras-and-tables.docx").read_bytes()),
    )


def _container_damage(good: bytes, suffix: str) -> tuple[tuple[str, bytes], ...]:
    return (
        (f"truncated{suffix}", good[: len(good) // 2]),
        (f"not-a-zip{suffix}", NOT_A_CONTAINER),
        (f"wrong-zip{suffix}", WRONG_ZIP),
        (f"empty{suffix}", b""),
    )


@cache
def pptx_samples() -> tuple[tuple[str, bytes], ...]:
    return (
        (
            "deck.pptx",
            pptx_bytes(
                [["Intro", "Second box\vwith a break"], [], ["The launch is on time."]],
                notes={0: "Speaker notes here."},
            ),
        ),
        ("python-pptx.pptx", (DATA / "python-pptx-txt-text.pptx").read_bytes()),
    )


@cache
def epub_samples() -> tuple[tuple[str, bytes], ...]:
    return (
        (
            "book.epub",
            epub_bytes(
                [
                    ("Chapter One", "It was a dark and stormy night."),
                    ("Chapter Two", "The storm passed by morning. 東京 🌊"),
                    ("Chapter Three", "Everyone slept."),
                ]
            ),
        ),
        ("short.epub", epub_bytes([("Only", "One chapter only.")], title="Short")),
    )


class TestPdfium(ExtractorConformance):
    @pytest.fixture
    def extractor_factory(self) -> Factory:
        return pdf_extractor.__wrapped__

    @pytest.fixture
    def sample_files(self) -> Samples:
        # With OCR off the scanned page is left empty and named in ``unread``.
        return (*pdf_samples(), ("mixed.pdf", scan_after_text()))

    @pytest.fixture
    def damaged_files(self) -> Samples:
        return pdf_damaged()


class TestPypdf(ExtractorConformance):
    """The legacy PDF extractor, kept for verifying documents ingested with pypdf."""

    @pytest.fixture
    def extractor_factory(self) -> Factory:
        return pypdf_extractor.__wrapped__

    @pytest.fixture
    def sample_files(self) -> Samples:
        return pdf_samples()

    @pytest.fixture
    def damaged_files(self) -> Samples:
        return pdf_damaged()


@pytest.mark.slow
class TestPdfiumWithOcr(ExtractorConformance):
    """Scanned pages read by tesseract: the extraction names the engine too."""

    @pytest.fixture
    def extractor_factory(self) -> Factory:
        engine = real_engine()
        return lambda: pdf_extractor.__wrapped__().with_ocr(engine)

    @pytest.fixture
    def sample_files(self) -> Samples:
        return (
            (
                "scan.pdf",
                scanned_pdf(
                    [
                        "Lighthouses once burned whale oil.\nKeepers trimmed the wicks.",
                        "Foghorns sound when the light cannot be seen.",
                    ],
                    size=14,
                ),
            ),
            ("text-layer.pdf", make_pdf(["A page with a text layer needs no OCR."])),
            ("mixed.pdf", scan_after_text()),
        )

    @pytest.fixture
    def damaged_files(self) -> Samples:
        return pdf_damaged()


class TestHtml(ExtractorConformance):
    @pytest.fixture
    def extractor_factory(self) -> Factory:
        return html_extractor.__wrapped__

    @pytest.fixture
    def sample_files(self) -> Samples:
        return html_samples()


class TestMainContentHtml(ExtractorConformance):
    @pytest.fixture
    def extractor_factory(self) -> Factory:
        return main_content_extractor.__wrapped__

    @pytest.fixture
    def sample_files(self) -> Samples:
        return main_content_samples()

    @pytest.fixture
    def damaged_files(self) -> Samples:
        # Nothing a reader would call the page's main content.
        return (("empty.html", b""), ("bare.html", b"<html><body></body></html>"))


class TestDocx(ExtractorConformance):
    @pytest.fixture
    def extractor_factory(self) -> Factory:
        return docx_extractor.__wrapped__

    @pytest.fixture
    def sample_files(self) -> Samples:
        return docx_samples()

    @pytest.fixture
    def damaged_files(self) -> Samples:
        good = docx_samples()[0][1]
        return (*_container_damage(good, ".docx"), ("a-pptx.docx", pptx_samples()[0][1]))


class TestPptx(ExtractorConformance):
    @pytest.fixture
    def extractor_factory(self) -> Factory:
        return pptx_extractor.__wrapped__

    @pytest.fixture
    def sample_files(self) -> Samples:
        return pptx_samples()

    @pytest.fixture
    def damaged_files(self) -> Samples:
        good = pptx_samples()[0][1]
        return (*_container_damage(good, ".pptx"), ("a-docx.pptx", docx_samples()[0][1]))


class TestEpub(ExtractorConformance):
    @pytest.fixture
    def extractor_factory(self) -> Factory:
        return epub_extractor.__wrapped__

    @pytest.fixture
    def sample_files(self) -> Samples:
        return epub_samples()

    @pytest.fixture
    def damaged_files(self) -> Samples:
        good = epub_samples()[0][1]
        return (*_container_damage(good, ".epub"), ("a-docx.epub", docx_samples()[0][1]))


# The extractor classes the suites above run; one for every extractor registered.
COVERED = {
    "PdfExtractor": TestPdfium,
    "PypdfExtractor": TestPypdf,
    "HtmlExtractor": TestHtml,
    "MainContentHtmlExtractor": TestMainContentHtml,
    "DocxExtractor": TestDocx,
    "PptxExtractor": TestPptx,
    "EpubExtractor": TestEpub,
}


def test_every_registered_extractor_runs_the_suite() -> None:
    """A new extractor in the registry needs a class here."""
    active = {type(extractor).__name__ for extractor in active_extractors().values()}
    assert active <= set(COVERED), sorted(active - set(COVERED))
