"""Turn PDF and HTML bytes into the text that chunks and citations index into, and read
sources back.

Ingestion and verification are siblings above this package: both read files and run
extractors through it, so a citation is checked by the very code that produced it.
"""

from __future__ import annotations

from groundkit.extraction.base import PAGE_SEPARATOR, Extraction, ExtractorProtocol
from groundkit.extraction.html import HtmlExtractor, decode_body, html_extractor
from groundkit.extraction.pdf import PdfExtractor, pdf_extractor
from groundkit.extraction.registry import active_extractors

__all__ = [
    "PAGE_SEPARATOR",
    "Extraction",
    "ExtractorProtocol",
    "HtmlExtractor",
    "PdfExtractor",
    "active_extractors",
    "decode_body",
    "html_extractor",
    "pdf_extractor",
]
