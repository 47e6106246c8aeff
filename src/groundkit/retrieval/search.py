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
import math
import time
from collections.abc import Mapping
from typing import Any

from groundkit.config import MAX_TOP_K, RetrievalConfig
from groundkit.contracts import (
    Highlights,
    RetrievalResult,
    SearchMode,
    SearchResponse,
    fields_of,
)
from groundkit.errors import (
    ConfigurationError,
    RerankerNotConfiguredError,
    RetrievalError,
    StorageError,
)
from groundkit.lexical.analyzer import Analyzer
from groundkit.lexical.bm25 import BM25Index
from groundkit.lexical.protocols import LexicalHit, LexicalIndexProtocol
from groundkit.providers.identity import ensure_identity
from groundkit.providers.protocols import EmbeddingProtocol
from groundkit.retrieval._tasks import both
from groundkit.retrieval.filters import Filter, parse_filters
from groundkit.retrieval.fusion import convex_combination, reciprocal_rank_fusion
from groundkit.retrieval.rerank import RerankerProtocol
from groundkit.retrieval.scope import EVERYTHING, Allowed, Scope
from groundkit.retrieval.sensitivity import check_clearance, visible
from groundkit.storage.binding import check_analyzer, check_embedding
from groundkit.storage.protocols import (
    MetadataStoreProtocol,
    StoredChunk,
    VectorHit,
    VectorStoreProtocol,
)
from groundkit.storage.reconcile import vector_problem
from groundkit.telemetry import SPAN_RERANK, SPAN_SEARCH, traced
from groundkit.utils.text import describe_unencodable

__all__ = ["MAX_QUERY_CHARS", "SEARCH_MODES", "Retriever", "validate_request"]

logger = logging.getLogger("groundkit.retrieval")

