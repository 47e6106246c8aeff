"""Read a citation back from its source and compare.

Each source class has one way back to its text: ``text`` re-reads the file,
``extracted`` re-runs the recorded extractor, ``snapshot`` reads the copy taken
at ingest. Only ``text`` is resolvable in this build; the others refuse as
``unresolvable`` rather than slicing the wrong bytes. Every raise carries a
verdict, so callers classify by attribute, not by message.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from groundkit.contracts import Citation, SourceClass
from groundkit.errors import RetrievalError
from groundkit.ingestion.files import read_utf8
from groundkit.utils.path_safety import PathEscapeError, ensure_within

__all__ = ["read_source", "resolve_citation", "slice_span", "verify_citation"]


async def read_source(
    source: str,
    source_class: SourceClass,
    allowed_base_dir: Path,
    *,
    snapshot_dir: Path | None = None,
) -> str:
    """The whole text citations into ``source`` are measured against, read now."""
    if source_class != "text":
        raise RetrievalError(
            f"cannot resolve {source!r}: source class {source_class!r} is not supported "
            "by this build",
            verdict="unresolvable",
        )
    try:
        path = ensure_within(source, Path(allowed_base_dir))
    except PathEscapeError as exc:
        raise RetrievalError(f"refused: {exc}", verdict="unresolvable") from None
    try:
        return await asyncio.to_thread(read_utf8, path)
    except UnicodeDecodeError:
        raise RetrievalError(
            f"{source!r} is no longer valid UTF-8", verdict="unresolvable"
        ) from None
    except OSError as exc:
        raise RetrievalError(
            f"cannot read {source!r}: {exc.strerror or exc}", verdict="unresolvable"
        ) from None


def slice_span(text: str, citation: Citation) -> str:
    """``text[start:end]``, or ``drifted`` when the text no longer reaches the span."""
    if citation.end_offset > len(text):
        raise RetrievalError(
            f"{citation.source!r} is now {len(text)} characters long; the citation ends at "
            f"{citation.end_offset}",
            verdict="drifted",
        )
    return text[citation.start_offset : citation.end_offset]


async def resolve_citation(
    citation: Citation, allowed_base_dir: Path, *, snapshot_dir: Path | None = None
) -> str:
    """The text at ``citation``'s offsets in its source, as the source reads now."""
    text = await read_source(
        citation.source, citation.source_class, allowed_base_dir, snapshot_dir=snapshot_dir
    )
    return slice_span(text, citation)


async def verify_citation(
    citation: Citation,
    expected_content: str,
    allowed_base_dir: Path,
    *,
    snapshot_dir: Path | None = None,
) -> bool:
    """True when the source still holds ``expected_content`` at the cited span.

    False means the span was read and differs (drifted). A source that cannot
    be read raises ``RetrievalError(verdict="unresolvable")``; one now too short
    for the span raises with ``verdict="drifted"``.
    """
    span = await resolve_citation(citation, allowed_base_dir, snapshot_dir=snapshot_dir)
    return span == expected_content
