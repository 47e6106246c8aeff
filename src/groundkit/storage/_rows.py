"""Row codec shared by the SQL metadata stores: Python values to rows and back.

SQLite and PostgreSQL store the same columns in the same shapes; what turns a
document or chunk into a row, and a row into a ``StoredChunk``, is written once
here so the two backends cannot drift apart.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from groundkit.contracts import Chunk, Document, DocumentRecord
from groundkit.errors import StorageError
from groundkit.storage.protocols import ChunkPostings, StoredChunk, metadata_json
from groundkit.utils.text import describe_unencodable

__all__ = [
    "WriteItems",
    "check_storable",
    "chunk_rows",
    "document_record",
    "document_rows",
    "now_iso",
    "parse_metadata",
    "postings_from_blobs",
    "stored_chunk",
    "term_counts",
]

WriteItems = Sequence[tuple[Document, Sequence[Chunk], Sequence[Sequence[str]]]]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def parse_metadata(raw: str) -> dict[str, Any]:
    return {} if raw == "{}" else dict(json.loads(raw))


def document_record(row: Sequence[Any], chunk_count: int = 0) -> DocumentRecord:
    return DocumentRecord(
        document_id=row[0],
        source=row[1],
        content_hash=row[2],
        ingested_at=row[3],
        source_class=row[4],
        extractor=row[5],
        metadata=parse_metadata(row[6]),
        chunk_count=chunk_count,
    )


def stored_chunk(row: Sequence[Any]) -> StoredChunk:
    return StoredChunk(
        key=row[0],
        chunk_id=row[1],
        chunk_index=row[2],
        content=row[3],
        start_offset=row[4],
        end_offset=row[5],
        document_id=row[6],
        source=row[7],
        document_hash=row[8],
        ingested_at=row[9],
        source_class=row[10],
        extractor=row[11],
        metadata=parse_metadata(row[12]),
    )


def term_counts(items: WriteItems) -> tuple[list[str], list[list[Counter[str]]]]:
    """The sources of a ``replace_documents`` batch and each chunk's term counts.

    Checked before any transaction opens, so a malformed batch writes nothing.
    """
    sources = [document.source for document, _, _ in items]
    if len(set(sources)) != len(sources):
        raise ValueError("a source appears twice in one replace_documents call")
    counts: list[list[Counter[str]]] = []
    for _, chunks, chunk_terms in items:
        if len(chunks) != len(chunk_terms):
            raise ValueError("one term list per chunk is required")
        counts.append([Counter(terms) for terms in chunk_terms])
    return sources, counts


def document_rows(items: WriteItems) -> list[tuple[Any, ...]]:
    """``documents`` rows in column order ``id, source, content_hash, ingested_at,
    source_class, extractor, metadata``; one timestamp for the whole batch."""
    now = now_iso()
    return [
        (
            document.document_id,
            document.source,
            document.content_hash,
            now,
            document.source_class,
            document.extractor,
            metadata_json(document.metadata),
        )
        for document, _, _ in items
    ]


def chunk_rows(
    items: WriteItems, counts: list[list[Counter[str]]], vocab: dict[str, int]
) -> list[tuple[Any, ...]]:
    """Every ``chunks`` row of a batch (see ``_chunk_row``)."""
    return [
        _chunk_row(document.document_id, chunk, counter, vocab)
        for (document, chunks, _), group in zip(items, counts, strict=True)
        for chunk, counter in zip(chunks, group, strict=True)
    ]


def _chunk_row(
    document_id: str, chunk: Chunk, counter: Counter[str], vocab: dict[str, int]
) -> tuple[Any, ...]:
    """A ``chunks`` row: term ids and frequencies as little-endian int32 blobs."""
    items = sorted((vocab[t], n) for t, n in counter.items())
    ids = np.fromiter((i for i, _ in items), dtype="<i4", count=len(items))
    tfs = np.fromiter((n for _, n in items), dtype="<i4", count=len(items))
    return (
        chunk.chunk_id,
        document_id,
        chunk.chunk_index,
        chunk.content,
        chunk.start_offset,
        chunk.end_offset,
        chunk.content_hash,
        ids.tobytes(),
        tfs.tobytes(),
    )


def postings_from_blobs(
    keys: Sequence[int], id_blobs: Sequence[bytes], tf_blobs: Sequence[bytes]
) -> ChunkPostings:
    """One ``ChunkPostings`` from each chunk's little-endian int32 term-id and tf blobs."""
    n = len(keys)
    sizes = np.fromiter((len(b) // 4 for b in id_blobs), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return ChunkPostings(
        keys=np.asarray(keys, dtype=np.int64),
        offsets=offsets,
        term_ids=np.frombuffer(b"".join(id_blobs), dtype="<i4").astype(np.int32),
        tfs=np.frombuffer(b"".join(tf_blobs), dtype="<i4").astype(np.int32),
    )


def check_storable(items: WriteItems, *, nul_allowed: bool) -> None:
    """Refuse, before any transaction, text in a batch the store cannot hold.

    Every string of a row must encode as UTF-8 (no lone surrogates), and where
    ``nul_allowed`` is false (PostgreSQL text) hold no NUL character. The
    ``StorageError`` names the document's source and the chunk index; a driver
    error at that point would have quoted the offending text itself.
    """
    for document, chunks, chunk_terms in items:
        fields = [("its source", document.source), ("its document id", document.document_id)]
        if document.extractor is not None:
            fields.append(("its extractor", document.extractor))
        for chunk, terms in zip(chunks, chunk_terms, strict=True):
            index = chunk.chunk_index
            fields.append((f"the id of chunk {index}", chunk.chunk_id))
            fields.append((f"chunk {index}", chunk.content))
            if _unstorable("".join(terms), "", nul_allowed) is not None:
                # Rare: find the term at fault, so the position given is within it.
                fields.extend((f"a term of chunk {index}", term) for term in terms)
        for what, text in fields:
            problem = _unstorable(text, what, nul_allowed)
            if problem is not None:
                raise StorageError(f"could not store {document.source!r}: {problem}")


def _unstorable(text: str, what: str, nul_allowed: bool) -> str | None:
    if not nul_allowed and "\x00" in text:
        return (
            f"{what} holds a NUL character (at {text.index(chr(0))}), "
            "which PostgreSQL text cannot store"
        )
    return describe_unencodable(text, what)
