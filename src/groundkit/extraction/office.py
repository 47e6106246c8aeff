"""DOCX text through python-docx, PPTX text through python-pptx.

Both are optional extras (``docx``, ``pptx``), imported on first use. The layout
rules below are part of each extractor's identity (``groundkit-docx/1``,
``groundkit-pptx/1``), so a change to them is a new identity and never moves the
offsets of a citation taken under the old one.

DOCX (``groundkit-docx/1``): the body in reading order, paragraphs and tables as
they come. A paragraph is its text with surrounding whitespace removed (tabs and
line breaks inside it kept); empty paragraphs are left out. A table is one line
per row, its cells joined by ``" | "``; a cell is its paragraphs (and any nested
table's cells) joined by one space with whitespace runs made one space; a cell
spanning several grid columns counts once; empty rows are left out. Blocks are
separated by a blank line. Headers, footers, footnotes, comments and text boxes
are not read. No page numbers: a DOCX has no fixed pages. Paragraphs styled
"Title" or "Heading N" make the outline (``Extraction.headings``), not the text.

PPTX (``groundkit-pptx/1``): one page per slide, in presentation order, joined by
``PAGE_SEPARATOR`` (a slide with no text is an empty page, so page N is slide N).
On a slide: the shapes in the slide's order, group shapes entered in place; a
text frame is its paragraphs, one line each (a vertical tab, python-pptx's line
break, becomes a newline), empty lines left out; a table is rows as for DOCX;
then the speaker notes. Blocks are separated by a blank line.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from datetime import datetime
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

__all__ = ["DocxExtractor", "PptxExtractor", "docx_extractor", "pptx_extractor"]

DOCX_LAYOUT = "groundkit-docx/1"
# The built-in heading styles, as python-docx names them ("Heading 1" to "Heading 9").
_HEADING_STYLE = re.compile(r"Heading ([1-9])")
PPTX_LAYOUT = "groundkit-pptx/1"


def _import(module: str, extra: str, what: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise ConfigurationError(
            f"reading {what} needs the '{extra}' extra: pip install groundkit[{extra}]"
        ) from None


def _flat(text: str) -> str:
    return " ".join(text.split())


def _row_line(cells: list[str]) -> str | None:
    return " | ".join(cells) if any(cells) else None


def _core_info(properties: Any) -> dict[str, str]:
    """title, author, subject, keywords and created (ISO 8601) from OOXML core properties."""
    info: dict[str, str] = {}
    for name, attribute in (
        ("title", "title"),
        ("author", "author"),
        ("subject", "subject"),
        ("keywords", "keywords"),
    ):
        value = getattr(properties, attribute, None)
        if isinstance(value, str) and value.strip():
            info[name] = value
    created = getattr(properties, "created", None)
    if isinstance(created, datetime):
        info["created"] = created.isoformat()
    return info


def _failure(kind: str, exc: Exception) -> IngestionError:
    # The library's message may quote the file's XML: its type name only.
    return IngestionError(f"not a readable {kind} (damaged or truncated?): {type(exc).__name__}")


class DocxExtractor(BaseExtractor):
    """python-docx; the layout of the module docstring. Get it from ``docx_extractor()``."""

    def _run(self, data: bytes, charset: str | None) -> Extraction:
        docx = self._module
        check_zip_container(data, "DOCX")
        budget = TextBudget("the DOCX")
        try:
            document = docx.Document(io.BytesIO(data))
            blocks: list[str] = []
            headings: list[tuple[int, int, str]] = []
            offset = 0
            for block, level in _docx_body(document, budget):
                if not block:
                    continue
                if level is not None:
                    headings.append((offset, level, _flat(block)))
                blocks.append(block)
                offset += len(block) + len("\n\n")
            info = _core_info(document.core_properties)
        except IngestionError:
            raise
        except Exception as exc:  # python-docx, lxml and zipfile raise many types
            raise _failure("DOCX", exc) from None
        return Extraction(text="\n\n".join(blocks), info=info, headings=tuple(headings))


def _docx_body(document: Any, budget: TextBudget) -> Iterator[tuple[str, int | None]]:
    """The body's blocks as ``_docx_blocks`` gives them, each with its heading level:
    1-6 for a paragraph styled "Title" (1) or "Heading N" (N, past 6 as 6), else None."""
    from docx.table import Table  # extra: docx

    style_of = _paragraph_styles(document)
    for item in document.iter_inner_content():
        level = None if isinstance(item, Table) else _heading_level(style_of(item))
        yield _docx_item_text(item, budget), level


def _paragraph_styles(document: Any) -> Callable[[Any], str | None]:
    """A paragraph's style name, as ``paragraph.style.name`` gives it, from a table
    made once. python-docx looks each paragraph's style up by scanning every style
    in the file, so a small file with thousands of styles and paragraphs took
    minutes; the table makes it one pass over the styles."""
    from docx.enum.style import WD_STYLE_TYPE  # extra: docx

    styles = document.styles
    names = {
        style.style_id: style.name
        for style in styles
        if style.type == WD_STYLE_TYPE.PARAGRAPH and style.style_id is not None
    }
    default = styles.default(WD_STYLE_TYPE.PARAGRAPH)
    fallback = getattr(default, "name", None)

    def style_of(paragraph: Any) -> str | None:
        # A style id naming no paragraph style reads as the default, as in python-docx.
        return names.get(paragraph._p.style, fallback)

    return style_of


def _heading_level(style: str | None) -> int | None:
    if not isinstance(style, str):
        return None
    if style == "Title":
        return 1
    match = _HEADING_STYLE.fullmatch(style)
    return min(int(match.group(1)), 6) if match else None


def _docx_blocks(container: Any, budget: TextBudget) -> Iterator[str]:
    for item in container.iter_inner_content():
        yield _docx_item_text(item, budget)


def _docx_item_text(item: Any, budget: TextBudget) -> str:
    from docx.table import Table  # extra: docx

    if isinstance(item, Table):
        lines = [line for row in item.rows if (line := _row_line(_docx_cells(row, budget)))]
        return "\n".join(lines)
    return budget.take(str(item.text.strip()))


def _docx_cells(row: Any, budget: TextBudget) -> list[str]:
    cells: list[str] = []
    seen: set[int] = set()
    for cell in row.cells:
        # A cell spanning grid columns is returned once per column.
        if id(cell._tc) in seen:
            continue
        seen.add(id(cell._tc))
        # A cell merged down several rows is returned in each row, and its paragraphs
        # are counted each time they are read.
        cells.append(_flat(" ".join(_docx_blocks(cell, budget))))
    return cells


class PptxExtractor(BaseExtractor):
    """python-pptx, a page per slide. Get it from ``pptx_extractor()``."""

    def _run(self, data: bytes, charset: str | None) -> Extraction:
        pptx = self._module
        check_zip_container(data, "PPTX")
        budget = TextBudget("the PPTX")
        try:
            presentation = pptx.Presentation(io.BytesIO(data))
            budget.count(len(presentation.slides), "slides")
            pages = [budget.take(_slide_text(slide)) for slide in presentation.slides]
            info = _core_info(presentation.core_properties)
        except IngestionError:
            raise
        except Exception as exc:
            raise _failure("PPTX", exc) from None
        if not pages:
            raise IngestionError("the presentation has no slides")
        text, starts = join_pages(pages)
        return Extraction(text=text, page_starts=starts, info=info)


def _slide_text(slide: Any) -> str:
    from pptx.shapes.group import GroupShape  # extra: pptx

    blocks: list[str] = []
    stack: list[Iterator[Any]] = [iter(slide.shapes)]
    while stack:
        shape = next(stack[-1], None)
        if shape is None:
            stack.pop()
            continue
        if isinstance(shape, GroupShape):
            stack.append(iter(shape.shapes))
            continue
        if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            blocks.append(_frame_text(shape.text_frame))
        elif getattr(shape, "has_table", False) and shape.has_table:
            rows = (_row_line([_flat(cell.text) for cell in row.cells]) for row in shape.table.rows)
            blocks.append("\n".join(line for line in rows if line))
    if slide.has_notes_slide:
        frame = slide.notes_slide.notes_text_frame
        if frame is not None:
            blocks.append(_frame_text(frame))
    return "\n\n".join(block for block in blocks if block)


def _frame_text(frame: Any) -> str:
    lines: list[str] = []
    for paragraph in frame.paragraphs:
        for line in paragraph.text.replace("\v", "\n").split("\n"):
            if line.strip():
                lines.append(line.strip())
    return "\n".join(lines)


@cache
def docx_extractor() -> DocxExtractor:
    """The process's DocxExtractor; ``ConfigurationError`` without the 'docx' extra."""
    module = _import("docx", "docx", "DOCX")
    return DocxExtractor(composite_identity(DOCX_LAYOUT, "python-docx"), module)


@cache
def pptx_extractor() -> PptxExtractor:
    """The process's PptxExtractor; ``ConfigurationError`` without the 'pptx' extra."""
    module = _import("pptx", "pptx", "PPTX")
    return PptxExtractor(composite_identity(PPTX_LAYOUT, "python-pptx"), module)
