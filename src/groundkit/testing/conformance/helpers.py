"""Small builders and readers the conformance suites share; usable in any store's tests.

They go through the Protocol methods only, so they work on every implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from groundkit.contracts import Chunk, Document, DocumentRecord
from groundkit.storage.protocols import MetadataStoreProtocol, StoredChunk

__all__ = [
    "document_by_source",
    "document_chunks",
    "document_hashes",
    "document_sources",
    "make_document",
    "put",
    "put_document",
]


def make_document(
    source: str,
    pieces: Sequence[str],
    *,
    document_id: str | None = None,
    chunk_ids: Sequence[str] | None = None,
) -> tuple[Document, list[Chunk], list[list[str]]]:
    """A document whose chunks are ``pieces`` (joined by blank lines), terms split on spaces."""
    content = "\n\n".join(pieces)
    document = Document(document_id=document_id or f"doc:{source}", source=source, content=content)
    chunks: list[Chunk] = []
    start = 0
    for index, piece in enumerate(pieces):
        chunks.append(
            Chunk(
                chunk_id=chunk_ids[index] if chunk_ids else f"{document.document_id}#{index}",
                document_id=document.document_id,
                chunk_index=index,
                content=piece,
                start_offset=start,
                end_offset=start + len(piece),
            )
        )
        start += len(piece) + 2
    return document, chunks, [piece.split() for piece in pieces]


async def put_document(
    store: MetadataStoreProtocol,
    document: Document,
    chunks: Sequence[Chunk],
    terms: Sequence[Sequence[str]],
) -> None:
    """Store one document (one ``replace_documents`` call)."""
    await store.replace_documents([(document, chunks, terms)])


async def put(
    store: MetadataStoreProtocol, source: str, pieces: list[str], **kwargs: Any
) -> Document:
    """``make_document`` then ``put_document``; returns the document."""
    document, chunks, terms = make_document(source, pieces, **kwargs)
    await put_document(store, document, chunks, terms)
    return document


async def document_by_source(store: MetadataStoreProtocol, source: str) -> DocumentRecord | None:
    """The stored record of ``source``, or None."""
    async for record in store.iter_documents():
        if record.source == source:
            return record
    return None


async def document_sources(store: MetadataStoreProtocol) -> list[str]:
    """Every stored source, in order."""
    return [record.source async for record in store.iter_documents()]


async def document_hashes(store: MetadataStoreProtocol) -> dict[str, str]:
    """``{source: content_hash}`` of every stored document."""
    return {source: state.content_hash for source, state in (await store.document_states()).items()}


async def document_chunks(store: MetadataStoreProtocol, document_id: str) -> list[StoredChunk]:
    """The chunks of ``document_id`` in order (empty when it has none)."""
    return (await store.get_chunks_for_documents([document_id])).get(document_id, [])
