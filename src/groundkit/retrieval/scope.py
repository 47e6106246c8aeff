"""What a retriever snapshot may return: clearance and filters, decided per document.

Built on the first search that needs it (a filter, or a clearance), from one
read of ``MetadataStoreProtocol.chunk_owners``. Each decision is a boolean per
document, turned into a mask over the lexical index's positions and, for the
vector side, a set of document ids pushed into the store's query. Decisions
are cached per filter.

A clearance also defines the corpus (adr/0052-clearance-statistics.md): the
documents it admits are the lexical ``Corpus`` whose statistics every search
under it is scored with, as if the collection held nothing else. A filter only
narrows the results: its searches keep the statistics of the whole corpus.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from groundkit.lexical.bm25 import BM25Index, Corpus
from groundkit.retrieval.filters import Filter, field_kinds
from groundkit.retrieval.sensitivity import visible
from groundkit.storage.protocols import ChunkOwners, MetadataStoreProtocol

__all__ = ["EVERYTHING", "Allowed", "Scope"]

_CACHE_SIZE = 64


@dataclass(frozen=True, slots=True)
class Allowed:
    """Where one search may look. ``None`` means no restriction on that side.

    ``share`` is the fraction of indexed chunks allowed (1.0 when unrestricted);
    ``corpus`` the documents the clearance admits, whose statistics the search is
    scored with (None: every document's).
    """

    mask: npt.NDArray[np.bool_] | None
    document_ids: frozenset[str] | None
    share: float = 1.0
    corpus: Corpus | None = None

    @property
    def empty(self) -> bool:
        """Nothing may be returned. ``document_ids`` names current versions only (the
        vector side's), so a filter met only by past versions leaves it empty while
        the mask still admits their chunks to an ``as_of`` search."""
        if self.document_ids is None or self.document_ids:
            return False
        return self.mask is None or not bool(self.mask.any())


EVERYTHING = Allowed(None, None)


class Scope:
    """Documents visible under a clearance, and the subsets filters select."""

    def __init__(
        self,
        owners: ChunkOwners,
        index: BM25Index,
        clearance: str | None,
        store: MetadataStoreProtocol | None = None,
    ) -> None:
        self._store = store
        # Document sources, read on the first filter on ``source`` (``load_sources``).
        self._sources: list[str | None] | None = None
        self._ids = owners.document_ids
        self._fields = owners.fields
        # Vectors exist for current versions only: past ones never widen that side.
        self._current = (
            np.ones(len(self._ids), dtype=np.bool_)
            if owners.current is None
            else np.asarray(owners.current, dtype=np.bool_)
        )
        self._visible = np.fromiter(
            (visible(f, clearance) for f in owners.fields), dtype=np.bool_, count=len(self._ids)
        )
        self.kinds = field_kinds(f for f, v in zip(owners.fields, self._visible, strict=True) if v)
        self._position_owner = _owner_positions(owners, index.keys)
        # What the clearance admits, per lexical position; None when it hides nothing.
        self.corpus: Corpus | None = None
        if not self._visible.all():
            self.corpus = index.corpus(self._positions(self._visible))
        self._cache: OrderedDict[str, Allowed] = OrderedDict()

    @classmethod
    async def load(
        cls, store: MetadataStoreProtocol, index: BM25Index, clearance: str | None
    ) -> Scope:
        return cls(await store.chunk_owners(), index, clearance, store)

    def _positions(self, docs: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        """A per-document decision as a mask over the lexical positions."""
        # The appended False is where the -1 owners of vanished chunks land.
        mask: npt.NDArray[np.bool_] = np.append(docs, False)[self._position_owner]
        return mask

    async def load_sources(self) -> None:
        """Read every document's source once, for filters on ``source``. A document
        written since the owners were read has none here and is not let through (the
        row check after the search judges it on its own source)."""
        if self._sources is not None or self._store is None:
            return
        by_id = {r.document_id: r.source async for r in self._store.iter_documents()}
        self._sources = [by_id.get(i) for i in self._ids]

    def allowed(self, flt: Filter | None) -> Allowed:
        """Where a search with ``flt`` may look; ``RetrievalError`` for a bad field or type."""
        if flt is not None:
            flt.check_schema(self.kinds)
        key = "" if flt is None else flt.key
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        docs = self._visible.copy()
        if flt is not None:
            sources = self._sources if flt.needs_source else None
            if flt.needs_source and sources is None:
                raise RuntimeError("Scope.load_sources() must run before a filter on source")
            for i in np.flatnonzero(docs).tolist():
                docs[i] = flt.matches(self._fields[i], sources[i] if sources else None)
        if docs.all():
            allowed = EVERYTHING
        else:
            corpus = self.corpus
            # The clearance alone: its mask is the corpus's (the index then adds nothing).
            mask = corpus.mask if flt is None and corpus is not None else self._positions(docs)
            ids = frozenset(self._ids[i] for i in np.flatnonzero(docs & self._current).tolist())
            allowed = Allowed(mask, ids, float(mask.mean()) if mask.size else 0.0, corpus)
        self._cache[key] = allowed
        if len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return allowed


def _owner_positions(owners: ChunkOwners, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Owner of each lexical position; -1 for a chunk gone since the index was built."""
    out = np.full(keys.shape, -1, dtype=np.int64)
    if owners.keys.size == 0 or keys.size == 0:
        return out
    order = np.argsort(owners.keys)
    sorted_keys = owners.keys[order]
    at = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.size - 1)
    found = sorted_keys[at] == keys
    out[found] = owners.owners[order][at[found]]
    return out
