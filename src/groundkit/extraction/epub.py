"""EPUB text through ebooklib and the HTML extractor's rules, a page per chapter.

The ``epub`` extra (ebooklib and BeautifulSoup), imported on first use. Identity
``groundkit-epub/1+ebooklib/<v>+beautifulsoup4/<v>``: each chapter is parsed by
BeautifulSoup as ``HtmlExtractor`` parses a page, so both versions reach the text.

Layout (``groundkit-epub/1``): the spine's documents in reading order, one page
each, joined by ``PAGE_SEPARATOR`` (a chapter with no text, such as a cover
image, is an empty page, so page N is the Nth spine document). A chapter is its
``<body>`` by the HTML rules of SPEC 2.1b, without the ``<title>`` (which in most
books repeats the book's). Spine entries that are not XHTML documents are left
out; a spine entry naming no item fails the file.
"""

from __future__ import annotations

import io
from functools import cache
from typing import Any

from groundkit.errors import ConfigurationError, IngestionError
from groundkit.extraction.base import (
    BaseExtractor,
    Extraction,
    TextBudget,
    check_zip_container,
    composite_identity,
    join_pages,
)
from groundkit.extraction.html import body_text_and_headings

__all__ = ["EpubExtractor", "epub_extractor"]

EPUB_LAYOUT = "groundkit-epub/1"


def _import_epub() -> tuple[Any, Any]:
    try:
        import bs4
        import ebooklib
        from ebooklib import epub
    except ImportError:
        raise ConfigurationError(
            "reading EPUB needs the 'epub' extra: pip install groundkit[epub]"
        ) from None
    return (ebooklib, epub), bs4


class EpubExtractor(BaseExtractor):
    """ebooklib for the container, BeautifulSoup for each chapter. Get it from
    ``epub_extractor()``."""

    def __init__(self, identity: str, module: Any, bs4: Any) -> None:
        super().__init__(identity, module)
        self._bs4 = bs4

    def _run(self, data: bytes, charset: str | None) -> Extraction:
        ebooklib, epub = self._module
        check_zip_container(data, "EPUB")
        budget = TextBudget("the EPUB")
        try:
            book = epub.read_epub(io.BytesIO(data), {"ignore_ncx": True})
            budget.count(len(book.spine), "spine entries")
            # ebooklib's get_item_with_id scans every item: per spine entry, that was
            # time quadratic in the chapters. Its answer, the first item of an id:
            items: dict[Any, Any] = {}
            for item in book.get_items():
                items.setdefault(item.id, item)
            chapters: list[bytes] = []
            for number, entry in enumerate(book.spine, start=1):
                idref = entry[0] if isinstance(entry, tuple | list) else entry
                item = items.get(idref)
                if item is None:
                    raise IngestionError(f"the spine names a missing item {idref!r}")
                if item.get_type() == ebooklib.ITEM_DOCUMENT:
                    # What parsing it will cost, counted before it is parsed (ADR 0097):
                    # ebooklib parses the chapter (lxml) to give its content, and
                    # BeautifulSoup parses what it gives.
                    what = f"spine entry {number}"
                    if isinstance(item.content, bytes):
                        budget.parse(item.content, what)
                    content = item.get_content()
                    # A chapter's text is no longer than its markup: count it unparsed.
                    budget.spend(len(content))
                    budget.parse(content, what)
                    chapters.append(content)
            info = _dc_info(book)
        except IngestionError:
            raise
        except Exception as exc:  # ebooklib, lxml and zipfile raise many types
            raise IngestionError(
                f"not a readable EPUB (damaged or truncated?): {type(exc).__name__}"
            ) from None
        if not chapters:
            raise IngestionError("the EPUB's spine holds no chapters")
        read = [body_text_and_headings(self._bs4, chapter) for chapter in chapters]
        text, starts = join_pages([page for page, _ in read])
        headings = tuple(
            (start + offset, level, title)
            for start, (_, outline) in zip(starts, read, strict=True)
            for offset, level, title in outline
        )
        return Extraction(
            text=text,
            page_starts=starts,
            title=info.pop("title", None),
            info=info,
            headings=headings,
        )


def _dc_info(book: Any) -> dict[str, str]:
    info: dict[str, str] = {}
    for name, element in (
        ("title", "title"),
        ("author", "creator"),
        ("subject", "subject"),
        ("description", "description"),
    ):
        values = book.get_metadata("DC", element)
        if values:
            value = values[0][0] if isinstance(values[0], tuple) else values[0]
            if isinstance(value, str) and value.strip():
                info[name] = value
    return info


@cache
def epub_extractor() -> EpubExtractor:
    """The process's EpubExtractor; ``ConfigurationError`` without the 'epub' extra."""
    modules, bs4 = _import_epub()
    identity = composite_identity(EPUB_LAYOUT, "ebooklib", "beautifulsoup4")
    return EpubExtractor(identity, modules, bs4)
