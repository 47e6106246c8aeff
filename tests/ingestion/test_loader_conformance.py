"""Every built-in loader passes the shipped loader conformance suite.

The per-format loaders run with the extraction cache off, so every load runs the
extractor; the routing loader (what an ingest uses) runs with it on, over a mixed
folder. Sample files come from the extractor suite's tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from groundkit.config import IngestConfig
from groundkit.ingestion.dispatch import RoutingLoader
from groundkit.ingestion.extracted import DocxLoader, EpubLoader, HtmlLoader, PdfLoader, PptxLoader
from groundkit.ingestion.files import FileLoader
from groundkit.ingestion.protocols import LoaderProtocol
from groundkit.testing.conformance.loaders import LoaderConformance
from tests.ingestion.test_extractor_conformance import (
    NOT_A_CONTAINER,
    WRONG_ZIP,
    docx_samples,
    epub_samples,
    html_samples,
    main_content_samples,
    pdf_damaged,
    pdf_samples,
    pptx_samples,
    scan_after_text,
)
from tests.ocr_support import real_engine
from tests.sources import image_only_pdf

Samples = Sequence[tuple[str, bytes]]
Factory = Callable[[], LoaderProtocol]
UNCACHED = IngestConfig(extraction_cache_bytes=0)
OTHER_NAMES = ("image.png", "archive.tar.gz", "README", "data.json", "page.xml")

TEXT_SAMPLES: Samples = (
    (
        "notes/refunds.md",
        b"---\ntitle: Refunds\ntags: [billing, support]\n---\n# Refunds\n\n"
        b"Refunds are paid within fourteen days.\n\n## Exceptions\n\nSale items.\n",
    ),
    ("crlf.txt", "Line one\r\nLine two 東京 🌊\r\n".encode()),
    ("guide.rst", b"Guide\n=====\n\nInstall it.\n\nUsage\n-----\n\nRun it.\n"),
    ("deep/er/plain.markdown", b"Setext title\n============\n\nBody text.\n"),
    ("bom.txt", b"\xef\xbb\xbfText after a byte order mark.\n"),
)


def _named(samples: Samples, folder: str) -> Samples:
    """The samples under a subfolder, so a source has more than one part."""
    return tuple((f"{folder}/{name}", data) for name, data in samples)


class TestFileLoader(LoaderConformance):
    @pytest.fixture
    def loader_factory(self) -> Factory:
        return FileLoader

    @pytest.fixture
    def sample_files(self) -> Samples:
        return TEXT_SAMPLES

    @pytest.fixture
    def rejected_names(self) -> Sequence[str]:
        return (*OTHER_NAMES, "report.pdf", "page.html", "deck.pptx")

    @pytest.fixture
    def damaged_files(self) -> Samples:
        return (
            ("latin1.txt", "café".encode("latin-1")),
            ("empty.md", b""),
            ("blank.txt", b"  \n\t\n"),
            ("only-bom.txt", b"\xef\xbb\xbf"),
        )


class TestPdfLoader(LoaderConformance):
    @pytest.fixture
    def loader_factory(self) -> Factory:
        config = IngestConfig(extraction_cache_bytes=0, ocr="off")
        return lambda: PdfLoader(config)

    @pytest.fixture
    def sample_files(self) -> Samples:
        return (*_named(pdf_samples(), "pdfs"), ("mixed.pdf", scan_after_text()))

    @pytest.fixture
    def rejected_names(self) -> Sequence[str]:
        return (*OTHER_NAMES, "notes.txt", "page.html")

    @pytest.fixture
    def damaged_files(self) -> Samples:
        # A scan with OCR off has no text at all: it fails, naming why.
        return (*pdf_damaged(), ("scan.pdf", image_only_pdf()))


@pytest.mark.slow
class TestPdfLoaderWithOcr(LoaderConformance):
    """Scanned pages recognised at load; verification recognises them again."""

    @pytest.fixture
    def loader_factory(self) -> Factory:
        real_engine()
        config = IngestConfig(extraction_cache_bytes=0, ocr="required")
        return lambda: PdfLoader(config)

    @pytest.fixture
    def sample_files(self) -> Samples:
        return (("mixed.pdf", scan_after_text()), ("one-page.pdf", pdf_samples()[1][1]))


class TestHtmlLoader(LoaderConformance):
    @pytest.fixture
    def loader_factory(self) -> Factory:
        return lambda: HtmlLoader(UNCACHED)

    @pytest.fixture
    def sample_files(self) -> Samples:
        return _named(html_samples(), "site")

    @pytest.fixture
    def rejected_names(self) -> Sequence[str]:
        return (*OTHER_NAMES, "notes.md", "report.pdf")

    @pytest.fixture
    def damaged_files(self) -> Samples:
        return (("empty.html", b""), ("script-only.htm", b"<script>var x = 1;</script>"))


class TestMainContentHtmlLoader(LoaderConformance):
    @pytest.fixture
    def loader_factory(self) -> Factory:
        config = IngestConfig(extraction_cache_bytes=0, html_extractor="main-content")
        return lambda: HtmlLoader(config)

    @pytest.fixture
    def sample_files(self) -> Samples:
        return main_content_samples()

    @pytest.fixture
    def damaged_files(self) -> Samples:
        return (("bare.html", b"<html><body></body></html>"),)


class TestDocxLoader(LoaderConformance):
    @pytest.fixture
    def loader_factory(self) -> Factory:
        return lambda: DocxLoader(UNCACHED)

    @pytest.fixture
    def sample_files(self) -> Samples:
        return docx_samples()

    @pytest.fixture
    def rejected_names(self) -> Sequence[str]:
        return (*OTHER_NAMES, "deck.pptx", "book.epub", "old.doc")

    @pytest.fixture
    def damaged_files(self) -> Samples:
        good = docx_samples()[0][1]
        return (
            ("truncated.docx", good[: len(good) // 2]),
            ("not-a-zip.docx", NOT_A_CONTAINER),
            ("wrong-zip.docx", WRONG_ZIP),
        )


class TestPptxLoader(LoaderConformance):
    @pytest.fixture
    def loader_factory(self) -> Factory:
        return lambda: PptxLoader(UNCACHED)

    @pytest.fixture
    def sample_files(self) -> Samples:
        return pptx_samples()

    @pytest.fixture
    def rejected_names(self) -> Sequence[str]:
        return (*OTHER_NAMES, "report.docx", "old.ppt")

    @pytest.fixture
    def damaged_files(self) -> Samples:
        good = pptx_samples()[0][1]
        return (("truncated.pptx", good[: len(good) // 2]), ("wrong-zip.pptx", WRONG_ZIP))


class TestEpubLoader(LoaderConformance):
    @pytest.fixture
    def loader_factory(self) -> Factory:
        return lambda: EpubLoader(UNCACHED)

    @pytest.fixture
    def sample_files(self) -> Samples:
        return epub_samples()

    @pytest.fixture
    def rejected_names(self) -> Sequence[str]:
        return (*OTHER_NAMES, "report.docx")

    @pytest.fixture
    def damaged_files(self) -> Samples:
        good = epub_samples()[0][1]
        return (("truncated.epub", good[: len(good) // 2]), ("wrong-zip.epub", WRONG_ZIP))


class TestRoutingLoader(LoaderConformance):
    """What an ingest uses: each file to the loader of its extension."""

    @pytest.fixture
    def loader_factory(self) -> Factory:
        config = IngestConfig(ocr="off")
        return lambda: RoutingLoader(config)

    @pytest.fixture
    def sample_files(self) -> Samples:
        return (
            *TEXT_SAMPLES[:2],
            *_named(pdf_samples()[:2], "pdf"),
            html_samples()[1],
            docx_samples()[0],
            pptx_samples()[0],
            epub_samples()[0],
        )

    @pytest.fixture
    def rejected_names(self) -> Sequence[str]:
        return OTHER_NAMES

    @pytest.fixture
    def damaged_files(self) -> Samples:
        return (
            ("latin1.txt", "café".encode("latin-1")),
            ("truncated.pdf", pdf_damaged()[0][1]),
            ("wrong-zip.docx", WRONG_ZIP),
        )
