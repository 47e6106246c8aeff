"""PDF, HTML, DOCX, PPTX and EPUB files: loaders whose documents are ``extracted`` text.

The document records the extractor's identity; a citation into it is checked
by running that same extractor again (verification/sources.py), so the text is
never stored as a second source of truth.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from groundkit.config import IngestConfig
from groundkit.contracts import (
    FIELDS_KEY,
    GEOMETRY_KEY,
    HEADINGS_KEY,
    PAGE_STARTS_KEY,
    Document,
)
from groundkit.errors import IngestionError
from groundkit.extraction import (
    Extraction,
    ExtractorProtocol,
    PdfExtractor,
    docx_extractor,
    epub_extractor,
    html_extractor,
    main_content_extractor,
    pdf_extractor,
    pptx_extractor,
)
from groundkit.extraction.cache import cached_extraction, extraction_cache
from groundkit.extraction.pdf_ocr import OcrMode, ocr_policy
from groundkit.extraction.sources import read_capped
from groundkit.ingestion.fields import extraction_fields
from groundkit.ingestion.files import contained_source
from groundkit.ingestion.outline import bounded_outline
from groundkit.storage.names import document_id_for

__all__ = [
    "DocxLoader",
    "EpubLoader",
    "HtmlLoader",
    "PdfLoader",
    "PptxLoader",
    "extracted_document_parts",
    "extracted_metadata",
    "html_extractor_for",
    "pdf_extractor_for",
    "pdf_extractor_with_ocr",
]


def extracted_metadata(extraction: Extraction, *, read_fields: bool = True) -> dict[str, Any]:
    """Document metadata for an extraction (``extracted_document_parts``)."""
    return extracted_document_parts(extraction, read_fields=read_fields)[0]


def extracted_document_parts(
    extraction: Extraction, *, read_fields: bool = True
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Document metadata for an extraction: page offsets (for citation pages), where
    its characters stand (for citation rectangles), its outline (for chunk boundaries
    and heading paths) and, with ``read_fields``, the fields its title and info give;
    and the notes a report gives of what it left out (unread pages, an outline cut to
    fit, ``bounded_outline``).

    ``IngestionError`` when the info could not be read or does not make valid fields.
    """
    metadata: dict[str, Any] = {}
    if extraction.page_starts:
        metadata[PAGE_STARTS_KEY] = list(extraction.page_starts)
        metadata["pages"] = len(extraction.page_starts)
    if extraction.geometry is not None:
        metadata[GEOMETRY_KEY] = dict(extraction.geometry)
    outline, cut = bounded_outline(extraction.headings)
    if outline:
        metadata[HEADINGS_KEY] = outline
    if read_fields:
        if extraction.info_error is not None:
            raise IngestionError(
                f"{extraction.info_error}; ingest with IngestConfig(read_fields=False) to skip it"
            )
        fields = extraction_fields(extraction.title, extraction.info)
        if fields:
            metadata[FIELDS_KEY] = fields
    return metadata, tuple(note for note in (extraction.unread, cut) if note)


class _ExtractedLoader:
    """Reads a file, runs the extractor on its bytes (or reads back what it gave for
    the same bytes before, extraction/cache.py), keeps only a complete result."""

    def __init__(
        self,
        config: IngestConfig | None,
        factory: Callable[[], ExtractorProtocol],
        extensions: Callable[[IngestConfig], tuple[str, ...]],
        empty_reason: str,
    ) -> None:
        self.config = config or IngestConfig()
        self._factory = factory
        self._extensions = extensions(self.config)
        self._empty_reason = empty_reason

    def accepts(self, path: Path) -> bool:
        return path.suffix.lower() in self._extensions

    async def load(self, path: Path, *, base_dir: Path) -> Document:
        real, source = contained_source(path, base_dir)
        # ConfigurationError (extra not installed) propagates: the caller decides
        # whether that fails one file or the whole run.
        extractor = self._factory()
        try:
            data = await asyncio.to_thread(
                read_capped, real, self.config.max_file_bytes, follow_symlinks=False
            )
        except IngestionError as exc:  # not a regular file, or over the cap
            raise IngestionError(f"{source}: {exc}") from None
        except OSError as exc:
            raise IngestionError(f"{source}: cannot read ({exc.strerror or exc})") from None
        cache = extraction_cache(self.config.extraction_cache_bytes)
        try:
            extraction = await cached_extraction(extractor, data, cache)
        except IngestionError as exc:
            raise IngestionError(f"{source}: {exc}") from None
        if not extraction.text.strip():
            unread = extraction.unread
            reason = f"no extractable text: {unread}" if unread else self._empty_reason
            raise IngestionError(f"{source}: {reason}")
        try:
            metadata, notes = extracted_document_parts(
                extraction, read_fields=self.config.read_fields
            )
        except IngestionError as exc:
            raise IngestionError(f"{source}: {exc}") from None
        return Document(
            document_id=document_id_for(source),
            source=source,
            content=extraction.text,
            source_class="extracted",
            extractor=extraction.identity or extractor.identity,
            metadata=metadata,
            # Not silent: the text pages are kept, and the report says what was left out.
            notes=notes,
        )


