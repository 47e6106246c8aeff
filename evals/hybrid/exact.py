"""The exact reference the defaults are measured against: LanceDB's flat scan of every row.

``ExactVectors`` hands a ``Retriever`` the collection's own store with every query
exact (``query(..., exact=True)``) and the in-memory copy turned off, so that
hybrid search over it is the hybrid ranking exact search gives, computed the way it
was computed before the in-memory path existed. Comparing against it measures both
the ANN index's recall and the in-memory path's agreement with LanceDB.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy.typing as npt

from groundkit.storage import LanceDBVectorStore
from groundkit.storage.protocols import VectorHit

__all__ = ["ExactVectors", "lance_exact"]


async def lance_exact(
    store: LanceDBVectorStore,
    vector: npt.ArrayLike,
    top_k: int,
    document_ids: Collection[str] | None = None,
) -> list[VectorHit]:
    """``store.query(..., exact=True)`` on LanceDB's flat scan, never the in-memory copy."""
    saved = store.memory_max_bytes
    store.memory_max_bytes = 0
    try:
        return await store.query(vector, top_k, document_ids=document_ids, exact=True)
    finally:
        store.memory_max_bytes = saved


class ExactVectors:
    """``store`` with every query answered by ``lance_exact``; everything else is the
    store's own."""

    def __init__(self, store: LanceDBVectorStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def query(self, vector: npt.ArrayLike, top_k: int, **options: Any) -> list[VectorHit]:
        return await lance_exact(self._store, vector, top_k, options.get("document_ids"))