MAX_QUERY_CHARS = 10_000
SEARCH_MODES: tuple[SearchMode, ...] = ("bm25", "dense", "hybrid")
# Above this many chunks a BM25 query costs milliseconds; run it off the loop.
_THREAD_THRESHOLD = 20_000
# A vector search restricted to at least this share of the chunks ranks
# k / share * depth rows unrestricted and keeps the allowed ones; measured at
# 100k rows: 37 ms for 400 rows against 76 ms for 100 rows behind a predicate
# holding half the documents (docs/benchmarks-filters.md).
_POSTFILTER_MIN_SHARE = 0.25
_POSTFILTER_DEPTH = 2


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
        embedder: EmbeddingProtocol | None = None,
        vector_store: VectorStoreProtocol | None = None,
        dense_bound: bool = False,
        vector_problem: str | None = None,
        vectors_generation: int = 0,
        reranker: RerankerProtocol | None = None,
        collection: str | None = None,
        clearance: str | None = None,
    ) -> None:
        self._reranker = reranker
        self.clearance = check_clearance(clearance)
        self._scope: Scope | None = None
        self._scope_lock = asyncio.Lock()
        # A label for telemetry only: the store does not know its own name.
        self.collection = collection
        self._store = store
        self._lexical = lexical
        self._analyzer = analyzer
        self._config = config
        self.generation = generation
        self._rows = rows
        self._embedder = embedder
        self._vectors = vector_store
        self._dense_bound = dense_bound
        # Why dense and hybrid searches cannot use the vectors now (None: they can).
        self.vector_problem = vector_problem
        self.vectors_generation = vectors_generation

    @classmethod
    async def open(
        cls,
        store: MetadataStoreProtocol,
        config: RetrievalConfig | None = None,
        *,
        analyzer: Analyzer | None = None,
        embedder: EmbeddingProtocol | None = None,
        vector_store: VectorStoreProtocol | None = None,
        reranker: RerankerProtocol | None = None,
        collection: str | None = None,
        clearance: str | None = None,
    ) -> Retriever:
        """Rebuild the lexical index from ``store``; refuse a foreign analyzer or embedder.

        With a ``clearance`` (a level of ``SENSITIVITY_LEVELS``) no chunk of a
        document labelled above it is ever returned.

        With an embedder, the collection's manifest is checked first: another
        embedding identity is an ``IndexIdentityError``. A bound collection whose
        vector side is missing or damaged still opens: its dense and hybrid
        searches answer from BM25 and say why (``RetrievalConfig.vector_fallback``).
        """
        cfg = config or RetrievalConfig()
        check_clearance(clearance)
        analyzer = analyzer or Analyzer()
        if (embedder is None) != (vector_store is None):
            raise ConfigurationError("an embedder and a vector store go together: give both")
        check_analyzer(await store.get_analyzer(), analyzer.identity, collection)
        # Read first: if a write lands during the rebuild the Collection sees a
        # newer generation on its next search and reopens.
        generation, vectors_generation = await store.generations()
        dense_bound, problem = False, None
        if embedder is not None and vector_store is not None:
            dense_bound, problem = await _check_dense_side(
                store, embedder, vector_store, collection
            )
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
        return cls(
            store,
            lexical,
            analyzer=analyzer,
            config=cfg,
            generation=generation,
            rows=rows,
            embedder=embedder,
            vector_store=vector_store,
            dense_bound=dense_bound,
            vector_problem=problem,
            vectors_generation=vectors_generation,
            reranker=reranker,
            collection=collection,
            clearance=clearance,
        )

    async def refresh_vectors(self, vectors_generation: int) -> None:
        """Catch up with vector writes made since open (another process's ingest):
        move the vector handle to the latest version and check it again."""
        if self._vectors is None or self._embedder is None:
            self.vectors_generation = vectors_generation
            return
        await self._vectors.refresh()
        _, self.vector_problem = await _check_dense_side(
            self._store, self._embedder, self._vectors, self.collection
        )
        self.vectors_generation = vectors_generation

    @property
    def config(self) -> RetrievalConfig:
        return self._config

    @property
    def size(self) -> int:
        return self._lexical.size

    async def search(
        self,
        query: str,
        top_k: int | None = None,
        *,
        mode: SearchMode = "bm25",
        rerank: bool = False,
        filters: Mapping[str, Any] | None = None,
    ) -> SearchResponse:
        """Rank chunks for ``query``; with ``rerank`` the cross-encoder reorders the
        best ``rerank_depth`` candidates of the chosen mode.

        ``filters`` (``{field: {op: value}}``, groundkit/retrieval/filters.py)
        restrict the candidates before ranking on every path, so ``top_k``
        results come back whenever that many chunks match.

        Traced as ``groundkit.retrieve.search``; the query never reaches the span
        (groundkit/telemetry.py).
        """
        k = self._config.top_k if top_k is None else top_k
        with traced(SPAN_SEARCH, collection=self.collection, mode=mode, top_k=k) as span:
            response = await self._search(query, top_k, mode=mode, rerank=rerank, filters=filters)
            if span.recording:
                meta = response.metadata
                span.set(
                    stage=meta["stage"],
                    result_count=response.total_results,
                    stale_dropped=meta["stale_dropped"],
                    generation=self.generation,
                    rerank=rerank,
                )
            return response

    async def _search(
        self,
        query: str,
        top_k: int | None,
        *,
        mode: SearchMode,
        rerank: bool,
        filters: Mapping[str, Any] | None,
    ) -> SearchResponse:
        started = time.perf_counter()
        final_k = validate_request(query, top_k, mode, self._config)
        flt = parse_filters(filters)
        if mode != "bm25":
            self._require_dense(mode)
        if rerank and self._reranker is None:
            raise RerankerNotConfiguredError(
                "rerank=True needs a reranker: open with reranker=CrossEncoderReranker(...)"
            )
        k = max(final_k, self._config.rerank_depth) if rerank else final_k
        timings: dict[str, float] = {}
        allowed = await self._allowed(flt)
        degraded: str | None = None
        served: SearchMode = mode
        if mode != "bm25" and self.vector_problem is not None:
            degraded, served = self._fall_back(self.vector_problem), "bm25"
        try:
            results, stale = await self._ranked(query, k, served, timings, allowed)
        except _VectorsUnavailable as exc:
            # The vector store failed in this search (damage that no cheap check sees).
            degraded, served = self._fall_back(exc.reason), "bm25"
            timings.clear()
            results, stale = await self._ranked(query, k, served, timings, allowed)
        if flt is not None or self.clearance is not None:
            # The masks were decided at the first filtered search; a document
            # written since is judged here, on the row that is being returned.
            kept = [r for r in results if self._admits(r.metadata, flt, r.source)]
            stale += len(results) - len(kept)
            results = kept
        stage: str = "fusion" if served == "hybrid" else served
        if rerank and self._reranker is not None:
            with traced(
                SPAN_RERANK, collection=self.collection, candidate_count=len(results), top_k=final_k
            ) as span:
                results = await self._reranker.rerank(query, results, top_k=final_k)
                span.set(result_count=len(results))
            stage = "rerank"
        meta: dict[str, Any] = {
            "stage": stage,
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
            "generation": self.generation,
            "stale_dropped": stale,
            "filtered": flt is not None,
        }
        if degraded is not None:
            meta["degraded"] = degraded
        if timings:
            meta["timings_ms"] = {name: round(ms, 3) for name, ms in timings.items()}
        if stale:
            logger.warning("%d hits dropped: their documents changed after open()", stale)
        # Built from already-valid parts; skipping re-validation of every result
        # matters on small corpora, where it cost as much as scoring.
        return SearchResponse.model_construct(
            query=query, mode=mode, results=results, total_results=len(results), metadata=meta
        )

    async def _ranked(
        self,
        query: str,
        k: int,
        mode: SearchMode,
        timings: dict[str, float],
        allowed: Allowed,
    ) -> tuple[list[RetrievalResult], int]:
        """The ranked results of one mode, and how many hits were dropped as stale."""
        if allowed.empty:
            return [], 0
        if mode == "bm25":
            terms = self._analyzer.terms(query)
            hits = await self._lexical_hits(terms, k, self._config.score_threshold, allowed)
            return await self._join(hits, frozenset(terms))
        if mode == "dense":
            return await self._dense(query, k, timings, allowed)
        return await self._hybrid(query, k, timings, allowed)

    async def _dense(
        self, query: str, k: int, timings: dict[str, float], allowed: Allowed
    ) -> tuple[list[RetrievalResult], int]:
        """Dense hits joined to their rows; rows written since the vector handle moved
        (another process's ingest in flight) are made up for by asking for more."""
        threshold = self._config.score_threshold
        depth = k
        while True:
            dense = await self._dense_hits(query, depth, timings, allowed)
            fetched = len(dense)
            if threshold is not None:
                dense = [h for h in dense if h.score >= threshold]
            results, stale = await self._join_ids([(h.chunk_id, h.score) for h in dense])
            if len(results) >= k or stale == 0 or fetched < depth or depth >= MAX_TOP_K:
                return results[:k], stale
            depth = min(MAX_TOP_K, depth + 2 * stale)

    def _fall_back(self, reason: str) -> str:
        """The notice a search answered from BM25 carries; ``StorageError`` when the
        configuration says to refuse instead."""
        notice = f"vector search unavailable, results are BM25 only: {reason}"
        if self._config.vector_fallback == "error":
            raise StorageError(f"{notice}; ingest again with the collection's embedder to repair")
        logger.warning("a search fell back to BM25: the vector side is unavailable")
        logger.debug("vector side unavailable: %s", reason)
        return notice

    def _require_dense(self, mode: str) -> None:
        if self._embedder is None:
            raise ConfigurationError(
                f"mode {mode!r} needs an embedder and a vector store; open the retriever or "
                "collection with embedder=... (pip install groundkit[dense,local])"
            )
        if not self._dense_bound:
            raise ConfigurationError(
                f"mode {mode!r}: this collection has no vectors yet; ingest it with an embedder"
            )

    async def _allowed(self, flt: Filter | None) -> Allowed:
        """Where this search may look: everything, unless a filter or clearance says not."""
        if flt is None and self.clearance is None:
            return EVERYTHING
        async with self._scope_lock:
            if self._scope is None:
                self._scope = await Scope.load(self._store, self._lexical.keys, self.clearance)
            if flt is not None and flt.needs_source:
                await self._scope.load_sources()
        return self._scope.allowed(flt)

    def _admits(self, metadata: Mapping[str, Any], flt: Filter | None, source: str) -> bool:
        fields = fields_of(metadata)
        return visible(fields, self.clearance) and (flt is None or flt.matches(fields, source))

    async def _lexical_hits(
        self, terms: list[str], k: int, threshold: float | None, allowed: Allowed
    ) -> list[LexicalHit]:
        if not terms:
            return []
        mask = allowed.mask
        if self._lexical.size > _THREAD_THRESHOLD:
            return await asyncio.to_thread(
                self._lexical.search, terms, k, score_threshold=threshold, mask=mask
            )
        return self._lexical.search(terms, k, score_threshold=threshold, mask=mask)

    async def _dense_hits(
        self, query: str, k: int, timings: dict[str, float], allowed: Allowed
    ) -> list[VectorHit]:
        assert self._embedder is not None and self._vectors is not None
        clock = time.perf_counter()
        vector = await self._embedder.embed_query(query)
        clock = _lap(timings, "embed_ms", clock)
        try:
            hits = await self._vector_hits(vector, k, allowed)
        except StorageError as exc:
            raise _VectorsUnavailable(str(exc)) from None
        _lap(timings, "vector_ms", clock)
        return hits

    async def _vector_hits(self, vector: Any, k: int, allowed: Allowed) -> list[VectorHit]:
        """The k nearest allowed chunks (adr/0020-filters.md).

        A broad restriction is cheaper applied to a deeper unrestricted ranking
        than evaluated inside the vector search; when that leaves fewer than k,
        the restriction goes into the store's where clause, which always
        returns k whenever k allowed chunks exist.
        """
        assert self._vectors is not None
        ids = allowed.document_ids
        if ids is None:
            return await self._vectors.query(vector, k)
        if allowed.share >= _POSTFILTER_MIN_SHARE:
            depth = math.ceil(k / allowed.share * _POSTFILTER_DEPTH)
            if depth <= MAX_TOP_K:
                ranked = await self._vectors.query(vector, depth)
                kept = [h for h in ranked if h.document_id in ids]
                if len(kept) >= k or len(ranked) < depth:
                    return kept[:k]
        return await self._vectors.query(vector, k, document_ids=ids)

    async def _hybrid(
        self, query: str, k: int, timings: dict[str, float], allowed: Allowed
    ) -> tuple[list[RetrievalResult], int]:
        cfg = self._config
        depth = max(k, cfg.hybrid_candidates)
        clock = time.perf_counter()
        terms = self._analyzer.terms(query)

        async def lexical_side() -> tuple[list[LexicalHit], Mapping[int, StoredChunk]]:
            # The candidates' rows are read here, while the vector search (the
            # slower side) is still running, not after both sides are in.
            started = time.perf_counter()
            hits = await self._lexical_hits(terms, depth, None, allowed)
            started = _lap(timings, "bm25_ms", started)
            rows = await self._rows_for_keys([h.key for h in hits])
            _lap(timings, "bm25_rows_ms", started)
            return hits, rows

        # If one side fails the other is cancelled and awaited: nothing of this
        # search may go on reading the stores after it has raised.
        (lexical, lex_rows), dense = await both(
            lexical_side(), self._dense_hits(query, depth, timings, allowed)
        )
        clock = _lap(timings, "candidates_ms", clock)
        found = [(lex_rows[h.key], h.score) for h in lexical if h.key in lex_rows]
        known = {row.chunk_id: row for row, _ in found}
        lex_scored = [(row.chunk_id, score) for row, score in found]
        dense_scored = [(h.chunk_id, h.score) for h in dense]
        clock = _lap(timings, "hydrate_ms", clock)
        weights = [cfg.hybrid_bm25_weight, 1.0 - cfg.hybrid_bm25_weight]
        if cfg.hybrid_fusion == "rrf":
            fused = reciprocal_rank_fusion(
                [[c for c, _ in lex_scored], [c for c, _ in dense_scored]],
                k=cfg.rrf_k,
                weights=weights,
            )
        else:
            fused = convex_combination([lex_scored, dense_scored], weights=weights)
        top = fused[:k]
        clock = _lap(timings, "fusion_ms", clock)
        missing = [h.key for h in top if h.key not in known]
        if missing:
            known.update(await self._store.get_chunks_by_ids(missing))
        # Every fused result gets highlights: a dense-only survivor may still
        # contain query terms (it ranked below the lexical candidate depth).
        spans, wanted = self._analyzer.spans, frozenset(terms)
        results = [
            _result(
                known[h.key],
                h.score,
                Highlights.deferred(spans, known[h.key].content, wanted),
                self.collection,
            )
            for h in top
            if h.key in known
        ]
        _lap(timings, "hydrate_ms", clock)
        return results, len(top) - len(results)

    async def _rows_for_keys(self, keys: list[int]) -> Mapping[int, StoredChunk]:
        if not keys:
            return {}
        if self._rows is not None and await self._store.generation() == self.generation:
            return self._rows  # the snapshot is still the store: no read needed
        return await self._store.get_chunks_by_keys(keys)

    async def _join(
        self, hits: list[LexicalHit], wanted: frozenset[str]
    ) -> tuple[list[RetrievalResult], int]:
        rows = await self._rows_for_keys([h.key for h in hits])
        spans, name = self._analyzer.spans, self.collection
        results = [
            _result(stored, hit.score, Highlights.deferred(spans, stored.content, wanted), name)
            for hit in hits
            if (stored := rows.get(hit.key)) is not None
        ]
        return results, len(hits) - len(results)

    async def _join_ids(self, scored: list[tuple[str, float]]) -> tuple[list[RetrievalResult], int]:
        if not scored:
            return [], 0
        rows = await self._store.get_chunks_by_ids([c for c, _ in scored])
        results = [_result(rows[c], s, None, self.collection) for c, s in scored if c in rows]
        return results, len(scored) - len(results)


