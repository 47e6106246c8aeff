"""The extractors this process can run, keyed by identity."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache

from groundkit.errors import ConfigurationError
from groundkit.extraction.base import ExtractorProtocol
from groundkit.extraction.epub import epub_extractor
from groundkit.extraction.html import html_extractor
from groundkit.extraction.main_content import main_content_extractor
from groundkit.extraction.office import docx_extractor, pptx_extractor
from groundkit.extraction.pdf import PdfExtractor, pdf_extractor
from groundkit.extraction.pdf_legacy import pypdf_extractor
from groundkit.extraction.pdf_ocr import recorded_engine, split_ocr_identity

__all__ = ["active_extractors", "recorded_extractor"]

_FACTORIES: tuple[Callable[[], ExtractorProtocol], ...] = (
    pdf_extractor,
    html_extractor,
    main_content_extractor,
    docx_extractor,
    pptx_extractor,
    epub_extractor,
    # Verification only, where pypdf is installed: documents ingested before pdfium.
    pypdf_extractor,
)


@cache
def active_extractors() -> Mapping[str, ExtractorProtocol]:
    """The extractors installed here, keyed by identity (memoised).

    Probed one at a time: a missing extra (``pdf``, ``docx``...) must not hide the others.
    """
    found: dict[str, ExtractorProtocol] = {}
    for factory in _FACTORIES:
        try:
            extractor = factory()
        except ConfigurationError:
            continue
        found[extractor.identity] = extractor
    return found


def recorded_extractor(identity: str) -> ExtractorProtocol | None:
    """The extractor that reproduces a text recorded under ``identity``, or None
    when this process has none.

    A PDF recognised by OCR (``<pdf identity>+ocr:<engine>``) is read by that PDF
    extractor with this host's OCR engine, which must be the recorded one:
    ``ConfigurationError`` when OCR is not installed here, ``OcrEngineChangedError``
    (naming both) when the engine here is another.
    """
    active = active_extractors()
    found = active.get(identity)
    if found is not None:
        return found
    base, recorded = split_ocr_identity(identity)
    pdf = active.get(base)
    if recorded is None or not isinstance(pdf, PdfExtractor):
        return None
    return pdf.with_ocr(recorded_engine(recorded))
