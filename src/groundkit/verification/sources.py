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

A ``text`` or ``extracted`` source whose file is not on this host (missing or
unreadable) is read from the collection's kept copy of its text when there is
one (``IngestConfig.keep_sources``), checked against the hash its row stores
first; the text returned says so (``SourceText.read_from``). A file that is
there is always the one read: an edit to it is found, never hidden behind the
copy (adr/0062-kept-sources.md).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from groundkit.config import DEFAULT_MAX_FILE_BYTES
from groundkit.contracts import STORED_TEXT_CLASSES, Citation, ReadFrom, checked_citation
from groundkit.errors import (
    ConfigurationError,
    IngestionError,
    InvalidQueryError,
    RetrievalError,
)
from groundkit.extraction import active_extractors
from groundkit.extraction.base import BaseExtractor
from groundkit.extraction.memo import extracted_texts
from groundkit.extraction.pdf_ocr import OcrEngineChangedError
from groundkit.extraction.registry import recorded_extractor
from groundkit.storage.names import document_id_for
from groundkit.storage.protocols import SnapshotStore
from groundkit.storage.snapshots import (
    KeptCopyError,
    SnapshotLocation,
    as_snapshot_store,
    unpack_kept,
)
from groundkit.utils.file_reads import FileTooLargeError, NotRegularFileError, read_regular_file
from groundkit.utils.path_safety import PathEscapeError, base_directory, ensure_within

__all__ = [
    "SourceText",
    "check_read_options",
    "read_source",
    "resolve_citation",
    "slice_span",
    "source_key",
]


class SourceText(str):
    """A source's whole text, as read now, and where it was read from (a ``str``, so
    every reader of a source text takes it unchanged; ``verdict.judge`` reports
    ``read_from``)."""

    read_from: ReadFrom

    def __new__(cls, text: str, read_from: ReadFrom) -> SourceText:
        made = super().__new__(cls, text)
        made.read_from = read_from
        return made


class _NotHere(RetrievalError):
    """The file cannot be read on this host (gone, or not readable): a kept copy of
    its text may stand in. A file that is there but changed never raises this."""


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
        raise _NotHere(
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


def _foreign_id(citation: Citation) -> str:
    """Why a stored text must not be read by ``citation``'s document id, or "".

    Stored texts (snapshots, kept copies) are found by document id alone, and every
    document's id is derived from its source: a citation whose id is another
    source's would have that text checked under a source it never held."""
    if citation.document_id == document_id_for(citation.source):
        return ""
    return (
        f"document id {citation.document_id!r} is not the id of {citation.source!r}, "
        "so the citation does not name that source's text"
    )


async def _read_snapshot(citation: Citation, snapshot_dir: SnapshotLocation | None) -> str:
    store = as_snapshot_store(snapshot_dir)
    if store is None:
        raise RetrievalError(
            f"cannot check {citation.source!r}: a {citation.source_class!r} citation is read "
            "from the collection's snapshot store, and no snapshot_dir argument was given "
            "(pass snapshot_dir=collection.snapshots)",
            verdict="unresolvable",
        )
    foreign = _foreign_id(citation)
    if foreign:
        raise RetrievalError(f"refused: {foreign}", verdict="unresolvable")
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
    # The bytes are read first, capped like the ingest read: a file not on this host
    # is read from its kept copy, whatever extractors are installed here.
    data = await _read_file(path, citation.source, "source", max_bytes)
    try:
        extractor = recorded_extractor(citation.extractor or "")
    except OcrEngineChangedError as exc:
        raise RetrievalError(
            f"cannot check {citation.source!r} against the same OCR: {exc}; the text it "
            "would read now may differ, so re-ingest the file or install that engine",
            verdict="drifted",
        ) from None
    except ConfigurationError as exc:
        raise RetrievalError(
            f"cannot check {citation.source!r}: its pages were recognised by OCR, and "
            f"OCR cannot run here: {exc}",
            verdict="unresolvable",
        ) from None
    if extractor is None:
        active = active_extractors()
        running = ", ".join(sorted(active)) or "none (install groundkit[pdf] or groundkit[html])"
        raise RetrievalError(
            f"cannot check {citation.source!r}: it was extracted with {citation.extractor!r}, "
            f"and the extractors active here are {running}; offsets from one version do not "
            "carry over to another, so re-ingest it or install that version",
            verdict="unresolvable",
        )
    # Extracted as ingest extracted them (``extract_bytes``, no charset); the same
    # bytes under the same identity give the same text, so an earlier run's is reused.
    found = extractor

    async def extract() -> str:
        # A check compares text only, which some extractors read for less (a PDF's
        # without its character boxes).
        if isinstance(found, BaseExtractor):
            return await found.extract_text(data)
        return (await found.extract_bytes(data)).text

    identity = f"{citation.extractor}\x00{extractor.identity}"
    try:
        return await extracted_texts.text(identity, data, extract)
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
) -> SourceText:
    """The whole text ``citation``'s offsets are measured against, produced now, and
    where it was read from (the file, its kept copy in ``snapshot_dir`` when the file
    is not here, or a snapshot).

    ``max_bytes`` caps the file read for a ``text`` or ``extracted`` source
    (default: ``IngestConfig``'s default cap; ``None`` reads any size); give
    the cap the collection was ingested with. A snapshot is the collection's
    own copy and is not capped.
    """
    if citation.source_class in STORED_TEXT_CLASSES:
        # A URL or a record id is never a path: it must not reach the containment
        # check below.
        return SourceText(await _read_snapshot(citation, snapshot_dir), "snapshot")
    try:
        path = ensure_within(citation.source, Path(allowed_base_dir))
    except PathEscapeError as exc:
        raise RetrievalError(f"refused: {exc}", verdict="unresolvable") from None
    try:
        if citation.source_class == "extracted":
            return SourceText(await _re_extract(citation, path, max_bytes), "file")
        return SourceText(await _read_utf8(path, citation.source, "source", max_bytes), "file")
    except _NotHere as missing:
        kept, why = await _read_kept(citation, snapshot_dir)
        if kept is None:
            raise RetrievalError(f"{missing}{why}", verdict="unresolvable") from None
        return SourceText(kept, "kept copy")


