"""Seams of the index layer: the metadata store and the lexical index."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from groundkit.contracts import (
    Chunk,
    Citation,
    CollectionManifest,
    Document,
    DocumentRecord,
    EmbeddingIdentity,
    FieldValue,
    SourceClass,
    page_at,
)

__all__ = [
    "ChunkOwners",
    "ChunkPostings",
    "DocumentState",
    "LexicalHit",
    "LexicalIndexProtocol",
    "MetadataStoreProtocol",
    "StoredChunk",
]


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A persisted chunk joined to its document, as flat fields.

    ``key`` is the store's row key. Flat because the search join builds many of
    these; ``chunk`` and ``document`` give the contract models when wanted.
    """

    key: int
    chunk_id: str
    chunk_index: int
    content: str
    start_offset: int
    end_offset: int
    document_id: str
    source: str
    document_hash: str
    ingested_at: str
    source_class: SourceClass
    extractor: str | None
    metadata: dict[str, Any]

    @property
    def chunk(self) -> Chunk:
        return Chunk(
            chunk_id=self.chunk_id,
            document_id=self.document_id,
            chunk_index=self.chunk_index,
            content=self.content,
            start_offset=self.start_offset,
            end_offset=self.end_offset,
        )

    @property
    def document(self) -> DocumentRecord:
        return DocumentRecord(
            document_id=self.document_id,
            source=self.source,
            content_hash=self.document_hash,
            ingested_at=self.ingested_at,
            source_class=self.source_class,
            extractor=self.extractor,
            metadata=self.metadata,
        )

    @property
    def citation(self) -> Citation:
        return Citation(
            document_id=self.document_id,
            chunk_id=self.chunk_id,
            source=self.source,
            source_class=self.source_class,
            extractor=self.extractor,
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            page=page_at(self.metadata, self.start_offset),
        )


@dataclass(frozen=True, slots=True)
class DocumentState:
    """What an ingest compares to decide whether a document changed."""

    content_hash: str
    source_class: SourceClass
    extractor: str | None
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ChunkPostings:
    """Term statistics of a batch of chunks, as written at ingest time.

    ``keys[i]``'s unique term ids are ``term_ids[offsets[i]:offsets[i+1]]`` with
    frequencies ``tfs`` at the same positions.
    """

    keys: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    term_ids: npt.NDArray[np.int32]
    tfs: npt.NDArray[np.int32]


@dataclass(frozen=True, slots=True)
class ChunkOwners:
    """Which document owns each chunk, and every document's fields.

    What filters and clearances read: they decide per document, then mask
    chunks. ``owners[i]`` indexes ``document_ids`` and ``fields`` for chunk
    ``keys[i]``. One consistent snapshot of the store.
    """

    keys: npt.NDArray[np.int64]
    owners: npt.NDArray[np.int64]
    document_ids: list[str]
    fields: list[dict[str, FieldValue]]


@dataclass(frozen=True, slots=True)
class LexicalHit:
    key: int
    score: float


@runtime_checkable
class MetadataStoreProtocol(Protocol):
    """Documents, chunks and collection state for one collection.

    Every write is atomic and bumps ``generation``; a document and its chunks
    are replaced together or not at all.
    """

    async def close(self) -> None: ...

    async def generation(self) -> int: ...

    async def get_base_dir(self) -> str | None: ...

    async def set_base_dir(self, base_dir: str) -> None: ...

    async def get_analyzer(self) -> str | None: ...

    async def set_analyzer(self, identity: str) -> None: ...

    async def read_manifest(self) -> CollectionManifest | None: ...

    async def write_manifest(self, identity: EmbeddingIdentity) -> CollectionManifest: ...

    async def document_hashes(self) -> dict[str, str]:
        """``{source: content_hash}`` of every stored document."""
        ...

    async def document_states(self) -> dict[str, DocumentState]:
        """``{source: state}`` of every stored document, metadata as stored (JSON types)."""
        ...

    async def get_document_sources(self) -> list[str]: ...

    async def get_document(self, source: str) -> DocumentRecord | None: ...

    def iter_documents(self) -> AsyncIterator[DocumentRecord]: ...

    async def replace_document(
        self,
        document: Document,
        chunks: Sequence[Chunk],
        chunk_terms: Sequence[Sequence[str]],
    ) -> None:
        """Store ``document`` and its chunks (with their analysed terms) in one transaction."""
        ...

    async def replace_documents(
        self, items: Sequence[tuple[Document, Sequence[Chunk], Sequence[Sequence[str]]]]
    ) -> None:
        """``replace_document`` for several documents, all in one transaction."""
        ...

    async def delete_documents(self, sources: Sequence[str]) -> int:
        """Delete documents (and chunks) by source in one transaction; returns how many."""
        ...

    async def chunk_count(self) -> int: ...

    async def document_ids(self) -> set[str]: ...

    async def documents_missing_vectors(self) -> list[str]:
        """Ids of documents whose current content has no confirmed vectors (by source)."""
        ...

    async def mark_vectors_stored(self, document_id: str, content_hash: str) -> None:
        """Confirm vectors for this content; ignored if the content changed meanwhile."""
        ...

    async def mark_vectors_stored_many(self, items: Sequence[tuple[str, str]]) -> None:
        """``mark_vectors_stored`` for ``(document_id, content_hash)`` pairs at once."""
        ...

    async def get_document_chunks(self, document_id: str) -> list[StoredChunk]: ...

    async def get_chunks_for_documents(
        self, document_ids: Sequence[str]
    ) -> dict[str, list[StoredChunk]]:
        """``{document_id: chunks in order}``; ids with no chunks are absent."""
        ...

    async def get_chunks_by_ids(self, chunk_ids: Sequence[str]) -> Mapping[str, StoredChunk]: ...

    async def get_chunk(self, chunk_id: str) -> StoredChunk | None: ...

    async def get_chunks_by_keys(self, keys: Sequence[int]) -> Mapping[int, StoredChunk]: ...

    def iter_chunks(self, batch_size: int = 1000) -> AsyncIterator[list[StoredChunk]]: ...

    async def vocabulary(self) -> dict[str, int]:
        """``{term: term_id}`` of every term ever written."""
        ...

    def iter_postings(self, batch_size: int = 50_000) -> AsyncIterator[ChunkPostings]:
        """Postings in canonical order: ``(content_hash, chunk_index, document_id)``."""
        ...

    async def chunk_owners(self) -> ChunkOwners:
        """Every chunk's owning document and every document's fields, read at once."""
        ...


@runtime_checkable
class LexicalIndexProtocol(Protocol):
    """An in-memory lexical index over one store snapshot."""

    @property
    def size(self) -> int: ...

    @property
    def keys(self) -> npt.NDArray[np.int64]:
        """Store keys of the indexed chunks, by position (what a mask lines up with)."""
        ...

    def search(
        self,
        query_terms: Sequence[str],
        top_k: int,
        *,
        score_threshold: float | None = None,
        mask: npt.NDArray[np.bool_] | None = None,
    ) -> list[LexicalHit]:
        """Best ``top_k`` chunks, ordered by ``(-score, canonical position)``.

        Chunks matching none of the terms are never returned; with ``mask``
        (one flag per position) neither are chunks whose flag is False. The
        mask applies before the cut, so ``top_k`` hits come back whenever that
        many allowed chunks match.
        """
        ...
