"""Derived state is checked against the source of truth, never trusted.

The metadata store says which documents have confirmed vectors; the vector
store is derived from it. Two checks keep them honest (adr/0029-reconcile-vectors.md):

- ``vector_problem`` before a collection serves dense or hybrid search: cheap
  (the store's own damage flag, one count on each side), so it runs at every
  open and after every write another process made. Counts cannot tell whose rows
  a table holds: the table's owner stamp does, checked by the store's own
  ``refresh()``, which refuses another collection's table
  (adr/0095-vector-table-owner.md).
- ``reconcile_vectors`` before an ingest writes anything: exact (every row's ids
  on both sides), and it repairs: the vector store recovers what it can, and
  every document whose rows do not match is un-confirmed so the ingest embeds it
  again. Orphan rows are removed at the end of the ingest, as before.

Order matters under concurrent writers: vectors are stored before they are
confirmed, so reading the confirmations first and the vector store second
never mistakes a write in flight for a loss. "Second" means the version the
vector store counts, not only the call: a handle reads the table version it was
last moved to, so ``vector_problem`` moves it to the latest version after the
confirmations are read. Rows are removed only after their confirmation is
(a document deleted or rewritten), so a shortfall seen while the metadata store
moved may be such a removal between the two reads: both are read again.
"""

from __future__ import annotations

from groundkit.storage.protocols import MetadataStoreProtocol, VectorStoreProtocol

__all__ = ["missing_vectors_notice", "reconcile_vectors", "vector_problem", "vectors_missing"]


async def vector_problem(
    metadata: MetadataStoreProtocol, vectors: VectorStoreProtocol
) -> str | None:
    """Why the vector side cannot serve searches that agree with the text, or None.

    Moves ``vectors`` to the table's latest version: a search that follows reads
    at least every row whose confirmation was counted here.
    """
    shortfall: str | None = None
    for _ in range(_CHECK_ATTEMPTS):
        before = await metadata.generations()
        expected = await metadata.confirmed_vector_count()
        # Only now: the version counted holds every row confirmed before this point.
        await vectors.refresh()
        own = await vectors.problem()
        if own is not None:
            return own
        if expected == 0:
            return None
        stored = await vectors.count()
        if stored >= expected:
            return None
        shortfall = (
            f"the vector store holds {stored} rows but {expected} chunks have confirmed "
            "vectors, so some were lost"
        )
        if await metadata.generations() == before:
            return shortfall
        # The metadata store moved between the two reads: a document deleted or
        # rewritten meanwhile loses its rows after its confirmation. Read both again.
    return shortfall


async def vectors_missing(metadata: MetadataStoreProtocol) -> int:
    """Current chunks whose document has no confirmed vectors: text an interrupted
    ingest stored without its vectors (or one still running). Two counts, cheap at
    any size; ``_sync_vectors`` of the next ingest embeds them."""
    missing = await metadata.chunk_count() - await metadata.confirmed_vector_count()
    return max(0, missing)


def missing_vectors_notice(count: int | None) -> str:
    """What a dense or hybrid answer says while ``count`` chunks have no vectors
    (None: some, the number withheld)."""
    if count is None:
        what = "some chunks have"
    else:
        what = f"{count} chunk{'s have' if count != 1 else ' has'}"
    return (
        f"{what} no vectors yet, so dense search cannot find them: an ingest was "
        "interrupted (the next ingest completes them) or is still running"
    )


async def reconcile_vectors(
    metadata: MetadataStoreProtocol, vectors: VectorStoreProtocol
) -> list[str]:
    """Repair the vector side before an ingest; returns what was repaired, for the report.

    Documents whose stored rows are missing, partial or extra lose their
    confirmation, so the ingest that follows embeds them again (reusing any
    vector still stored for the same chunk text). Rows of documents that are not
    confirmed are left to the ingest's own orphan sweep.
    """
    notes: list[str] = []
    recovered = await vectors.recover()
    if recovered is not None:
        notes.append(recovered)
    confirmed = await metadata.confirmed_vectors()
    if not confirmed.chunks:
        return notes
    stored = await vectors.inventory()
    if not stored:
        stale: set[str] | None = None  # every confirmed document lost its vectors
    else:
        stale = {
            document_id
            for chunk_id, document_id in stored.items()
            if document_id in confirmed.documents and chunk_id not in confirmed.chunks
        }
        missing = [chunk_id for chunk_id in confirmed.chunks if chunk_id not in stored]
        for start in range(0, len(missing), _LOOKUP_BATCH):
            rows = await metadata.get_chunks_by_ids(missing[start : start + _LOOKUP_BATCH])
            stale.update(row.document_id for row in rows.values())
        # A chunk stored more than once (two writers of one document, a retried append):
        # the document's upsert deletes every row it has and writes each chunk once.
        stale.update(d for d in await _repeated(vectors) if d in confirmed.documents)
    if stale is None or stale:
        await metadata.forget_vectors(None if stale is None else sorted(stale))
        count = len(confirmed.documents) if stale is None else len(stale)
        notes.append(
            f"{count} of {len(confirmed.documents)} documents had missing, mismatched or "
            "repeated vectors; embedding them again"
        )
    return notes


async def _repeated(vectors: VectorStoreProtocol) -> frozenset[str]:
    """Documents with a chunk stored more than once, from a store that can tell (the
    ``inventory()`` mapping keeps one row per chunk id)."""
    find = getattr(vectors, "repeated_documents", None)
    if find is None:
        return frozenset()
    return frozenset(await find())


# Missing chunk ids are mapped to their documents this many at a time.
_LOOKUP_BATCH = 5_000
# Reads of both sides before a shortfall is reported while other writers keep
# committing (each lasts a few milliseconds; a real loss shows at the first).
_CHECK_ATTEMPTS = 3
