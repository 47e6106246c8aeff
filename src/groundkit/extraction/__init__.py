"""Turn PDF, HTML, DOCX, PPTX and EPUB bytes into the text that chunks and citations
index into, and read sources back.

Ingestion and verification are siblings above this package: both read files and run
extractors through it, so a citation is checked by the very code that produced it.
Each name here is imported from its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from groundkit.utils.lazy import lazy_names as _lazy_names

if TYPE_CHECKING:
    from groundkit.extraction.base import PAGE_SEPARATOR, Extraction, ExtractorProtocol
    from groundkit.extraction.epub import EpubExtractor, epub_extractor
    from groundkit.extraction.html import HtmlExtractor, decode_body, html_extractor
    from groundkit.extraction.main_content import MainContentHtmlExtractor, main_content_extractor
    from groundkit.extraction.office import (
        DocxExtractor,
        PptxExtractor,
        docx_extractor,
        pptx_extractor,
    )
    from groundkit.extraction.pdf import PdfExtractor, pdf_extractor
    from groundkit.extraction.registry import active_extractors

# The public names each module defines; imported on first use.
__getattr__, __dir__ = _lazy_names(
    __name__,
    globals(),
    {
        "groundkit.extraction.base": ("PAGE_SEPARATOR", "Extraction", "ExtractorProtocol"),
        "groundkit.extraction.epub": ("EpubExtractor", "epub_extractor"),
        "groundkit.extraction.html": ("HtmlExtractor", "decode_body", "html_extractor"),
        "groundkit.extraction.main_content": ("MainContentHtmlExtractor", "main_content_extractor"),
        "groundkit.extraction.office": (
            "DocxExtractor",
            "PptxExtractor",
            "docx_extractor",
            "pptx_extractor",
        ),
        "groundkit.extraction.pdf": ("PdfExtractor", "pdf_extractor"),
        "groundkit.extraction.registry": ("active_extractors",),
    },
)

__all__ = [
    "PAGE_SEPARATOR",
    "DocxExtractor",
    "EpubExtractor",
    "Extraction",
    "ExtractorProtocol",
    "HtmlExtractor",
    "MainContentHtmlExtractor",
    "PdfExtractor",
    "PptxExtractor",
    "active_extractors",
    "decode_body",
    "docx_extractor",
    "epub_extractor",
    "html_extractor",
    "main_content_extractor",
    "pdf_extractor",
    "pptx_extractor",
]
