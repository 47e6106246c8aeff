"""Turn PDF, HTML, DOCX, PPTX and EPUB bytes into the text that chunks and citations
index into, and read sources back.

Ingestion and verification are siblings above this package: both read files and run
extractors through it, so a citation is checked by the very code that produced it.
"""

from __future__ import annotations

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