class PdfLoader(_ExtractedLoader):
    """``.pdf`` through pdfium (the ``pdf`` extra); a citation names its 1-based page and
    the rectangles its span covers there. Pages with no text layer are read by OCR as
    ``IngestConfig.ocr`` says."""

    def __init__(self, config: IngestConfig | None = None) -> None:
        chosen = config or IngestConfig()
        super().__init__(
            chosen,
            pdf_extractor_for(chosen),
            lambda c: c.pdf_extensions,
            "no extractable text: no page has a text layer or words OCR could read",
        )


def pdf_extractor_for(config: IngestConfig) -> Callable[[], ExtractorProtocol]:
    """The PDF extractor with the OCR policy ``config.ocr`` asks for (its factory)."""
    return lambda: pdf_extractor_with_ocr(config.ocr, config.ocr_languages)


def pdf_extractor_with_ocr(mode: OcrMode, languages: str) -> ExtractorProtocol:
    """The PDF extractor reading pages without a text layer as ``mode`` says (files
    and fetched PDFs alike)."""
    pdf: ExtractorProtocol = pdf_extractor()
    if not isinstance(pdf, PdfExtractor):  # another PDF extractor reads no scans
        return pdf
    return pdf.with_policy(ocr_policy(mode, languages))


def html_extractor_for(config: IngestConfig) -> Callable[[], ExtractorProtocol]:
    """The HTML extractor ``config.html_extractor`` names (its factory)."""
    if config.html_extractor == "main-content":
        return main_content_extractor
    return html_extractor


class HtmlLoader(_ExtractedLoader):
    """``.html``/``.htm``/``.xhtml`` through BeautifulSoup (the ``html`` extra), or
    with ``IngestConfig(html_extractor="main-content")`` through trafilatura."""

    def __init__(self, config: IngestConfig | None = None) -> None:
        chosen = config or IngestConfig()
        super().__init__(
            chosen,
            html_extractor_for(chosen),
            lambda c: c.html_extensions,
            "no text in this HTML page",
        )


class DocxLoader(_ExtractedLoader):
    """``.docx`` through python-docx (the ``docx`` extra): paragraphs, headings and
    tables in reading order."""

    def __init__(self, config: IngestConfig | None = None) -> None:
        super().__init__(
            config, docx_extractor, lambda c: c.docx_extensions, "no text in this document"
        )


class PptxLoader(_ExtractedLoader):
    """``.pptx`` through python-pptx (the ``pptx`` extra); a citation names its slide
    as the page."""

    def __init__(self, config: IngestConfig | None = None) -> None:
        super().__init__(
            config, pptx_extractor, lambda c: c.pptx_extensions, "no text on any slide"
        )


class EpubLoader(_ExtractedLoader):
    """``.epub`` through ebooklib and the HTML rules (the ``epub`` extra); a citation
    names its chapter as the page."""

    def __init__(self, config: IngestConfig | None = None) -> None:
        super().__init__(
            config, epub_extractor, lambda c: c.epub_extensions, "no text in any chapter"
        )
