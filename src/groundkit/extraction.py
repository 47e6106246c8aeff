"""Turn PDF and HTML bytes into the text that chunks and citations index into.

Ingest and citation checks call the very same extractor objects, so an
``extracted`` citation is verified by re-running what produced it. Output must
depend on the input bytes and the library version only: pypdf runs in plain
mode, BeautifulSoup always uses the stdlib ``html.parser``, and text is decoded
by fixed rules rather than a charset sniffer whose answer depends on what else
is installed. The libraries are optional extras, imported on first use.
"""

from __future__ import annotations

import asyncio
import codecs
import importlib.metadata
import io
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from groundkit.errors import ConfigurationError, IngestionError

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

# Between the text of two PDF pages. A form feed marks the page; the newlines
# around it make the boundary a paragraph break for the chunker. Changing it
# changes every offset, so it is part of what the extractor identity stands for.
PAGE_SEPARATOR = "\n\f\n"


@dataclass(frozen=True, slots=True)
class Extraction:
    """Extracted text plus what citations need to describe it."""

    text: str
    # Offset in ``text`` where each page begins (PDF only; empty otherwise).
    page_starts: tuple[int, ...] = ()
    title: str | None = None
    # Descriptive values as the file states them, for document fields: PDF
    # title/author/subject/creation_date, HTML <meta> description/author/keywords.
    # Never part of the text, so citations do not depend on them.
    info: Mapping[str, str] = field(default_factory=dict)
    # Why the descriptive values could not be read (the text still was); an
    # ingest that reads fields fails the file on it.
    info_error: str | None = None


@runtime_checkable
class ExtractorProtocol(Protocol):
    """Deterministic bytes → text: same bytes and same identity, same text."""

    @property
    def identity(self) -> str:
        """``"<distribution>/<version>"`` of the library doing the work."""
        ...

    async def extract(self, path: Path) -> str:
        """The text of the file at ``path`` (already containment-checked by the caller)."""
        ...

    async def extract_file(self, path: Path) -> Extraction:
        """Like ``extract``, with page offsets and title."""
        ...

    async def extract_bytes(self, data: bytes, *, charset: str | None = None) -> Extraction:
        """Extract from bytes (a fetched body); ``charset`` is what the server declared."""
        ...


def _distribution_identity(distribution: str) -> str:
    try:
        return f"{distribution}/{importlib.metadata.version(distribution)}"
    except importlib.metadata.PackageNotFoundError:
        raise ConfigurationError(
            f"{distribution} is importable but not installed as a distribution, so its "
            "version (part of every extracted citation) is unknown; reinstall it with pip"
        ) from None


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise IngestionError(f"cannot read {path.name!r}: {exc.strerror or exc}") from None


class _Extractor(ABC):
    """Shared plumbing: file and bytes entry points run the same sync function in a thread."""

    def __init__(self, identity: str, module: Any) -> None:
        self._identity = identity
        self._module = module

    @property
    def identity(self) -> str:
        return self._identity

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._identity!r})"

    @abstractmethod
    def _run(self, data: bytes, charset: str | None) -> Extraction:
        """The extraction itself; runs in a worker thread."""

    async def extract(self, path: Path) -> str:
        return (await self.extract_file(path)).text

    async def extract_file(self, path: Path) -> Extraction:
        return await asyncio.to_thread(lambda: self._run(_read_bytes(path), None))

    async def extract_bytes(self, data: bytes, *, charset: str | None = None) -> Extraction:
        return await asyncio.to_thread(self._run, data, charset)


# -- PDF ---------------------------------------------------------------------


def _import_pypdf() -> Any:
    try:
        import pypdf
    except ImportError:
        raise ConfigurationError(
            "reading PDF needs the 'pdf' extra: pip install groundkit[pdf]"
        ) from None
    return pypdf


class PdfExtractor(_Extractor):
    """pypdf in plain mode; pages joined by ``PAGE_SEPARATOR``. Get it from ``pdf_extractor()``."""

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
            pages = [page.extract_text(extraction_mode="plain") or "" for page in reader.pages]
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
def pdf_extractor() -> PdfExtractor:
    """The process's PdfExtractor; ``ConfigurationError`` when the 'pdf' extra is missing."""
    module = _import_pypdf()
    return PdfExtractor(_distribution_identity("pypdf"), module)


# -- HTML --------------------------------------------------------------------


def _import_bs4() -> Any:
    try:
        import bs4
    except ImportError:
        raise ConfigurationError(
            "reading HTML needs the 'html' extra: pip install groundkit[html]"
        ) from None
    return bs4


