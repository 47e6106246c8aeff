"""Read a citation back from its source and compare.

Each source class has one way back to its text. ``text`` re-reads the file.
``extracted`` re-runs the extractor recorded at ingest, and only that one: if
this process cannot run the same identity, the citation is ``unresolvable``
rather than checked against text another version might produce. ``snapshot``
reads the copy taken at ingest under the collection's snapshot directory,
never the network. Every raise carries a verdict, so callers classify by
attribute, not by message.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from groundkit.contracts import Citation
from groundkit.errors import IngestionError, RetrievalError
from groundkit.extraction import active_extractors
from groundkit.extraction.sources import read_utf8
from groundkit.storage.snapshots import SnapshotLocation, as_snapshot_store
from groundkit.utils.path_safety import PathEscapeError, ensure_within

__all__ = ["read_source", "resolve_citation", "slice_span", "verify_citation"]


async def _read_utf8(path: Path, source: str, what: str) -> str:
    try:
        return await asyncio.to_thread(read_utf8, path)
    except UnicodeDecodeError:
        raise RetrievalError(
            f"{what} {source!r} is no longer valid UTF-8", verdict="unresolvable"
        ) from None
    except OSError as exc:
        raise RetrievalError(
            f"cannot read {what} {source!r}: {exc.strerror or exc}", verdict="unresolvable"
        ) from None


async def _read_snapshot(citation: Citation, snapshot_dir: SnapshotLocation | None) -> str:
    store = as_snapshot_store(snapshot_dir)
    if store is None:
        raise RetrievalError(
            f"cannot check {citation.source!r}: a 'snapshot' citation is read from the "
            "collection's snapshot directory, and no snapshot_dir argument was given",
            verdict="unresolvable",
        )
    try:
        data = await store.read(citation.document_id)
    except PathEscapeError as exc:
        raise RetrievalError(f"refused: {exc}", verdict="unresolvable") from None
    except OSError as exc:
        raise RetrievalError(
            f"cannot read the snapshot of {citation.source!r}: {exc.strerror or exc}",
            verdict="unresolvable",
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RetrievalError(
            f"the snapshot of {citation.source!r} is no longer valid UTF-8", verdict="unresolvable"
        ) from None


async def _re_extract(citation: Citation, path: Path) -> str:
    active = active_extractors()
    extractor = active.get(citation.extractor or "")
    if extractor is None:
        running = ", ".join(sorted(active)) or "none (install groundkit[pdf] or groundkit[html])"
        raise RetrievalError(
            f"cannot check {citation.source!r}: it was extracted with {citation.extractor!r}, "
            f"and the extractors active here are {running}; offsets from one version do not "
            "carry over to another, so re-ingest it or install that version",
            verdict="unresolvable",
        )
    try:
        return await extractor.extract(path)
    except IngestionError as exc:
        raise RetrievalError(
            f"cannot check {citation.source!r}: re-extraction with {extractor.identity} "
            f"failed: {exc}",
            verdict="unresolvable",
        ) from None


async def read_source(
    citation: Citation, allowed_base_dir: Path, *, snapshot_dir: SnapshotLocation | None = None
) -> str:
    """The whole text ``citation``'s offsets are measured against, produced now."""
    if citation.source_class == "snapshot":
        # A URL is never a path: it must not reach the containment check below.
        return await _read_snapshot(citation, snapshot_dir)
    try:
        path = ensure_within(citation.source, Path(allowed_base_dir))
    except PathEscapeError as exc:
        raise RetrievalError(f"refused: {exc}", verdict="unresolvable") from None
    if citation.source_class == "extracted":
        return await _re_extract(citation, path)
    return await _read_utf8(path, citation.source, "source")


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
    citation: Citation, allowed_base_dir: Path, *, snapshot_dir: SnapshotLocation | None = None
) -> str:
    """The text at ``citation``'s offsets in its source, as the source reads now.

    ``snapshot_dir`` (``<index_dir>/<collection>.snapshots``) is needed for
    ``snapshot`` citations only.
    """
    text = await read_source(citation, allowed_base_dir, snapshot_dir=snapshot_dir)
    return slice_span(text, citation)


async def verify_citation(
    citation: Citation,
    expected_content: str,
    allowed_base_dir: Path,
    *,
    snapshot_dir: SnapshotLocation | None = None,
) -> bool:
    """True when the source still holds ``expected_content`` at the cited span.

    False means the span was read and differs (drifted). A source that cannot
    be read raises ``RetrievalError(verdict="unresolvable")``; one now too short
    for the span raises with ``verdict="drifted"``.
    """
    span = await resolve_citation(citation, allowed_base_dir, snapshot_dir=snapshot_dir)
    return span == expected_content
