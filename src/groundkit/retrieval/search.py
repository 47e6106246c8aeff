"""The Retriever: validated queries in, citation-bearing results out.

A Retriever is a snapshot: it indexes the store as it was at ``open()``. Hits
are joined to their stored rows once, after ranking; a hit whose row has
since been replaced or deleted is dropped and counted in the response
metadata (``stale_dropped``), never returned with offsets that no longer
point at its text (adr/0005-stale-hits.md). ``Collection`` reopens its
Retriever whenever the store's generation moves, so it never drops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from groundkit.config import MAX_TOP_K, RetrievalConfig
from groundkit.contracts import RetrievalResult, SearchMode, SearchResponse
from groundkit.errors import ConfigurationError, IndexIdentityError, RetrievalError
from groundkit.index.analyzer import Analyzer
from groundkit.index.bm25 import BM25Index
from groundkit.index.protocols import (
    LexicalHit,
    LexicalIndexProtocol,
    MetadataStoreProtocol,
    StoredChunk,
)

__all__ = ["MAX_QUERY_CHARS", "SEARCH_MODES", "Retriever"]

logger = logging.getLogger("groundkit.retrieval")

MAX_QUERY_CHARS = 10_000
SEARCH_MODES: tuple[SearchMode, ...] = ("bm25", "dense", "hybrid")
# Above this many chunks a BM25 query costs milliseconds; run it off the loop.
_THREAD_THRESHOLD = 20_000


class Retriever:
    """Searches one collection as of ``open()``."""

    def __init__(
        self,
        store: MetadataStoreProtocol,
        lexical: LexicalIndexProtocol,
        *,
        analyzer: Analyzer,
        config: RetrievalConfig,
        generation: int,
        rows: dict[int, StoredChunk] | None = None,
    ) -> None:
        self._store = store
        self._lexical = lexical
        self._analyzer = analyzer
        self._config = config
        self.generation = generation
        self._rows = rows

    @classmethod
    async def open(
        cls,
        store: MetadataStoreProtocol,
        config: RetrievalConfig | None = None,
        *,
        analyzer: Analyzer | None = None,
    ) -> Retriever:
        """Rebuild the lexical index from ``store``; refuse a foreign analyzer."""
        cfg = config or RetrievalConfig()
        analyzer = analyzer or Analyzer()
        stored = await store.get_analyzer()
        if stored is not None and stored != analyzer.identity:
            raise IndexIdentityError(
                f"collection was indexed with {stored!r} but the retriever uses "
                f"{analyzer.identity!r}; open it with the same analyzer settings"
            )
        # Read first: if a write lands during the rebuild the Collection sees a
        # newer generation on its next search and reopens.
        generation = await store.generation()
        started = time.perf_counter()
        lexical = await BM25Index.from_store(store, k1=cfg.bm25_k1, b=cfg.bm25_b)
        rows = None
        if 0 < lexical.size <= cfg.preload_max_chunks:
            rows = {s.key: s async for batch in store.iter_chunks(5000) for s in batch}
        logger.info(
            "retriever opened: %d chunks in %.0f ms",
            lexical.size,
            (time.perf_counter() - started) * 1000,
        )
        return cls(store, lexical, analyzer=analyzer, config=cfg, generation=generation, rows=rows)

    @property
    def config(self) -> RetrievalConfig:
        return self._config

    @property
    def size(self) -> int:
        return self._lexical.size

    async def search(
        self, query: str, top_k: int | None = None, *, mode: SearchMode = "bm25"
    ) -> SearchResponse:
        started = time.perf_counter()
        k = _validate(query, top_k, mode, self._config)
        if mode != "bm25":
            raise ConfigurationError(
                f"mode {mode!r} needs an embedder and a vector store; this retriever has "
                "neither (dense retrieval ships with groundkit[dense,local])"
            )
        terms = self._analyzer.terms(query)
        threshold = self._config.score_threshold
        hits: list[LexicalHit]
        if not terms:
            hits = []
        elif self._lexical.size > _THREAD_THRESHOLD:
            hits = await asyncio.to_thread(
                self._lexical.search, terms, k, score_threshold=threshold
            )
        else:
            hits = self._lexical.search(terms, k, score_threshold=threshold)
        results, stale = await self._join(hits)
        meta: dict[str, Any] = {
            "stage": "bm25",
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
            "generation": self.generation,
            "stale_dropped": stale,
        }
        if stale:
            logger.warning("%d hits dropped: their documents changed after open()", stale)
        return SearchResponse(
            query=query, mode=mode, results=results, total_results=len(results), metadata=meta
        )

    async def _join(self, hits: list[LexicalHit]) -> tuple[list[RetrievalResult], int]:
        if not hits:
            return [], 0
        rows: Mapping[int, StoredChunk]
        if self._rows is not None and await self._store.generation() == self.generation:
            rows = self._rows  # the snapshot is still the store: no read needed
        else:
            rows = await self._store.get_chunks_by_keys([h.key for h in hits])
        results = [
            _result(stored, hit.score) for hit in hits if (stored := rows.get(hit.key)) is not None
        ]
        return results, len(hits) - len(results)


def _result(stored: StoredChunk, score: float) -> RetrievalResult:
    # Rows were validated as Chunks when written and BM25 scores are finite and
    # positive by construction, so this hot path skips re-validation.
    return RetrievalResult.model_construct(
        content=stored.content,
        score=score,
        document_id=stored.document_id,
        chunk_id=stored.chunk_id,
        chunk_index=stored.chunk_index,
        source=stored.source,
        source_class=stored.source_class,
        extractor=stored.extractor,
        start_offset=stored.start_offset,
        end_offset=stored.end_offset,
        metadata=stored.metadata,
    )


def _validate(query: object, top_k: object, mode: object, config: RetrievalConfig) -> int:
    if not isinstance(query, str) or not query.strip():
        raise RetrievalError("query must be a non-empty string")
    if len(query) > MAX_QUERY_CHARS:
        raise RetrievalError(f"query is longer than {MAX_QUERY_CHARS} characters")
    if mode not in SEARCH_MODES:
        raise RetrievalError(f"unknown mode {mode!r}; choose one of {', '.join(SEARCH_MODES)}")
    k = config.top_k if top_k is None else top_k
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_TOP_K:
        raise RetrievalError(f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")
    return k
