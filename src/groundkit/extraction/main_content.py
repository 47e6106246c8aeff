"""Main-content HTML text through trafilatura: the article, without navigation,
footers and boilerplate.

Opt-in (``IngestConfig(html_extractor="main-content")``, ``grk ingest --html
main-content``), beside ``HtmlExtractor``, which keeps every block of the page.
The ``main-content`` extra, imported on first use. Identity
``groundkit-main-content/1+trafilatura/<v>+lxml/<v>+justext/<v>``: trafilatura
parses with lxml and falls back to jusText, so all three decide the text.

Bytes are decoded by ``decode_body`` (SPEC 2.1b), then
``trafilatura.extract(output_format="txt", include_tables=True,
include_comments=False, include_links=False, include_images=False,
deduplicate=False)``: deduplication is off because it remembers earlier calls, and
an extraction must depend on the bytes alone. A page where trafilatura finds no
main content fails, naming the full-page extractor as the way out.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from groundkit.errors import ConfigurationError, IngestionError
from groundkit.extraction.base import BaseExtractor, Extraction, composite_identity
from groundkit.extraction.html import decode_body

__all__ = ["MainContentHtmlExtractor", "main_content_extractor"]

MAIN_CONTENT_LAYOUT = "groundkit-main-content/1"


def _import_trafilatura() -> Any:
    try:
        import trafilatura
    except ImportError:
        raise ConfigurationError(
            "the main-content HTML extractor needs the 'main-content' extra: "
            "pip install groundkit[main-content]"
        ) from None
    return trafilatura


class MainContentHtmlExtractor(BaseExtractor):
    """trafilatura's main text. Get it from ``main_content_extractor()``."""

    def _run(self, data: bytes, charset: str | None) -> Extraction:
        trafilatura = self._module
        markup = decode_body(data, charset)
        try:
            text = trafilatura.extract(
                markup,
                output_format="txt",
                include_tables=True,
                include_comments=False,
                include_links=False,
                include_images=False,
                deduplicate=False,
            )
            meta = trafilatura.extract_metadata(markup)
        except Exception as exc:  # trafilatura and lxml raise many types
            raise IngestionError(f"cannot extract the main content: {type(exc).__name__}") from None
        if not text or not text.strip():
            raise IngestionError(
                "no main content found in this page; ingest it with the full-page HTML "
                "extractor (IngestConfig(html_extractor='full'))"
            )
        info: dict[str, str] = {}
        title = None
        if meta is not None:
            title = meta.title or None
            for name, value in (("author", meta.author), ("description", meta.description)):
                if isinstance(value, str) and value.strip():
                    info[name] = value
        return Extraction(text=text, title=title, info=info)


@cache
def main_content_extractor() -> MainContentHtmlExtractor:
    """The process's main-content extractor; ``ConfigurationError`` without the extra."""
    module = _import_trafilatura()
    identity = composite_identity(MAIN_CONTENT_LAYOUT, "trafilatura", "lxml", "justext")
    return MainContentHtmlExtractor(identity, module)
