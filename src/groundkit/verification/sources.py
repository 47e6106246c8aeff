"""Read a citation back from its source and compare.

Each source class has one way back to its text. ``text`` re-reads the file.
``extracted`` re-runs the extractor recorded at ingest, and only that one: if
this process cannot run the same identity, the citation is ``unresolvable``
rather than checked against text another version might produce. ``snapshot``
reads the copy taken at ingest under the collection's snapshot directory,
never the network. Every raise carries a verdict, so callers classify by
attribute, not by message.

Files are read the way ingest reads them (``read_regular_file``, which
``extraction.sources`` wraps): regular files only, so a source replaced by a
FIFO or a device is ``unresolvable`` at once instead of a read that never
returns, and no more than ``max_bytes``, the ingest cap, so a source grown past
it is ``unresolvable`` rather than read whole.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from groundkit.config import DEFAULT_MAX_FILE_BYTES
from groundkit.contracts import STORED_TEXT_CLASSES, Citation
from groundkit.errors import IngestionError, RetrievalError
from groundkit.extraction import active_extractors
from groundkit.storage.snapshots import SnapshotLocation, as_snapshot_store
from groundkit.utils.file_reads import FileTooLargeError, NotRegularFileError, read_regular_file
from groundkit.utils.path_safety import PathEscapeError, ensure_within

__all__ = ["read_source", "resolve_citation", "slice_span"]


async def _read_file(path: Path, source: str, what: str, max_bytes: int | None) -> bytes:
    """The file's bytes, read as ingest reads them; ``unresolvable`` when that cannot be done."""
    try:
        return await asyncio.to_thread(read_regular_file, path, max_bytes, follow_symlinks=False)
    except NotRegularFileError as exc:
        raise RetrievalError(
            f"cannot check {what} {source!r}: it is {exc}",
            verdict="unresolvable",
        ) from None
    except FileTooLargeError as exc:
        raise RetrievalError(
            f"cannot check {what} {source!r}: {exc} (IngestConfig.max_file_bytes, the cap "
            "this collection reads with); open the collection with a larger cap if the "
            "source is meant to be this big",
            verdict="unresolvable",
        ) from None
    except OSError as exc:
        raise RetrievalError(
            f"cannot read {what} {source!r}: {exc.strerror or exc}", verdict="unresolvable"
        ) from None


async def _read_utf8(path: Path, source: str, what: str, max_bytes: int | None) -> str:
    data = await _read_file(path, source, what, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RetrievalError(
            f"{what} {source!r} is no longer valid UTF-8{_what_it_holds(data)}, and it was "
            "ingested as UTF-8 text; it cannot be checked until it is again",
            verdict="unresolvable",
        ) from None


# What a text source replaced by other bytes most often holds now, by its first bytes.
_SIGNATURES = (
    (b"\xff\xfe\x00\x00", "UTF-32 text"),
    (b"\x00\x00\xfe\xff", "UTF-32 text"),
    (b"\xff\xfe", "UTF-16 text"),
    (b"\xfe\xff", "UTF-16 text"),
    (b"%PDF-", "a PDF"),
    (b"PK\x03\x04", "a ZIP archive (DOCX, EPUB and the like are ZIP archives)"),
)


def _what_it_holds(data: bytes) -> str:
    for signature, kind in _SIGNATURES:
        if data.startswith(signature):
            return f" (it holds {kind} now)"
    return ""


def _stored(citation: Citation) -> str:
    return "the snapshot of" if citation.source_class == "snapshot" else "the stored text of"


async def _read_snapshot(citation: Citation, snapshot_dir: SnapshotLocation | None) -> str:
    store = as_snapshot_store(snapshot_dir)
    if store is None:
        raise RetrievalError(
            f"cannot check {citation.source!r}: a {citation.source_class!r} citation is read "
            "from the collection's snapshot store, and no snapshot_dir argument was given "
            "(pass snapshot_dir=collection.snapshots)",
            verdict="unresolvable",
        )
    try:
        data = await store.read(citation.document_id)
    except PathEscapeError as exc:
        raise RetrievalError(f"refused: {exc}", verdict="unresolvable") from None
    except OSError as exc:
        raise RetrievalError(
            f"cannot read {_stored(citation)} {citation.source!r}: {exc.strerror or exc}",
            verdict="unresolvable",
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RetrievalError(
            f"{_stored(citation)} {citation.source!r} is no longer valid UTF-8",
            verdict="unresolvable",
        ) from None


async def _re_extract(citation: Citation, path: Path, max_bytes: int | None) -> str:
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
    # The bytes are read here, capped like the ingest read, and extracted as
    # ingest extracted them (``extract_bytes``, no charset).
    data = await _read_file(path, citation.source, "source", max_bytes)
    try:
        return (await extractor.extract_bytes(data)).text
    except IngestionError as exc:
        raise RetrievalError(
            f"cannot check {citation.source!r}: re-extraction with {extractor.identity} "
            f"failed: {exc}",
            verdict="unresolvable",
        ) from None


async def read_source(
    citation: Citation,
    allowed_base_dir: Path,
    *,
    snapshot_dir: SnapshotLocation | None = None,
    max_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
) -> str:
    """The whole text ``citation``'s offsets are measured against, produced now.

    ``max_bytes`` caps the file read for a ``text`` or ``extracted`` source
    (default: ``IngestConfig``'s default cap; ``None`` reads any size); give
    the cap the collection was ingested with. A snapshot is the collection's
    own copy and is not capped.
    """
    if citation.source_class in STORED_TEXT_CLASSES:
        # A URL or a record id is never a path: it must not reach the containment
        # check below.
        return await _read_snapshot(citation, snapshot_dir)
    try:
        path = ensure_within(citation.source, Path(allowed_base_dir))
    except PathEscapeError as exc:
        raise RetrievalError(f"refused: {exc}", verdict="unresolvable") from None
    if citation.source_class == "extracted":
        return await _re_extract(citation, path, max_bytes)
    return await _read_utf8(path, citation.source, "source", max_bytes)


def slice_span(text: str, citation: Citation) -> str:
    """``text[start:end]``, or ``drifted`` when the text no longer reaches the span."""
    first, stop = citation.start_offset, citation.end_offset
    if stop > len(text):
        raise RetrievalError(
            f"{citation.source!r} is now {len(text)} characters long; the citation ends at {stop}",
            verdict="drifted",
        )
    return text[first:stop]


async def resolve_citation(
    citation: Citation,
    allowed_base_dir: Path,
    *,
    snapshot_dir: SnapshotLocation | None = None,
    max_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
) -> str:
    """The text at ``citation``'s offsets in its source, as the source reads now.

    ``snapshot_dir`` (``<index_dir>/<collection>.snapshots``) is needed for
    ``snapshot`` citations only; ``max_bytes`` as for ``read_source``.
    """
    text = await read_source(
        citation, allowed_base_dir, snapshot_dir=snapshot_dir, max_bytes=max_bytes
    )
    return slice_span(text, citation)
