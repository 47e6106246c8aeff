"""The storage seams: metadata store, vector store, snapshot store, and their row types.

Everything groundkit persists goes through one of these three Protocols. Each has
a conformance suite in ``groundkit.testing`` that every implementation runs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from groundkit.contracts import (
    GAPS_KEY,
    Chunk,
    Citation,
    CollectionManifest,
    Document,
    DocumentRecord,
    EmbeddingIdentity,
    FieldValue,
    SourceClass,
    citation_for,
    metadata_without_gaps,
)

__all__ = [
    "ChangeLog",
    "ChunkOwners",
    "ChunkPostings",
    "Compaction",
    "ConfirmedVectors",
    "DocumentState",
    "ErasedRows",
    "ErasingVectorStore",
    "Generations",
    "LexicalDelta",
    "MetadataStoreProtocol",
    "SnapshotStore",
    "StoredChunk",
    "VectorErasure",
    "VectorHit",
    "VectorInventory",
    "VectorStoreProtocol",
    "cosine_to_score",
    "metadata_json",
    "score_to_cosine",
    "stored_metadata",
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
    # The document version the chunk belongs to, when it became current (seconds
    # since the epoch) and when it stopped (None: it still is).
    version: int = 1
    valid_from: float = 0.0
    valid_to: float | None = None

    @property
    def current(self) -> bool:
        return self.valid_to is None

    def without_gaps(self) -> StoredChunk:
        """This row with its document's chunk gaps left out of the metadata, as
        searches hold and return rows (only passages need the gaps)."""
        if GAPS_KEY not in self.metadata:
            return self
        return dataclasses.replace(self, metadata=metadata_without_gaps(self.metadata))

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
        return citation_for(
            document_id=self.document_id,
            chunk_id=self.chunk_id,
            source=self.source,
            source_class=self.source_class,
            extractor=self.extractor,
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            metadata=self.metadata,
            version=self.version,
        )


class Generations(NamedTuple):
    """The two counters readers compare to notice writes.

    ``text`` moves with every change to documents, chunks or bindings (readers
    rebuild what they derived from them); ``vectors`` moves whenever the vector
    side changed (readers refresh their vector handle, nothing else).
    """

    text: int
    vectors: int


# Every row a vector store holds: ``{chunk_id: document_id}``.
VectorInventory = dict[str, str]


@dataclass(frozen=True, slots=True)
class ConfirmedVectors:
    """The documents whose vectors the metadata store confirms, and their chunk ids."""

    documents: frozenset[str]
    chunks: frozenset[str]


def metadata_json(metadata: Mapping[str, Any]) -> str:
    """Document metadata as every store keeps it: JSON with sorted keys (others as str)."""
    return json.dumps(metadata, sort_keys=True, default=str)


def stored_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` as it reads back from a store (JSON types), for comparing with
    ``DocumentState.metadata``."""
    return dict(json.loads(metadata_json(metadata)))


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
    frequencies ``tfs`` at the same positions. ``order`` (``(n, 3)``, see
    ``groundkit.lexical.segment.order_key``) is each chunk's canonical tie key;
    ``valid_from``/``valid_to`` (seconds since the epoch, ``inf`` while current,
    ``-inf`` for a removed chunk) its version's validity. They are optional
    only for batches built by hand.
    """

    keys: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    term_ids: npt.NDArray[np.int32]
    tfs: npt.NDArray[np.int32]
    order: npt.NDArray[np.uint64] | None = None
    valid_from: npt.NDArray[np.float64] | None = None
    valid_to: npt.NDArray[np.float64] | None = None


@dataclass(frozen=True, slots=True)
class LexicalDelta:
    """What changed for the lexical index since ``(after_key, since_generation)``,
    read from one snapshot of the store at ``generation``: the postings of chunks
    written since and the log of chunks that stopped being current since."""

    generation: int
    changes: ChangeLog
    postings: list[ChunkPostings]
    # Current chunks in the store at ``generation`` (kept by the store itself, so the
    # index can be checked against it at no cost); None from a store that cannot say.
    live_chunks: int | None = None


@dataclass(frozen=True, slots=True)
class ChangeLog:
    """Chunks that stopped being current since a generation, as the store recorded them.

    Entry ``i``: chunk ``keys[i]`` left the current view at ``valid_to[i]``
    (``-inf``: it was removed outright), with its term ids
    ``term_ids[offsets[i]:offsets[i+1]]`` and ``lengths[i]`` terms in all.
    ``complete`` is False when the log no longer reaches back to the generation
    asked for (it was pruned): the caller must rebuild instead.
    """

    complete: bool
    keys: npt.NDArray[np.int64]
    valid_to: npt.NDArray[np.float64]
    offsets: npt.NDArray[np.int64]
    term_ids: npt.NDArray[np.int32]
    lengths: npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class ErasedRows:
    """What ``MetadataStoreProtocol.erase_documents`` removed: documents, their past
    versions, their chunk rows (every version) and the terms no chunk used any more."""

    documents: int = 0
    versions: int = 0
    chunks: int = 0
    terms: int = 0


@dataclass(frozen=True, slots=True)
class Compaction:
    """What ``MetadataStoreProtocol.compact`` did: how many bytes the store's files
    shrank by, and why it could not finish (None: it did)."""

    bytes_reclaimed: int = 0
    unfinished: str | None = None


@dataclass(frozen=True, slots=True)
class ChunkOwners:
    """Which document owns each chunk, and every document's fields.

    What filters and clearances read: they decide per document, then mask
    chunks. ``owners[i]`` indexes ``document_ids`` and ``fields`` for chunk
    ``keys[i]``; a document with past versions has one entry per version (each
    version's own fields), and ``current[j]`` tells whether entry ``j`` is the
    current one (None: every entry is). One consistent snapshot of the store.
    """

    keys: npt.NDArray[np.int64]
    owners: npt.NDArray[np.int64]
    document_ids: list[str]
    fields: list[dict[str, FieldValue]]
    current: list[bool] | None = None


@runtime_checkable
class MetadataStoreProtocol(Protocol):
    """Documents, chunks and collection state for one collection: the source of truth.

    Every write is atomic and bumps ``generation``; a document and its chunks
    are replaced together or not at all. Every failure is a ``StorageError``.
    """

    async def close(self) -> None: ...

    async def generation(self) -> int: ...

    async def generations(self) -> Generations:
        """Both counters, read at once (checked before every search)."""
        ...

    async def get_base_dir(self) -> str | None: ...

    async def set_base_dir(self, base_dir: str) -> None: ...

    async def get_analyzer(self) -> str | None: ...

    async def bind_analyzer(self, identity: str) -> str:
        """Record ``identity`` if no analyzer is bound yet; return the bound one.

        A compare-and-set: an existing binding is never overwritten, and the
        caller (``groundkit.storage.binding``) decides what a mismatch means.
        """
        ...

    async def get_chunker(self) -> str | None: ...

    async def bind_chunker(self, identity: str) -> str:
        """Record the chunker ``identity`` if none is bound yet; return the bound one
        (a compare-and-set, like ``bind_analyzer``)."""
        ...

    async def read_manifest(self) -> CollectionManifest | None: ...

    async def bind_embedding(self, identity: EmbeddingIdentity) -> CollectionManifest:
        """Record a manifest for ``identity`` if none exists; return the bound manifest.

        The first binding bumps ``generation`` (open readers learn that dense
        search became possible); an existing manifest is returned unchanged.
        """
        ...

    async def document_states(
        self, *, sources: Sequence[str] | None = None, under: str | None = None
    ) -> dict[str, DocumentState]:
        """``{source: state}`` of the stored documents, metadata as stored (JSON types):
        every one, or those ``sources`` names, or those whose source is ``under`` or
        lies beneath it (``under/...``). Both given: documents matching either. A
        one-file ingest then reads one row, not a whole large collection."""
        ...

    def iter_documents(self) -> AsyncIterator[DocumentRecord]:
        """Every document with its chunk count, in source order."""
        ...

    async def replace_documents(
        self,
        items: Sequence[tuple[Document, Sequence[Chunk], Sequence[Sequence[str]]]],
        *,
        valid_as_of: datetime | None = None,
        keep_versions: int | None = None,
    ) -> frozenset[str]:
        """Store documents and their chunks (with analysed terms) in one transaction.

        A document already stored under the same source becomes a past version:
        its chunks stay, marked no longer current from the new version's start
        (``valid_as_of`` when given, else now), and the new one gets the next
        version number. ``keep_versions`` bounds the past versions kept per
        document (``None``: all; ``0``: none, a replaced version is removed).
        A document whose current row already is what would be written (same id,
        content hash, source class, extractor and metadata: another writer stored
        it since the caller looked) is left as it is, checked inside the
        transaction; a call that leaves every document so writes nothing.
        Returns the sources of the documents it left so (empty when it wrote them
        all), so that a caller's report counts only what its own write stored.
        """
        ...

    async def delete_documents(self, sources: Sequence[str]) -> frozenset[str]:
        """Remove documents, with every version and chunk, by source in one
        transaction; returns the sources of the documents this call removed (one
        another writer removed first is not among them, so each removal is reported
        once)."""
        ...

    async def purge_versions(self, keep: int) -> int:
        """Remove all but the ``keep`` newest past versions of every document;
        returns how many versions went."""
        ...

    async def find_documents(
        self, *, document_ids: Sequence[str] = (), sources: Sequence[str] = ()
    ) -> list[DocumentRecord]:
        """The stored documents whose id is one of ``document_ids`` or whose source is
        one of ``sources``, each once, in source order; names that match nothing are
        left out. Looked up by key: the cost follows the names asked for, not the
        size of the collection."""
        ...

    async def erase_documents(self, sources: Sequence[str]) -> ErasedRows:
        """Remove documents by source like ``delete_documents`` (every version and
        chunk, logged as removed), then every term that no retained chunk uses, in
        one transaction. Terms that stay keep their ids, and no id is handed out
        twice: a removed term written again gets a new one. The term sweep runs even
        when no source matches, so running an interrupted erase again completes it."""
        ...

    async def compact(self) -> Compaction:
        """Rewrite the store's own files so that removed rows leave no bytes in them
        (free pages, logs of past writes), as far as the store can; what it could not
        do is named in ``unfinished``. Slow on a large store: erasure only."""
        ...

    async def collection_uid(self) -> str:
        """A random id fixed when the collection was created: tells two stores apart."""
        ...

    async def term_ids(self, terms: Sequence[str]) -> dict[str, int]:
        """``{term: term_id}`` for the terms that have an id (a query's lookup)."""
        ...

    def postings_since(
        self, after_key: int, batch_size: int = 50_000
    ) -> AsyncIterator[ChunkPostings]:
        """Postings of every retained chunk whose key is above ``after_key`` (keys only
        grow), current or not, with tie keys and validity, in key order."""
        ...

    async def changes_since(self, generation: int) -> ChangeLog:
        """Chunks that left the current view in generations after ``generation``."""
        ...

    async def lexical_delta(self, after_key: int, since_generation: int) -> LexicalDelta:
        """``postings_since(after_key)`` and ``changes_since(since_generation)`` read
        from one snapshot, with the generation of that snapshot (so a write landing
        meanwhile is wholly in the delta or wholly out of it)."""
        ...

    async def prune_changes(self, through_generation: int) -> None:
        """Forget the change log up to and including ``through_generation`` (a
        persisted index covers it)."""
        ...

    async def chunk_count(self) -> int: ...

    async def document_ids(self) -> set[str]: ...

    async def documents_missing_vectors(self) -> list[str]:
        """Ids of documents whose current content has no confirmed vectors (by source)."""
        ...

    async def mark_vectors_stored_many(self, items: Sequence[tuple[str, str]]) -> None:
        """Confirm vectors for ``(document_id, content_hash)`` pairs; a pair whose
        content changed meanwhile is ignored. Bumps the vectors generation only:
        no text changed."""
        ...

    async def forget_vectors(self, document_ids: Sequence[str] | None = None) -> None:
        """Withdraw the confirmation of these documents' vectors (``None``: of every
        document), so the next ingest embeds them again. Bumps the vectors generation."""
        ...

    async def bump_vectors_generation(self) -> None:
        """Record that the vector side changed without a confirmation changing
        (orphan rows removed), so open readers refresh their vector handle."""
        ...

    async def confirmed_vectors(self) -> ConfirmedVectors:
        """Every document whose vectors are confirmed, and the ids of their chunks."""
        ...

    async def confirmed_vector_count(self) -> int:
        """How many chunks belong to documents whose vectors are confirmed."""
        ...

    async def get_chunks_for_documents(
        self, document_ids: Sequence[str]
    ) -> dict[str, list[StoredChunk]]:
        """``{document_id: chunks in order}``; ids with no chunks are absent."""
        ...

    async def get_chunks_by_ids(self, chunk_ids: Sequence[str]) -> Mapping[str, StoredChunk]:
        """Current chunks by id (what the vector side points at)."""
        ...

    async def get_chunk(self, chunk_id: str, version: int | None = None) -> StoredChunk | None:
        """The chunk with this id in document version ``version``; without a version,
        the current one, else the newest past one; None when there is none."""
        ...

    async def current_chunk_ids(self, keys: Sequence[int]) -> Mapping[int, str]:
        """``{key: chunk id}`` for those of ``keys`` whose chunk is current; past,
        removed and unknown keys are absent.

        Hybrid search fuses its lexical candidates by id and reads the rows of the few
        it returns afterwards, so it asks for ids alone: two columns by primary key."""
        ...

    async def get_chunks_by_keys(self, keys: Sequence[int]) -> Mapping[int, StoredChunk]:
        """Chunks by key, current or past (each joined to its own version's document).

        This is how a search reads its hits, so the metadata leaves out the document's
        chunk gaps (``GAPS_KEY``): one entry per chunk of the document, needed only to
        rebuild passages, which read rows by id."""
        ...

    def iter_chunks(self, batch_size: int = 1000) -> AsyncIterator[list[StoredChunk]]:
        """Every current chunk joined to its document, by ``(source, chunk_index)``."""
        ...

    async def vocabulary(self, after: int = 0) -> dict[str, int]:
        """``{term: term_id}`` of every term ever written whose id is above ``after``
        (ids only grow, so a reader that knows the terms up to an id asks for the rest)."""
        ...

    def iter_postings(self, batch_size: int = 50_000) -> AsyncIterator[ChunkPostings]:
        """Postings of every retained chunk (current or not, with tie keys and
        validity) in canonical order: ``(content_hash, chunk_index, document_id)``."""
        ...

    async def chunk_owners(self) -> ChunkOwners:
        """Every retained chunk's owning document version and its fields, read at once."""
        ...


@dataclass(frozen=True, slots=True)
class VectorHit:
    """One nearest neighbour.

    ``score`` is ``(1 + cos) / 2``, in ``[0, 1]``: monotone in cosine (so the
    ranking is cosine's), non-negative as score thresholds expect, and unlike
    ``max(cos, 0)`` it does not flatten every negative cosine into one tie.
    ``0.5`` is an orthogonal vector. Higher is better.
    """

    chunk_id: str
    document_id: str
    score: float


def cosine_to_score(cosine: float) -> float:
    """The ``VectorHit.score`` of a cosine similarity (clamped against rounding)."""
    return min(1.0, max(0.0, (1.0 + cosine) / 2.0))


def score_to_cosine(score: float) -> float:
    """The cosine similarity behind a ``VectorHit.score`` (``cosine_to_score`` undone)."""
    return 2.0 * score - 1.0


@runtime_checkable
class VectorStoreProtocol(Protocol):
    """Chunk vectors of one collection, written and deleted by whole document.

    Invalid input is refused before anything is written: ``IngestionError``
    from writes, ``RetrievalError`` from ``query``; a backend failure is a
    ``StorageError``.
    """

    @property
    def dimensions(self) -> int: ...

    async def upsert_documents(
        self,
        items: Sequence[tuple[str, Sequence[str], npt.ArrayLike]],
        *,
        content_hashes: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Make each ``(document_id, chunk_ids, vectors)`` the document's only rows.

        One write for the whole batch. ``content_hashes`` maps a document id to
        the hash of each chunk's text, in ``chunk_ids`` order;
        ``vectors_by_content`` finds the rows by it later.
        """
        ...

    async def vectors_by_content(
        self, content_hashes: Sequence[str]
    ) -> dict[str, npt.NDArray[np.float32]]:
        """``{content hash: vector}`` for the hashes that some stored row carries.

        The collection has one embedder, so a chunk text embedded once never
        needs embedding again: a re-ingest keeps the vectors of unchanged chunks.
        Rows written without a hash are never returned.
        """
        ...

    async def delete_documents(self, document_ids: Sequence[str]) -> int:
        """Remove every row of these documents; returns how many rows went."""
        ...

    async def query(
        self,
        vector: npt.ArrayLike,
        top_k: int,
        *,
        document_ids: Collection[str] | None = None,
    ) -> list[VectorHit]:
        """The ``top_k`` rows nearest by cosine, ordered by ``(-score, chunk_id)``.

        ``document_ids`` restricts the search to those documents before ranking,
        so ``top_k`` is still filled when enough of their rows exist.
        """
        ...

    async def count(self) -> int: ...

    async def document_ids(self) -> set[str]:
        """Every document with at least one row (for reconciling orphans)."""
        ...

    async def inventory(self) -> VectorInventory:
        """``{chunk_id: document_id}`` of every stored row, read in full.

        Reading every row's ids is what proves the store readable; a damaged
        store raises ``StorageError`` here.
        """
        ...

    async def problem(self) -> str | None:
        """Why this store cannot serve searches now (missing, unreadable), or None.

        Cheap: what it checks must be affordable before every open.
        """
        ...

    async def refresh(self) -> None:
        """See the writes other handles and processes committed since this one opened."""
        ...

    async def recover(self) -> str | None:
        """Make a damaged store usable again, keeping what can be kept.

        Returns what was done (for the ingest report), or None when nothing was
        needed. Rows it could not keep are simply absent afterwards: the caller
        compares ``inventory()`` with the metadata store and embeds them again.
        """
        ...

    async def optimize(self) -> None:
        """Housekeeping after a batch of writes; results must not change."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class VectorErasure:
    """What ``ErasingVectorStore.erase_documents`` removed: rows, older table versions
    and the bytes their files held."""

    rows: int = 0
    versions: int = 0
    bytes_removed: int = 0


@runtime_checkable
class ErasingVectorStore(Protocol):
    """A vector store that keeps copies of rows past their delete (older table
    versions, rows only marked deleted in files) and can remove them for good."""

    async def erase_documents(
        self, document_ids: Sequence[str], *, keep: Collection[str] | None = None
    ) -> VectorErasure:
        """Delete the rows of ``document_ids`` (and, with ``keep``, of every document
        not in it), then rewrite whatever still holds a deleted row and remove every
        older version, so no file of the store holds those rows any more."""
        ...


@runtime_checkable
class SnapshotStore(Protocol):
    """Where one collection's URL snapshots live, by document id.

    Ids are checked by ``groundkit.storage.names.check_snapshot_id`` before any
    path or object key is formed from them.
    """

    @property
    def location(self) -> str: ...

    async def read(self, document_id: str) -> bytes:
        """The stored bytes; ``OSError`` (``FileNotFoundError``) when there are none."""
        ...

    async def matches(self, document_id: str, content: str) -> bool:
        """Whether the stored bytes are exactly ``content`` as UTF-8 (an ingest skips
        rewriting a snapshot that matches; a part of it, or another case, is no match)."""
        ...

    async def write(self, document_id: str, content: str) -> None:
        """Store ``content`` whole: a reader sees the old bytes or the new, never part."""
        ...

    async def remove_stale(self, keep: Iterable[str]) -> list[str]:
        """Delete every snapshot whose id is not in ``keep`` (any iterable, read once);
        returns the removed ids."""
        ...