async def _read_kept(
    citation: Citation, snapshot_dir: SnapshotLocation | None
) -> tuple[str | None, str]:
    """The kept copy of the cited file's text, checked, or None and why it cannot be
    used (empty when the collection keeps no copy of it)."""
    store = as_snapshot_store(snapshot_dir)
    find = getattr(store, "kept_copy", None)
    if not callable(find):
        return None, ""
    foreign = _foreign_id(citation)
    if foreign:
        return None, f"; its kept copy is not read: {foreign}"
    try:
        found = await find(citation.document_id)
    except PathEscapeError:
        return None, ""
    except OSError as exc:
        return None, f"; its kept copy cannot be read either ({exc.strerror or exc})"
    if found is None:
        # No copy kept: the reason stays the file's, as every entry point gives it.
        return None, ""
    name, data = found
    try:
        return await asyncio.to_thread(unpack_kept, data, name), ""
    except KeptCopyError as exc:
        return None, f"; its kept copy is not used: {exc}"


def check_read_options(snapshot_dir: object, max_bytes: object) -> None:
    """``InvalidQueryError`` for a ``snapshot_dir`` or ``max_bytes`` argument no read can
    use: a bad argument raises before anything is read, never as a verdict (or as the
    ``TypeError``/``ValueError`` a read would meet)."""
    if max_bytes is not None and (
        isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1
    ):
        raise InvalidQueryError(f"max_bytes must be a positive integer or None, not {max_bytes!r}")
    if snapshot_dir is None or isinstance(snapshot_dir, SnapshotStore):
        return
    if not isinstance(snapshot_dir, str | os.PathLike) or isinstance(
        os.fspath(snapshot_dir), bytes
    ):
        raise InvalidQueryError(
            "snapshot_dir must be a directory (str or os.PathLike), an object-store URI or a "
            f"snapshot store (collection.snapshots), not {type(snapshot_dir).__name__}"
        )
    if "\x00" in os.fspath(snapshot_dir):
        raise InvalidQueryError(f"snapshot_dir {snapshot_dir!r} holds a NUL character")


def source_key(citation: Citation) -> tuple[str, str, str | None, str]:
    """What reading ``citation``'s source depends on (class, source, extractor, and the
    document for a stored text): citations with the same key read the same text, so a
    batch of checks reads each source once."""
    stored = citation.document_id if citation.source_class in STORED_TEXT_CLASSES else ""
    return (citation.source_class, citation.source, citation.extractor, stored)


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
    if not isinstance(citation, Citation):
        raise InvalidQueryError(f"resolve_citation takes a Citation, not {type(citation).__name__}")
    checked_citation(citation)
    base = base_directory(allowed_base_dir, "allowed_base_dir")
    check_read_options(snapshot_dir, max_bytes)
    text = await read_source(citation, base, snapshot_dir=snapshot_dir, max_bytes=max_bytes)
    return slice_span(text, citation)
