"""HTML text through BeautifulSoup on the stdlib ``html.parser``.

Text is decoded by fixed rules rather than a charset sniffer whose answer
depends on what else is installed. bs4 is the optional ``html`` extra,
imported on first use.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

from groundkit.errors import ConfigurationError, IngestionError
from groundkit.extraction.base import BaseExtractor, Extraction, distribution_identity

__all__ = [
    "Heading",
    "HtmlExtractor",
    "body_text",
    "body_text_and_headings",
    "decode_body",
    "html_extractor",
    "text_and_headings",
]


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


# The encodings of the WHATWG Encoding Standard (the ones a browser decodes), as Python
# names them. A label is data from a page or a server: Python also knows codecs that
# rewrite the text they decode (``unicode_escape`` turns ``\\n`` into a line end and
# ``\\ud800`` into a lone surrogate; ``punycode``, ``idna``, ``utf-7``), and those are
# no charset a web page can have.
_WEB_ENCODINGS = frozenset(
    codecs.lookup(name).name
    for name in (
        "utf-8", "utf-16", "utf-16-le", "utf-16-be", "cp866", "koi8-r", "koi8-u",
        "mac-roman", "mac-cyrillic", "cp874", "gbk", "gb18030", "big5", "big5hkscs",
        "euc-jp", "iso2022-jp", "shift-jis", "cp932", "euc-kr", "cp949", "latin-1", "gb2312",
        *(f"iso8859-{n}" for n in (2, 3, 4, 5, 6, 7, 8, 10, 13, 14, 15, 16)),
        *(f"cp125{n}" for n in range(9)),
    )
)  # fmt: skip


def _text_codec(label: str) -> str | None:
    try:
        info = codecs.lookup(label)
    except LookupError:
        return None
    return info.name if info.name in _WEB_ENCODINGS else None


def _utf16(label: str) -> bool:
    return (_text_codec(label.strip().lower()) or "").startswith("utf-16")


def decode_body(data: bytes, declared: str | None = None, *, markup: bool = True) -> str:
    """Bytes to text by fixed rules, never by guessing.

    A byte-order mark wins; then a declared UTF-16 charset, for bytes holding
    a NUL; then strict UTF-8; then the declared charset (the server's, else for
    ``markup`` the first ``<meta charset>`` in the first 4 KiB); last, UTF-8
    with U+FFFD for what does not decode.
    """
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    if declared and _utf16(declared) and b"\0" in data:
        # UTF-16 text in the ASCII range is valid UTF-8 too, a NUL beside every
        # letter; text meant as UTF-8 holds no NUL, so a server's UTF-16 label
        # decides first for bytes that do. Without a BOM it is little-endian
        # (WHATWG), unless it says BE.
        big = _text_codec(declared.strip().lower()) == "utf-16-be"
        codec = "utf-16-be" if big else "utf-16-le"
        try:
            return data.decode(codec)
        except UnicodeDecodeError:
            pass
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    labels: list[str] = []
    if declared:
        labels.append(declared)
    match = _META_CHARSET.search(data[:4096]) if markup else None
    if match and not _utf16(match.group(1).decode("ascii")):
        # A <meta> that could be read as ASCII was not written in UTF-16; WHATWG reads
        # that label as UTF-8, so a page's text never depends on its length being even.
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
            except (UnicodeError, LookupError):
                # UnicodeError, not only its decode subclass: the "undefined" codec
                # (a label servers do send) refuses every byte with the base class.
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
_HEADING_LEVELS = {f"h{level}": level for level in range(1, 7)}
_BLOCK_SEPARATOR = "\n\n"
# ``(offset, level 1-6, title)`` of a heading in the text.
Heading = tuple[int, int, str]
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
        # Blank lines at either end are left out by index: taken off the front one at a
        # time, a <pre> of a million newlines took time quadratic in their number.
        start, end = 0, len(lines)
        while start < end and not lines[start].strip():
            start += 1
        while end > start and not lines[end - 1].strip():
            end -= 1
        if start < end:
            self.blocks.append("\n".join(lines[start:end]))
        lines.clear()


class HtmlExtractor(BaseExtractor):
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
        text, headings = text_and_headings(soup, bs4)
        return Extraction(text=text, title=title or None, info=info, headings=headings)


def body_text(bs4: Any, data: bytes) -> str:
    """The text of an XHTML document's ``<body>`` (the whole document when it has
    none) by the rules of ``HtmlExtractor``, without the ``<title>``: an EPUB
    chapter, whose title usually repeats the book's."""
    return body_text_and_headings(bs4, data)[0]