class _VectorsUnavailable(Exception):
    """The vector store failed during a search; caught in ``Retriever._search``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def _check_dense_side(
    store: MetadataStoreProtocol,
    embedder: EmbeddingProtocol,
    vector_store: VectorStoreProtocol,
    collection: str | None,
) -> tuple[bool, str | None]:
    """Whether the collection is bound to this embedder, and why its vectors cannot
    serve searches now (None when they can)."""
    manifest = await store.read_manifest()
    if manifest is None:
        return False, None
    check_embedding(manifest, await ensure_identity(embedder), collection)
    return True, await vector_problem(store, vector_store)


def validate_request(query: object, top_k: object, mode: object, config: RetrievalConfig) -> int:
    """The effective top_k; ``RetrievalError`` for an empty, long or unencodable query,
    a bad mode or top_k. Messages never quote the query."""
    if not isinstance(query, str) or not query.strip():
        raise RetrievalError("query must be a non-empty string")
    if len(query) > MAX_QUERY_CHARS:
        raise RetrievalError(f"query is longer than {MAX_QUERY_CHARS} characters")
    problem = describe_unencodable(query, "the query")
    if problem is not None:
        raise RetrievalError(problem)
    if mode not in SEARCH_MODES:
        raise RetrievalError(f"unknown mode {mode!r}; choose one of {', '.join(SEARCH_MODES)}")
    k = config.top_k if top_k is None else top_k
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_TOP_K:
        raise RetrievalError(f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")
    return k


_RESULT_FIELDS = frozenset(RetrievalResult.model_fields)
# Fields left unset (as the constructor would leave them) when their value is None.
_OPTIONAL_FIELDS = ("highlights", "collection")
# The field sets a result can have, by (highlights given, collection given).
_FIELDS_SET = {
    (h, c): _RESULT_FIELDS
    - {n for n, given in zip(_OPTIONAL_FIELDS, (h, c), strict=True) if not given}
    for h in (False, True)
    for c in (False, True)
}


def _result(
    stored: StoredChunk,
    score: float,
    highlights: Highlights | None = None,
    collection: str | None = None,
) -> RetrievalResult:
    """A result from a stored row, built without validation.

    Rows were validated as Chunks when written, and BM25, cosine-derived and
    fused scores are finite and >= 0 by construction. Setting the instance
    state directly (what ``model_construct`` does, minus its per-field
    bookkeeping) costs a fifth as much, which matters on small corpora where
    building ten results cost as much as scoring. A test pins equality with
    validated construction.
    """
    result = RetrievalResult.__new__(RetrievalResult)
    object.__setattr__(
        result,
        "__dict__",
        {
            "content": stored.content,
            "score": score,
            "document_id": stored.document_id,
            "chunk_id": stored.chunk_id,
            "chunk_index": stored.chunk_index,
            "source": stored.source,
            "source_class": stored.source_class,
            "extractor": stored.extractor,
            "start_offset": stored.start_offset,
            "end_offset": stored.end_offset,
            "metadata": stored.metadata,
            "highlights": highlights,
            "collection": collection,
        },
    )
    # A set of its own: pydantic's model_copy(update=...) adds to the copy's set in place.
    fields_set = _FIELDS_SET[highlights is not None, collection is not None]
    object.__setattr__(result, "__pydantic_fields_set__", set(fields_set))
    object.__setattr__(result, "__pydantic_extra__", None)
    object.__setattr__(result, "__pydantic_private__", None)
    return result


def _lap(timings: dict[str, float], name: str, since: float) -> float:
    """Add the time since ``since`` to ``timings[name]``; return now."""
    now = time.perf_counter()
    timings[name] = timings.get(name, 0.0) + (now - since) * 1000
    return now
