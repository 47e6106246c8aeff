"""The text a chunk is indexed under: its content, optionally with its context.

A chunk cut from the middle of a long document often never names what it is
about ("Run the installer as root."). With contextual indexing its BM25 terms
and its embedding input are made from the document title and heading path
followed by the content; the stored content, its offsets and every citation
stay those of the exact slice, so nothing a user is shown points into the
prefix (adr/0046-structure-chunking.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

from groundkit.contracts import HEADINGS_KEY, fields_of, heading_path_at, opening_heading

__all__ = ["context_prefix", "heading_paths", "index_text", "index_texts_of"]


def context_prefix(
    metadata: Mapping[str, Any], start_offset: int, path: Sequence[str] | None = None
) -> str:
    """``"Title > Section > Subsection"`` for the chunk at ``start_offset`` ("" when none);
    ``path`` is its heading path when the caller has it already."""
    title = fields_of(metadata).get("title")
    parts = [title.strip()] if isinstance(title, str) and title.strip() else []
    found = heading_path_at(metadata, start_offset) if path is None else path
    for heading in found:
        if heading and not (parts and parts[-1].casefold() == heading.casefold()):
            parts.append(heading)
    return " > ".join(parts)


def index_text(
    content: str, start_offset: int, metadata: Mapping[str, Any], *, contextual: bool
) -> str:
    """What is analysed and embedded for a chunk: ``content``, or prefix + content."""
    if not contextual:
        return content
    path = heading_path_at(metadata, opening_heading(metadata, start_offset, content))
    prefix = context_prefix(metadata, start_offset, path)
    return f"{prefix}\n\n{content}" if prefix else content


def index_texts_of(
    chunks: Sequence[tuple[str, int]], metadata: Mapping[str, Any], *, contextual: bool
) -> list[str]:
    """``index_text`` of each ``(content, start_offset)`` of one document, the heading
    paths found in one pass over its outline (``heading_paths``)."""
    if not contextual:
        return [content for content, _ in chunks]
    at = [opening_heading(metadata, start, content) for content, start in chunks]
    paths = heading_paths(metadata, at)
    texts: list[str] = []
    for (content, start), path in zip(chunks, paths, strict=True):
        prefix = context_prefix(metadata, start, path)
        texts.append(f"{prefix}\n\n{content}" if prefix else content)
    return texts


def heading_paths(metadata: Mapping[str, Any], offsets: Sequence[int]) -> list[list[str]]:
    """``heading_path_at`` for each of ``offsets``.

    For ascending offsets (a document's chunks) the outline is walked once, not once
    per offset: per chunk, a file of 40,000 headings took minutes to index.
    """
    if any(b < a for a, b in pairwise(offsets)):
        return [heading_path_at(metadata, offset) for offset in offsets]
    outline = metadata.get(HEADINGS_KEY)
    if not isinstance(outline, list) or not outline:
        return [[] for _ in offsets]
    paths: list[list[str]] = []
    stack: list[tuple[int, str]] = []
    index, broken = 0, False
    for offset in offsets:
        # heading_path_at's loop, resumed where the previous offset stopped.
        while not broken and index < len(outline):
            entry = outline[index]
            if not (isinstance(entry, list) and len(entry) == 3):
                broken = True
                break
            start, level, title = entry
            if type(start) is not int or type(level) is not int or not isinstance(title, str):
                broken = True
                break
            if start > offset:
                break
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            index += 1
        paths.append([] if broken else [title for _, title in stack])
    return paths
