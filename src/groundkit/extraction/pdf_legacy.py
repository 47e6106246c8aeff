"""The PDF extractor before pdfium: pypdf in plain mode, pages joined by ``PAGE_SEPARATOR``.

Kept so that a document ingested under a ``pypdf/<version>`` identity still verifies
where pypdf is installed; never used for a new ingest (adr/0072-pdf-rectangles.md).
pypdf is the optional ``pdf-legacy`` extra (no longer part of ``pdf``).
"""

from __future__ import annotations

import io
from functools import cache
from typing import Any

from groundkit.errors import ConfigurationError, IngestionError
from groundkit.extraction.base import (
    PAGE_SEPARATOR,
    BaseExtractor,
    Extraction,
    distribution_identity,
)

__all__ = ["PypdfExtractor", "pypdf_extractor"]


def _import_pypdf() -> Any:
    try:
        import pypdf
    except ImportError:
        raise ConfigurationError(
            "checking a PDF citation made with pypdf needs the 'pdf-legacy' extra: "
            "pip install groundkit[pdf-legacy]"
        ) from None
    return pypdf


class PypdfExtractor(BaseExtractor):
    """pypdf in plain mode, pages joined by ``PAGE_SEPARATOR``; from ``pypdf_extractor()``."""

    def _run(self, data: bytes, charset: str | None) -> Extraction:
        pypdf = self._module
        try:
            reader = pypdf.PdfReader(io.BytesIO(data), strict=False)
            if reader.is_encrypted and not reader.decrypt(""):
                # An empty user password is what viewers try silently; anything
                # else needs a password groundkit has no way to be given.
                raise IngestionError(
                    "encrypted PDF that needs a password; decrypt it first (qpdf --decrypt)"
                )
            pages: list[str] = []
            for page in reader.pages:
                # Layout mode pads lines with spaces to place text in columns; plain does not.
                pages.append(page.extract_text(extraction_mode="plain") or "")
        except IngestionError:
            raise
        except pypdf.errors.FileNotDecryptedError:
            raise IngestionError(
                "encrypted PDF that needs a password; decrypt it first (qpdf --decrypt)"
            ) from None
        except pypdf.errors.DependencyError as exc:
            raise IngestionError(f"PDF needs an extra decoder: {exc}") from None
        except Exception as exc:
            # pypdf raises many types on damaged input (its own, plus ValueError,
            # KeyError, struct errors...); none may cross the public API.
            raise IngestionError(
                f"not a readable PDF (damaged or truncated?): {type(exc).__name__}: {exc}"
            ) from None
        if not pages:
            raise IngestionError("PDF has no pages")
        starts: list[int] = []
        offset = 0
        for page in pages:
            starts.append(offset)
            offset += len(page) + len(PAGE_SEPARATOR)
        info, info_error = _pdf_info(reader)
        return Extraction(
            text=PAGE_SEPARATOR.join(pages),
            page_starts=tuple(starts),
            info=info,
            info_error=info_error,
        )


_PDF_INFO = {
    "title": "/Title",
    "author": "/Author",
    "subject": "/Subject",
    "creation_date": "/CreationDate",
}


def _pdf_info(reader: Any) -> tuple[dict[str, str], str | None]:
    """The document info strings fields are made from, or why they could not be read."""
    try:
        document_info = reader.metadata
        if document_info is None:
            return {}, None
        info: dict[str, str] = {}
        for name, key in _PDF_INFO.items():
            value = document_info.get(key)
            value = value.get_object() if value is not None else None
            if value is None:
                continue
            if isinstance(value, bytes):
                value = value.decode("latin-1")  # a byte string: PDFDocEncoding, near enough
            if not isinstance(value, str):
                return {}, f"document info {key} is a {type(value).__name__}, not text"
            info[name] = str(value)
        return info, None
    except Exception as exc:  # pypdf raises many types on a damaged info dictionary
        return {}, f"unreadable document info: {type(exc).__name__}: {exc}"


@cache
def pypdf_extractor() -> PypdfExtractor:
    """The process's PypdfExtractor; ``ConfigurationError`` when pypdf is not installed."""
    module = _import_pypdf()
    return PypdfExtractor(distribution_identity("pypdf"), module)
