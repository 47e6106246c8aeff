"""The text a chunk is indexed under: its content, optionally with its context.

A chunk cut from the middle of a long document often never names what it is
about ("Run the installer as root."). With contextual indexing its BM25 terms
and its embedding input are made from the document title and heading path
followed by the content; the stored content, its offsets and every citation
stay those of the exact slice, so nothing a user is shown points into the
prefix (adr/0046-structure-chunking.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from groundkit.contracts import fields_of, heading_path_at

__all__ = ["context_prefix", "index_text"]


def context_prefix(metadata: Mapping[str, Any], start_offset: int) -> str:
    """``"Title > Section > Subsection"`` for the chunk at ``start_offset`` ("" when none)."""
    title = fields_of(metadata).get("title")
    parts = [title.strip()] if isinstance(title, str) and title.strip() else []
    for heading in heading_path_at(metadata, start_offset):
        if heading and not (parts and parts[-1].casefold() == heading.casefold()):
            parts.append(heading)
    return " > ".join(parts)


def index_text(
    content: str, start_offset: int, metadata: Mapping[str, Any], *, contextual: bool
) -> str:
    """What is analysed and embedded for a chunk: ``content``, or prefix + content."""
    if not contextual:
        return content
    prefix = context_prefix(metadata, start_offset)
    return f"{prefix}\n\n{content}" if prefix else content