def body_text_and_headings(bs4: Any, data: bytes) -> tuple[str, tuple[Heading, ...]]:
    """``body_text`` and the headings in it (as ``text_and_headings`` gives them)."""
    try:
        soup = bs4.BeautifulSoup(decode_body(data), "html.parser")
    except Exception as exc:  # html.parser is lenient; this is a last resort
        raise IngestionError(f"cannot parse XHTML: {type(exc).__name__}") from None
    body = soup.find("body")
    return text_and_headings(body if body is not None else soup, bs4)


def text_and_headings(root: Any, bs4: Any) -> tuple[str, tuple[Heading, ...]]:
    """The text of ``root`` by the rules of ``_TextBuilder``, and its outline: per
    ``<h1>``-``<h6>`` with text, ``(offset, level, title)``, where ``offset`` is where
    the heading's first block starts in the text and ``title`` its text with
    whitespace runs made one space. Recording them never changes the text."""
    builder = _TextBuilder()
    # Per open heading: its slot in ``found``, the index of its first block, its text.
    open_headings: list[tuple[int, int, list[str]]] = []
    found: list[tuple[int, int, str]] = []  # (block index, level, title), in start order
    for event, node, pre in _walk(root, bs4):
        if event == "text":
            builder.text(node, pre)
            if open_headings:  # the innermost only: nested headings stay linear
                open_headings[-1][2].append(node)
        elif node in _BLOCKS:
            builder.end_block()
            level = _HEADING_LEVELS.get(node)
            if level is None:
                continue
            if event == "start":
                open_headings.append((len(found), len(builder.blocks), []))
                found.append((len(builder.blocks), level, ""))
            elif open_headings:
                slot, first, parts = open_headings.pop()
                title = " ".join("".join(parts).split())
                # A heading that made no block, or no title, is no heading.
                if title and len(builder.blocks) > first:
                    found[slot] = (first, found[slot][1], title)
        elif node in _CELLS:
            builder.text(" ", pre)
        elif node == "br" and event == "start":
            builder.end_line()
            if open_headings:
                open_headings[-1][2].append(" ")
    builder.end_block()
    starts: list[int] = []
    offset = 0
    for block in builder.blocks:
        starts.append(offset)
        offset += len(block) + len(_BLOCK_SEPARATOR)
    headings: list[Heading] = []
    for first, level, title in found:
        # One heading per block: the first with a title (an <h2> nested in an <h1>).
        if title and first < len(starts) and not (headings and headings[-1][0] == starts[first]):
            headings.append((starts[first], level, title))
    return _BLOCK_SEPARATOR.join(builder.blocks), tuple(headings)


def _walk(root: Any, bs4: Any) -> Iterator[tuple[str, str, bool]]:
    """Events ``("text", value, in_pre)``, ``("start"|"end", tag_name, in_pre)``.

    Iterative, so deeply nested markup cannot exhaust the recursion limit.
    """
    element = bs4.element
    skip = (element.PreformattedString, element.Script, element.Stylesheet, element.TemplateString)
    stack: list[tuple[str | None, Iterator[Any]]] = [(None, iter(root.contents))]
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
    return HtmlExtractor(distribution_identity("beautifulsoup4"), module)
