"""The heading outline of Markdown and reStructuredText files, by a line scan.

A structure-aware chunker cuts at headings and a result shows its heading path
(``HEADINGS_KEY``, adr/0046-structure-chunking.md), so a file's headings are
recorded as ``[offset, level, title]`` where ``offset`` is where the heading's
first line begins in the text as stored. No parser library: the text is never
changed, only read, and a scan of lines is enough to find what starts a section.

Markdown follows CommonMark where it matters for finding headings: ATX (``#`` to
``######`` after at most three spaces, then a space or the line's end) and setext
(``===``/``---`` under a one-line paragraph; under a longer paragraph it is taken
as an accident, not a heading), never inside fenced or indented code, HTML
comments, list items or block quotes, nor in a leading front matter block.
reStructuredText titles are a line with an underline (and optionally an
overline) of one repeated punctuation character at least as long as the title;
levels follow the order in which each adornment style first appears.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

__all__ = [
    "MAX_OUTLINE_HEADINGS",
    "MAX_TITLE_CHARS",
    "Heading",
    "as_outline",
    "bounded_outline",
    "iter_markdown_headings",
    "markdown_headings",
    "markdown_outline",
    "rst_headings",
    "rst_outline",
]

# ``(offset, level 1-6, title)``.
Heading = tuple[int, int, str]


def as_outline(headings: Iterable[Heading]) -> list[list[int | str]]:
    """Headings as stored under ``HEADINGS_KEY``: ``[[offset, level, title], ...]``."""
    return [[offset, level, title] for offset, level, title in headings]


# The most headings a document's outline keeps (adr/0099-outline-cap.md). The outline is
# stored with the document and read with its rows; a file of nothing but headings
# would otherwise hold one entry per line (8 MB of ``# h`` lines: a million entries,
# some 800 MB at ingest). A long manual has a few thousand, a big one-file API reference
# or changelog tens of thousands.
MAX_OUTLINE_HEADINGS = 50_000


def bounded_outline(
    headings: Iterable[Heading], limit: int = MAX_OUTLINE_HEADINGS
) -> tuple[list[list[int | str]], str | None]:
    """The outline of ``headings`` with at most ``limit`` entries, and a note when cut.

    Over the limit, the deepest level goes first, then the next, so what is kept is
    every heading down to the deepest level that fits: a kept heading path is a true
    path, only shorter. When even the top-level headings do not fit, none are kept
    (a path missing a heading would name the wrong section). Read in one pass, so a
    file of headings is never held whole.
    """
    kept: list[list[int | str]] = []
    deepest, seen = 6, 0
    for offset, level, title in headings:
        seen += 1
        if level > deepest:
            continue
        kept.append([offset, level, title])
        while len(kept) > limit and deepest > 0:
            kept = [entry for entry in kept if entry[1] != deepest]
            deepest -= 1
    if deepest == 6:
        return kept, None
    if not kept:
        return [], (
            f"outline left out: {seen:,} headings, more than {limit:,} even at the top "
            "level, so no heading paths and no cuts at headings"
        )
    levels = "level 1" if deepest == 1 else f"levels 1-{deepest}"
    return kept, (
        f"outline cut to heading {levels}: {seen:,} headings, more than {limit:,}; "
        "deeper headings give no heading paths and no cuts"
    )


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """``(offset, line)`` per ``\\n``-separated line, a trailing ``\\r`` removed."""
    offset = 0
    for raw in text.split("\n"):
        yield offset, raw[:-1] if raw.endswith("\r") else raw
        offset += len(raw) + 1


def _indent(line: str) -> int:
    """Columns of leading whitespace, a tab advancing to the next multiple of four."""
    width = 0
    for char in line:
        if char == " ":
            width += 1
        elif char == "\t":
            width += 4 - width % 4
        else:
            break
    return width


# --- title clean-up ------------------------------------------------------------

# Of a heading's line, what its title is read from: no title is longer, and the
# clean-up below does bounded work per heading however long a line is.
MAX_TITLE_CHARS = 1000
# Opens at the first backtick of a run only: tried from each backtick of a long run,
# every length of opener scanned the rest of the title (a thousand backticks: seconds).
_CODE_SPAN = re.compile(r"(?<!`)(`+)(.*?[^`])\1(?!`)")
_LINK = re.compile(r"!?\[([^\[\]]*)\](?:\([^()]*\)|\[[^\[\]]*\])")
# A run of ``*``/``_`` that opens (after the start, a space or an opening bracket,
# before a non-space) or closes (after a non-space, before the end, a space or
# punctuation) emphasis; ``snake_case`` and ``2 * 3`` keep theirs.
_EMPHASIS = re.compile(r"(?<![^\s(\[{\"'])[*_]+(?=\S)|(?<=\S)(?<!\\)[*_]+(?![^\s)\]}\"'.,:;!?])")
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def _plain(text: str) -> str:
    text = _LINK.sub(r"\1", text)
    text = _EMPHASIS.sub("", text)
    return _ESCAPE.sub(r"\1", text).replace("`", "")


def _markdown_title(raw: str) -> str:
    """Inline markup dropped simply: code spans keep their text, links their label,
    emphasis markers and backslash escapes go; whitespace runs become one space."""
    raw = raw[:MAX_TITLE_CHARS]
    parts: list[str] = []
    last = 0
    for match in _CODE_SPAN.finditer(raw):
        parts.append(_plain(raw[last : match.start()]))
        parts.append(match.group(2))
        last = match.end()
    parts.append(_plain(raw[last:]))
    return " ".join("".join(parts).split())


_RST_ROLE = re.compile(r":[\w.+-]+:(?=`)")
_RST_TARGET = re.compile(r"`([^`<]*?)\s*<[^`>]*>`_{0,2}")


def _rst_title(raw: str) -> str:
    """Roles, link targets, backticks, emphasis and reference marks dropped."""
    text = _RST_ROLE.sub("", raw[:MAX_TITLE_CHARS])
    text = _RST_TARGET.sub(r"\1", text)
    text = re.sub(r"`+([^`]*)`+_{0,2}", r"\1", text)
    text = _EMPHASIS.sub("", text)
    return " ".join(text.replace("`", "").split())


# --- Markdown -------------------------------------------------------------------

_ATX = re.compile(r"(#{1,6})(?:[ \t]+(.*))?$")
_ATX_CLOSE = re.compile(r"(?:^|[ \t])#+$")
_SETEXT = re.compile(r"(=+|-+)[ \t]*$")
_THEMATIC = re.compile(r"([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_FENCE_OPEN = re.compile(r"(`{3,}(?=[^`]*$)|~{3,})")
_FENCE_CLOSE = re.compile(r"(`{3,}|~{3,})[ \t]*$")
_CONTAINER = re.compile(r">|(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)")
_YAML_OPEN = re.compile(r"---[ \t]*")
_YAML_CLOSE = re.compile(r"(?:---|\.\.\.)[ \t]*")
_TOML_FENCE = re.compile(r"\+\+\+[ \t]*")


def _front_matter_lines(lines: Iterable[tuple[int, str]]) -> int:
    """How many leading lines are a front matter block (ingestion/fields.py's rule)."""
    numbered = enumerate(lines)
    first = next(numbered, None)
    if first is None:
        return 0
    opening = first[1][1].removeprefix("\ufeff")
    if _YAML_OPEN.fullmatch(opening):
        close = _YAML_CLOSE
    elif _TOML_FENCE.fullmatch(opening):
        close = _TOML_FENCE
    else:
        return 0
    for index, (_, line) in numbered:
        if close.fullmatch(line):
            return index + 1
    return 0


def markdown_headings(text: str) -> list[Heading]:
    """The ATX and setext headings of Markdown ``text``, in offset order."""
    return list(iter_markdown_headings(text))


def iter_markdown_headings(text: str) -> Iterator[Heading]:
    """``markdown_headings`` one at a time: a file's lines are never all held at once."""
    skip = _front_matter_lines(_lines(text))
    fence: tuple[str, int] | None = None  # the open fence's character and length
    in_comment = False
    paragraph = 0  # lines in the open paragraph (0: none)
    paragraph_start, paragraph_line = 0, ""
    in_container = False  # a list item or block quote, continued lazily
    for index, (offset, line) in enumerate(_lines(text)):
        if index < skip:
            continue
        if offset == 0:
            line = line.removeprefix("\ufeff")
        indent = _indent(line)
        body = line.lstrip(" \t")
        if fence is not None:
            closing = _FENCE_CLOSE.match(body) if indent < 4 else None
            if closing and closing.group(1)[0] == fence[0] and len(closing.group(1)) >= fence[1]:
                fence = None
            continue
        if in_comment:
            in_comment = "-->" not in line
            continue
        if not body:
            paragraph, in_container = 0, False
            continue
        if indent >= 4:
            # Continues an open paragraph; otherwise indented code.
            paragraph += 1 if paragraph else 0
            continue
        opening = _FENCE_OPEN.match(body)
        if opening:
            fence = (opening.group(1)[0], len(opening.group(1)))
            paragraph, in_container = 0, False
            continue
        atx = _ATX.match(body)
        if atx:
            title = _markdown_title(_ATX_CLOSE.sub("", (atx.group(2) or "").strip()))
            if title:
                yield offset, len(atx.group(1)), title
            paragraph, in_container = 0, False
            continue
        underline = _SETEXT.match(body)
        if underline and (paragraph or in_container):
            if paragraph == 1:
                title = _markdown_title(paragraph_line)
                if title:
                    yield paragraph_start, 1 if body[0] == "=" else 2, title
                paragraph = 0
            elif body[0] == "=":
                paragraph += 1 if paragraph else 0
            else:
                paragraph, in_container = 0, False
            continue
        if _THEMATIC.match(body):
            paragraph, in_container = 0, False
            continue
        if body.startswith("<!--"):
            in_comment = "-->" not in body[4:]
            paragraph, in_container = 0, False
            continue
        if _CONTAINER.match(body):
            paragraph, in_container = 0, True
            continue
        if in_container:
            continue
        if paragraph:
            paragraph += 1
        else:
            paragraph, paragraph_start, paragraph_line = 1, offset, body


def markdown_outline(text: str) -> list[list[int | str]]:
    """``[[offset, level, title], ...]`` of Markdown ``text`` (see ``markdown_headings``),
    bounded as a document stores it (``bounded_outline``)."""
    return bounded_outline(iter_markdown_headings(text))[0]


# --- reStructuredText -------------------------------------------------------------

_ADORNMENT = re.compile(r"([!-/:-@\[-`{-~])\1+")


def _adornment(line: str) -> str | None:
    """The character of an adornment line (two or more of one punctuation mark)."""
    stripped = line.rstrip()
    return stripped[0] if _ADORNMENT.fullmatch(stripped) else None


def rst_headings(text: str) -> list[Heading]:
    """The section titles of reStructuredText ``text``, in offset order.

    An overlined title's offset is its overline's (the title begins there). Levels
    go by the order each style (character, overlined or not) first appears; styles
    past the sixth are level 6.
    """
    lines = list(_lines(text))
    found: list[Heading] = []
    styles: dict[tuple[str, bool], int] = {}

    def add(offset: int, style: tuple[str, bool], raw: str) -> None:
        title = _rst_title(raw)
        if title:
            level = styles.setdefault(style, min(len(styles) + 1, 6))
            found.append((offset, level, title))

    after_blank = True
    index = 0
    while index < len(lines):
        offset, line = lines[index]
        if offset == 0:
            line = line.removeprefix("\ufeff")
        char = _adornment(line)
        if char is not None and index + 2 < len(lines):
            title = lines[index + 1][1].strip()
            under = lines[index + 2][1].rstrip()
            if (
                title
                and _adornment(title) is None
                and under == line.rstrip()
                and len(under) >= len(title)
            ):
                add(offset, (char, True), title)
                index += 3
                after_blank = True
                continue
        starts_text = after_blank and char is None and line.strip() and _indent(line) == 0
        if starts_text and index + 1 < len(lines):
            under = lines[index + 1][1].rstrip()
            under_char = _adornment(under)
            if under_char is not None and len(under) >= len(line.rstrip()):
                add(offset, (under_char, False), line.strip())
                index += 2
                after_blank = True
                continue
        after_blank = not line.strip()
        index += 1
    return found


def rst_outline(text: str) -> list[list[int | str]]:
    """``[[offset, level, title], ...]`` of reStructuredText ``text`` (see ``rst_headings``),
    bounded as a document stores it (``bounded_outline``)."""
    return bounded_outline(rst_headings(text))[0]