_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
# WHATWG decodes these labels as windows-1252; Python's latin-1 would turn
# bytes 0x80-0x9F into control characters instead of quotes and dashes.
_CP1252_LABELS = frozenset({"iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "ascii"})
_CP1252_LABELS |= {"us-ascii", "windows-1252", "cp1252", "x-cp1252"}
_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def _text_codec(label: str) -> str | None:
    try:
        info = codecs.lookup(label)
    except LookupError:
        return None
    return info.name if getattr(info, "_is_text_encoding", True) else None


def decode_body(data: bytes, declared: str | None = None, *, markup: bool = True) -> str:
    """Bytes to text by fixed rules, never by guessing.

    A byte-order mark wins; then strict UTF-8; then the declared charset (the
    server's, else for ``markup`` the first ``<meta charset>`` in the first
    4 KiB); last, UTF-8 with U+FFFD for what does not decode.
    """
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    labels: list[str] = []
    if declared:
        labels.append(declared)
    match = _META_CHARSET.search(data[:4096]) if markup else None
    if match:
        labels.append(match.group(1).decode("ascii"))
    for label in labels:
        label = label.strip().lower()
        candidates = ["cp1252", "latin-1"] if label in _CP1252_LABELS else [label]
        for candidate in candidates:
            name = _text_codec(candidate)
            if name is None:
                continue
            try:
                return data.decode(name)
            except (UnicodeDecodeError, LookupError):
                continue
    return data.decode("utf-8", errors="replace")


# Elements whose text is never content. Comments, doctypes, CDATA and
# processing instructions are dropped by type below.
_DROPPED = frozenset({"script", "style", "noscript", "template"})
# fmt: off
_BLOCKS = frozenset({
    "address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details",
    "dialog", "dir", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form",
    "frameset", "h1", "h2", "h3", "h4", "h5", "h6", "head", "header", "hgroup", "hr", "html",
    "legend", "li", "main", "menu", "nav", "ol", "p", "pre", "section", "summary", "table",
    "tbody", "tfoot", "thead", "title", "tr", "ul",
})
# fmt: on
_CELLS = frozenset({"td", "th"})
_HTML_META = frozenset({"description", "author", "keywords"})


class _TextBuilder:
    """Blocks become paragraphs (blank line between), ``<br>`` a line break.

    Outside ``<pre>`` every run of whitespace is one space; inside it lines
    keep their spacing, minus trailing blanks.
    """

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self._lines: list[str] = []
        self._run: list[str] = []
        self._run_pre = False

    def text(self, value: str, pre: bool) -> None:
        self._run.append(value)
        self._run_pre = self._run_pre or pre

    def end_line(self) -> None:
        if not self._run:
            return
        raw = "".join(self._run)
        if self._run_pre:
            self._lines.extend(line.rstrip() for line in raw.split("\n"))
        else:
            line = " ".join(raw.split())
            if line:
                self._lines.append(line)
        self._run.clear()
        self._run_pre = False

    def end_block(self) -> None:
        self.end_line()
        lines = self._lines
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip():
            lines.pop()
        if lines:
            self.blocks.append("\n".join(lines))
        lines.clear()


class HtmlExtractor(_Extractor):
    """BeautifulSoup on ``html.parser``. Get it from ``html_extractor()``."""

    def _run(self, data: bytes, charset: str | None) -> Extraction:
        bs4 = self._module
        markup = decode_body(data, charset)
        try:
            soup = bs4.BeautifulSoup(markup, "html.parser")
        except Exception as exc:  # html.parser is lenient; this is a last resort
            raise IngestionError(f"cannot parse HTML: {type(exc).__name__}: {exc}") from None
        title_tag = soup.find("title")
        title = " ".join(title_tag.get_text().split()) if title_tag is not None else ""
        info: dict[str, str] = {}
        for meta in soup.find_all("meta"):
            name = str(meta.get("name") or "").strip().lower()
            content = meta.get("content")
            # The first tag of a name counts, as it does for the <title>.
            if name in _HTML_META and content and name not in info:
                info[name] = str(content)
        builder = _TextBuilder()
        for event, node, pre in _walk(soup, bs4):
            if event == "text":
                builder.text(node, pre)
            elif node in _BLOCKS:
                builder.end_block()
            elif node in _CELLS:
                builder.text(" ", pre)
            elif node == "br" and event == "start":
                builder.end_line()
        builder.end_block()
        return Extraction(text="\n\n".join(builder.blocks), title=title or None, info=info)


def _walk(soup: Any, bs4: Any) -> Iterator[tuple[str, str, bool]]:
    """Events ``("text", value, in_pre)``, ``("start"|"end", tag_name, in_pre)``.

    Iterative, so deeply nested markup cannot exhaust the recursion limit.
    """
    element = bs4.element
    skip = (element.PreformattedString, element.Script, element.Stylesheet, element.TemplateString)
    stack: list[tuple[str | None, Iterator[Any]]] = [(None, iter(soup.contents))]
    pre = 0
    while stack:
        name, children = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            if name is not None:
                if name == "pre":
                    pre -= 1
                yield "end", name, pre > 0
            continue
        if isinstance(child, bs4.element.NavigableString):
            if not isinstance(child, skip):
                yield "text", str(child), pre > 0
            continue
        tag = str(child.name).lower()
        if tag in _DROPPED:
            continue
        yield "start", tag, pre > 0
        if tag == "pre":
            pre += 1
        stack.append((tag, iter(child.contents)))


@cache
def html_extractor() -> HtmlExtractor:
    """The process's HtmlExtractor; ``ConfigurationError`` when the 'html' extra is missing."""
    module = _import_bs4()
    return HtmlExtractor(_distribution_identity("beautifulsoup4"), module)


# -- registry ----------------------------------------------------------------

_FACTORIES: tuple[Callable[[], ExtractorProtocol], ...] = (pdf_extractor, html_extractor)


@cache
def active_extractors() -> Mapping[str, ExtractorProtocol]:
    """The extractors installed here, keyed by identity (memoised).

    Probed one at a time: a missing ``pdf`` extra must not hide HTML, nor the reverse.
    """
    found: dict[str, ExtractorProtocol] = {}
    for factory in _FACTORIES:
        try:
            extractor = factory()
        except ConfigurationError:
            continue
        found[extractor.identity] = extractor
    return found
