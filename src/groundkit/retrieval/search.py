"""The Retriever: validated queries in, citation-bearing results out.

A Retriever searches the store as of its last ``refresh()`` (``open()`` is
the first). Its lexical side is a ``LiveIndex``: persisted segments that a
refresh brings up to date by mapping what changed, not by rebuilding
(adr/0030-lexical-segments.md). Hits are joined to their stored rows once,
after ranking; a hit whose row has since been replaced or deleted is dropped
and counted in the response metadata (``stale_dropped``), never returned with
offsets that no longer point at its text (adr/0005-stale-hits.md).
``Collection`` refreshes its Retriever whenever the store's generation moves,
so it never drops.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Unpack

import numpy as np

from groundkit.config import MAX_TOP_K, RelevanceCalibration, RetrievalConfig
from groundkit.contracts import (
    Evidence,
    Highlights,
    PackStore,
    RetrievalResult,
    Scores,
    SearchMode,
    SearchResponse,
    fields_of,
    result_metadata,
    trusted,
)
from groundkit.errors import (
    ConfigurationError,
    RerankerNotConfiguredError,
    StorageError,
)
from groundkit.lexical.analyzer import Analyzer, bound_analyzer
from groundkit.lexical.bm25 import CURRENT, BM25Index, View
from groundkit.lexical.live import LiveIndex
from groundkit.providers import checked
from groundkit.providers.identity import ensure_identity
from groundkit.providers.protocols import EmbeddingProtocol
from groundkit.retrieval._tasks import both
from groundkit.retrieval.evidence import EvidenceBatch, query_weights
from groundkit.retrieval.filters import Filter
from groundkit.retrieval.fusion import convex_scores, rrf_scores
from groundkit.retrieval.postprocess import (
    NO_STEPS,
    Steps,
    fuse_rankings,
    postprocess,
    rewritten,
)
from groundkit.retrieval.relevance import calibration_for
from groundkit.retrieval.request import (
    MAX_QUERY_CHARS,
    SEARCH_MODES,
    SearchOptions,
    SearchRequest,
)
from groundkit.retrieval.rerank import RerankerProtocol, checked_rerank
from groundkit.retrieval.rewriting import QueryRewriterProtocol
from groundkit.retrieval.scope import EVERYTHING, Allowed, Scope
from groundkit.retrieval.sensitivity import check_clearance, visible
from groundkit.storage.binding import check_analyzer, check_embedding
from groundkit.storage.protocols import (
    MetadataStoreProtocol,
    StoredChunk,
    VectorHit,
    VectorStoreProtocol,
    cosine_to_score,
    score_to_cosine,
)
from groundkit.storage.reconcile import missing_vectors_notice, vector_problem, vectors_missing
from groundkit.telemetry import SPAN_RERANK, SPAN_SEARCH, traced
from groundkit.utils.hashing import sha256_text

__all__ = [
    "MAX_QUERY_CHARS",
    "SEARCH_MODES",
    "Retriever",
    "result_from_row",
    "validate_as_of",
    "validate_request",
]

logger = logging.getLogger("groundkit.retrieval")

# A BM25 query whose terms hold more postings than this runs off the event loop: it
# may take milliseconds. Below it a query takes well under one, less than the hop to
# a worker thread and back costs (measured at a million chunks: docs/benchmarks.md).
_THREAD_POSTINGS = 200_000
# A vector search restricted to at least this share of the chunks ranks
# k / share * depth rows unrestricted and keeps the allowed ones; measured at
# 100k rows: 37 ms for 400 rows against 76 ms for 100 rows behind a predicate
# holding half the documents (docs/benchmarks-filters.md).
_POSTFILTER_MIN_SHARE = 0.25
_POSTFILTER_DEPTH = 2
# Rows a background preload reads per store call (one statement each; searches run
# between them).
_PRELOAD_BATCH = 500


class Retriever:
    """Searches one collection as of ``open()``."""

    def __init__(
        self,
        store: MetadataStoreProtocol,
        lexical: LiveIndex,
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
        rewriter: QueryRewriterProtocol | None = None,
    ) -> None:
        self._reranker = reranker
        self.rewriter = rewriter
        self.clearance = check_clearance(clearance)
        # Decided for one lexical index (positions are the index's): rebuilt for another.
        self._scope: tuple[BM25Index, Scope] | None = None
        self._scope_lock = asyncio.Lock()
        # A label for telemetry only: the store does not know its own name.
        self.collection = collection
        self._store = store
        self._live = lexical
        self._analyzer = analyzer
        self._config = config
        self.generation = generation
        self._rows = rows
        # The generation ``_rows`` belong to: while they catch up with a refresh they are
        # kept (so no second preload starts) but not used.
        self._rows_at = generation
        # Reading the rows of a small collection, in the background once a search has
        # answered (adr/0010-row-preload.md).
        self._preloading: asyncio.Task[None] | None = None
        self._embedder = embedder
        self._vectors = vector_store
        self._dense_bound = dense_bound
        # Why dense and hybrid searches cannot use the vectors now (None: they can).
        self.vector_problem = vector_problem
        # Current chunks without vectors (an interrupted or running ingest's): dense and
        # hybrid answers say so while there are any.
        self.vectors_missing = 0
        self.vectors_generation = vectors_generation
        # The embedder's relevance calibration, once a dense or hybrid search looked it up.
        self._calibration: tuple[RelevanceCalibration | None, str] | None = None

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
        segments: PackStore | None = None,
        lexical: LiveIndex | None = None,
        rewriter: QueryRewriterProtocol | None = None,
    ) -> Retriever:
        """Load the lexical index (``segments``: where it is persisted; without them
        it is built from ``store`` in memory; ``lexical``: one already open on this
        store); refuse a foreign analyzer or embedder.

        With a ``clearance`` (a level of ``SENSITIVITY_LEVELS``) no chunk of a
        document labelled above it is ever returned, and none counts: scores,
        evidence and every figure a response carries are those of a collection
        holding only the documents the clearance admits (adr/0052), and responses
        leave out the store's ``generation``, which moves with every write.

        With an embedder, the collection's manifest is checked first: another
        embedding identity is an ``IndexIdentityError``. A bound collection whose
        vector side is missing or damaged still opens: its dense and hybrid
        searches answer from BM25 and say why (``RetrievalConfig.vector_fallback``).
        """
        cfg = config or RetrievalConfig()
        check_clearance(clearance)
        if (embedder is None) != (vector_store is None):
            raise ConfigurationError("an embedder and a vector store go together: give both")
        bound = await store.get_analyzer()
        analyzer = bound_analyzer(bound, analyzer or Analyzer(), configured=analyzer is not None)
        check_analyzer(bound, analyzer.identity, collection)
        _, vectors_generation = await store.generations()
        dense_bound, problem = False, None
        if embedder is not None and vector_store is not None:
            dense_bound, problem = await _check_dense_side(
                store, embedder, vector_store, collection
            )
        missing = await vectors_missing(store) if dense_bound else 0
        started = time.perf_counter()
        live = lexical or await LiveIndex.open(store, segments, k1=cfg.bm25_k1, b=cfg.bm25_b)
        await live.refresh()
        retriever = cls(
            store,
            live,
            analyzer=analyzer,
            config=cfg,
            generation=live.generation,
            embedder=embedder,
            vector_store=vector_store,
            dense_bound=dense_bound,
            vector_problem=problem,
            vectors_generation=vectors_generation,
            reranker=reranker,
            collection=collection,
            clearance=clearance,
            rewriter=rewriter,
        )
        retriever.vectors_missing = missing
        await retriever._scope_for_size()
        logger.info(
            "retriever opened: %d chunks in %.0f ms",
            live.index.live_size,
            (time.perf_counter() - started) * 1000,
        )
        return retriever

    @property
    def lexical(self) -> LiveIndex:
        return self._live

    async def refresh(self) -> bool:
        """Catch up with writes made since the last refresh (this process's or
        another's); True when anything changed."""
        await self._live.refresh()
        if self._live.generation == self.generation:
            return False
        self.generation = self._live.generation
        if self.clearance is None:
            self._scope = None  # positions moved: the masks are decided again when needed
        # A preload still reading goes on and catches up with this refresh when it ends:
        # stopped here, a collection written between searches would start it again after
        # every answer, never finish it, and make every write wait behind its reads.
        await self._update_rows()
        await self._scope_for_size()
        return True

    async def close(self) -> None:
        """Stop a row preload still running (``Collection.close`` calls this before it
        closes the stores). The Retriever can still search afterwards."""
        task = self._stop_preload()
        if task is not None:
            await asyncio.wait([task])

    async def _scope_for_size(self) -> None:
        """Under a clearance, decide what it admits now (every search needs it), so
        ``size`` can count only that."""
        if self.clearance is not None:
            await self._allowed(None, self._live.index)

    async def preload(self) -> bool:
        """Read a small collection's rows into memory now, or wait for the read a search
        started in the background; True when searches join their hits to rows in
        memory from now on (until a write). Collections above ``preload_max_chunks``
        (or with it 0) keep joining to the store: False. For a server that wants its
        first searches as fast as later ones; searching needs no call to it."""
        if self._rows is None and self._preload_wanted():
            self._start_preload()
            if self._preloading is not None:
                await asyncio.wait([self._preloading])
        return self._rows is not None

    def _preload_wanted(self) -> bool:
        return 0 < self._live.index.live_size <= self._config.preload_max_chunks

    def _start_preload(self) -> None:
        """After a search has answered: start reading the current rows of a small
        collection into memory, unless they are there or being read. Nothing of it
        runs before the first answer, and a process that searches once (``grk
        search``) stops it at close."""
        if self._rows is not None or self._preloading is not None or not self._preload_wanted():
            return
        self._preloading = asyncio.get_running_loop().create_task(
            self._preload(), name="groundkit-row-preload"
        )

    def _stop_preload(self) -> asyncio.Task[None] | None:
        task, self._preloading = self._preloading, None
        if task is not None:
            task.cancel()
        return task

    async def _preload(self) -> None:
        """Read the rows of the index's current chunks, a batch per store call, then
        catch up with the writes made meanwhile (``_caught_up``) and keep them. Searches
        before that join their hits to the store, as collections above the limit
        always do."""
        index = self._live.index
        try:
            keys = index.current_keys().tolist()
            rows: dict[int, StoredChunk] = {}
            for start in range(0, len(keys), _PRELOAD_BATCH):
                found = await self._store.get_chunks_by_keys(keys[start : start + _PRELOAD_BATCH])
                rows.update((k, r) for k, r in found.items() if r.current)
                await asyncio.sleep(0)  # a search or a write waiting on the loop goes first
            self._rows, self._rows_at = await self._caught_up(rows), self.generation
        except Exception as exc:  # the store closed or failed: searches keep joining
            logger.debug("row preload abandoned: %s", exc)
        finally:
            if self._preloading is asyncio.current_task():
                self._preloading = None

    async def _caught_up(self, rows: dict[int, StoredChunk]) -> dict[int, StoredChunk] | None:
        """``rows`` made to follow the current index: those of chunks that stopped being
        current dropped, those of chunks that became current read. Repeated until no
        refresh moved the index during the reads; None when the collection has grown
        past ``preload_max_chunks``. A row is never changed in place (a write gives a
        chunk a new key), so the rows kept are the store's."""
        while True:
            if not self._preload_wanted():
                return None
            index, generation = self._live.index, self.generation
            current = index.current_keys()
            known = np.fromiter(rows, dtype=np.int64, count=len(rows))
            added = np.setdiff1d(current, known, assume_unique=True)
            gone = np.setdiff1d(known, current, assume_unique=True)
            rows = dict(rows)
            for key in gone.tolist():
                del rows[key]
            if added.size:
                found = await self._store.get_chunks_by_keys(added.tolist())
                rows.update((k, r) for k, r in found.items() if r.current)
            if self._live.index is index and self.generation == generation:
                return rows

    async def _update_rows(self) -> None:
        """After a refresh: rows kept in memory follow the index, reading only those
        of chunks that became current, minus those that stopped being current
        (whoever caught the index up)."""
        if self._rows is not None:  # else being read, or read after the next answer
            self._rows, self._rows_at = await self._caught_up(self._rows), self.generation

    async def refresh_vectors(self, vectors_generation: int) -> None:
        """Catch up with vector writes made since open (another process's ingest):
        check the vector side again, which moves the vector handle to the latest
        version once the confirmations are read (``vector_problem``)."""
        if self._vectors is None or self._embedder is None:
            self.vectors_generation = vectors_generation
            return
        self._dense_bound, self.vector_problem = await _check_dense_side(
            self._store, self._embedder, self._vectors, self.collection
        )
        self.vectors_missing = await vectors_missing(self._store) if self._dense_bound else 0
        self.vectors_generation = vectors_generation

    @property
    def config(self) -> RetrievalConfig:
        return self._config

    @property
    def size(self) -> int:
        """Chunks a current search can return (under a clearance, those it admits)."""
        if self.clearance is None:
            return self._live.index.live_size
        if self._scope is None:
            return 0  # decided by open(), which has not run
        index, scope = self._scope
        return index.live_size if scope.corpus is None else scope.corpus.size

    async def search(
        self,
        query: str | SearchRequest,
        top_k: int | None = None,
        **options: Unpack[SearchOptions],
    ) -> SearchResponse:
        """Rank chunks for ``query`` (a string, or a ``SearchRequest`` holding it and
        every option; the options are ``SearchRequest``'s fields, checked there); with
        ``rerank`` the cross-encoder reorders the best ``rerank_depth`` candidates of
        the chosen mode.

        Opt-in steps after ranking (groundkit/retrieval/postprocess.py):
        ``rewrite`` also runs the rewriter's variants of the query and fuses all
        the rankings by RRF (the original query first); ``expand`` (``"parent"``
        or ``"window"``) gives each result the passage around it as ``context``
        and folds hits inside a returned passage into it; ``mmr`` (a lambda in
        [0, 1], 1 = relevance only) picks diverse results; ``reorder=
        "lost-in-the-middle"`` puts the strongest results at both ends, for
        prompts. ``top_k`` is honoured by all of them.

        ``as_of`` (a timezone-aware datetime) searches the corpus as it stood
        then: each document's version current at that moment, scored with the
        statistics of that corpus, exactly as a collection holding only those
        versions would score it. BM25 only: vectors are kept for current
        versions.

        ``filters`` (``{field: {op: value}}``, groundkit/retrieval/filters.py)
        restrict the candidates before ranking on every path, so ``top_k``
        results come back whenever that many chunks match. They narrow the
        results, not the statistics: a filtered search scores with those of every
        document the caller may read, as an unfiltered one does.

        Traced as ``groundkit.retrieve.search``; the query never reaches the span
        (groundkit/telemetry.py).
        """
        with traced(SPAN_SEARCH, collection=self.collection) as span:
            # Made inside the span, so a refused request is traced as a failed search.
            request = SearchRequest.of(query, top_k, **options)
            span.set(mode=request.mode, top_k=request.k(self._config))
            steps = Steps.of(request)
            run = functools.partial(self._search, request)
            await self._live.check_packs()
            try:
                response = await run(steps=steps)
            except _LexicalDamage as exc:
                # The index disagrees with itself: rebuilt from the store, then asked
                # again; damage in the rebuilt index is the store's, and raised.
                await self._live.rebuild(str(exc))
                response = await run(steps=steps)
            self._start_preload()
            if span.recording:
                meta = response.metadata
                span.set(
                    stage=meta["stage"],
                    result_count=response.total_results,
                    stale_dropped=meta["stale_dropped"],
                    generation=self.generation,
                    rerank=request.rerank,
                )
            return response

    async def _search(self, request: SearchRequest, *, steps: Steps = NO_STEPS) -> SearchResponse:
        started = time.perf_counter()
        query, mode, rerank, as_of = request.query, request.mode, request.rerank, request.as_of
        final_k = request.k(self._config)
        flt = request.filter
        view = request.view
        # One index for the whole search: a refresh meanwhile swaps in another.
        index = self._live.index
        if mode != "bm25":
            self._require_dense(mode)
        if rerank and self._reranker is None:
            raise RerankerNotConfiguredError(
                "rerank=True needs a reranker: open with reranker=CrossEncoderReranker(...)"
            )
        if steps.rewrite and self.rewriter is None:
            raise ConfigurationError(
                "rewrite=True needs a query rewriter: open with rewriter=GlossaryRewriter(...)"
            )
        k = max(final_k, self._config.rerank_depth) if rerank else final_k
        if steps.widens:
            k = max(k, self._config.postprocess_candidates)
        queries = [query]
        if steps.rewrite and self.rewriter is not None:
            queries = await rewritten(self.rewriter, query, self._config.max_rewrites)
        timings: dict[str, float] = {}
        allowed = await self._allowed(flt, index)
        # The request's cut, else the collection's (which BM25 searches do not take).
        wanted = request.min_relevance
        if wanted is None:
            wanted = self._config.min_relevance
        relevance = await self._relevance(mode, wanted)
        # Scored with the statistics of what the clearance admits (adr/0052).
        search = _Pass(index, view.within(allowed.corpus), allowed, relevance=relevance)
        degraded: str | None = None
        served: SearchMode = mode
        if mode != "bm25" and self.vector_problem is not None:
            degraded, served = self._fall_back(self.vector_problem), "bm25"
        elif mode != "bm25" and self.vectors_missing:
            # Under a clearance the count is withheld: it includes documents above it.
            count = self.vectors_missing if self.clearance is None else None
            degraded = missing_vectors_notice(count)
        try:
            results, stale = await self._ranked_all(queries, k, served, timings, search)
        except _VectorsUnavailable as exc:
            # The vector store failed in this search (damage that no cheap check sees).
            degraded, served = self._fall_back(exc.reason), "bm25"
            timings.clear()
            results, stale = await self._ranked_all(queries, k, served, timings, search)
        if flt is not None or self.clearance is not None:
            # The masks were decided at the first filtered search; a document
            # written since is judged here, on the row that is being returned. One
            # above the clearance goes uncounted: no figure tells of it.
            hidden = sum(not visible(fields_of(r.metadata), self.clearance) for r in results)
            kept = [r for r in results if self._admits(r.metadata, flt, r.source)]
            stale += len(results) - len(kept) - hidden
            results = kept
        stage: str = "fusion" if served == "hybrid" else served
        if rerank and self._reranker is not None:
            # Expand and MMR choose among more candidates than they return (folding
            # hits into passages, skipping near-duplicates): the reranker orders them
            # all and the steps cut to top_k, or they would have only top_k to work on.
            keep = None if steps.widens else final_k
            with traced(
                SPAN_RERANK, collection=self.collection, candidate_count=len(results), top_k=final_k
            ) as span:
                results = await checked_rerank(self._reranker, query, results, top_k=keep)
                span.set(result_count=len(results))
            stage = "rerank"
        if steps.any:
            results = await postprocess(
                results,
                steps,
                top_k=final_k,
                store=self._store,
                config=self._config,
                analyzer=self._analyzer,
                embedder=self._embedder if served != "bm25" else None,
                vectors=self._vectors if served != "bm25" else None,
            )
        await self._attach_evidence(query, results, served, search, queries[1:])
        meta: dict[str, Any] = {
            "stage": stage,
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
            "stale_dropped": stale,
            "filtered": flt is not None,
        }
        if self.clearance is None:
            # The store's write count moves with writes the caller may not read.
            meta["generation"] = self.generation
        if as_of is not None:
            meta["as_of"] = as_of.isoformat()
        if len(queries) > 1:
            meta["queries"] = queries
        if steps.any:
            meta["steps"] = steps.names
        if degraded is not None:
            meta["degraded"] = degraded
        if relevance is not None and relevance.min_cosine is not None and served != "bm25":
            meta["relevance_cut"] = {
                "min_relevance": wanted,
                "dropped": relevance.dropped,
            }
        if timings:
            meta["timings_ms"] = {name: round(ms, 3) for name, ms in timings.items()}
        if stale:
            logger.warning("%d hits dropped: their documents changed after open()", stale)
        # Built from already-valid parts; skipping re-validation of every result
        # matters on small corpora, where it cost as much as scoring.
        values = {
            "query": query,
            "mode": mode,
            "results": results,
            "total_results": len(results),
            "metadata": meta,
        }
        return trusted(SearchResponse, values, set(_RESPONSE_FIELDS))

    async def _attach_evidence(
        self,
        query: str,
        results: list[RetrievalResult],
        served: SearchMode,
        search: _Pass,
        variants: Sequence[str] = (),
    ) -> None:
        """Give each result deferred evidence, all of them sharing one batch.

        With a rewrite, the variants' terms count too, once each: a result found by
        ``myocardial infarction`` for ``heart attack`` shows the sentence naming it."""
        if not results:
            return
        analyzer, index, view = self._analyzer, search.index, search.view
        extra: list[str] = []
        if variants:
            own = set(analyzer.terms(query))
            found = (t for v in variants for t in analyzer.terms(v) if t not in own)
            extra = list(dict.fromkeys(found))
        ids = search.term_ids  # looked up by the lexical side, if there was one
        if not ids:
            terms = analyzer.terms(query)
            ids = await self._live.term_ids(terms) if terms else {}
        if extra:
            ids = {**ids, **await self._live.term_ids(extra)}

        def weights() -> dict[str, float]:
            # Read on first use: a search whose evidence is never read analyses nothing.
            return query_weights(index, [*analyzer.terms(query), *extra], ids, view)

        semantic = served != "bm25" and bool(search.query_vector) and self._embedder is not None
        batch = EvidenceBatch(
            analyzer,
            weights,
            embedder=self._embedder if semantic else None,
            query_vector=search.query_vector[0] if semantic else None,
            home=asyncio.get_running_loop(),
            hybrid=served == "hybrid",
        )
        add, deferred, evidence = batch.add, Evidence.deferred, batch.evidence
        for result in results:
            values = result.__dict__
            values["evidence"] = deferred(evidence, add(values["content"], values["start_offset"]))
            result.__pydantic_fields_set__.add("evidence")

    async def _ranked_all(
        self,
        queries: list[str],
        k: int,
        mode: SearchMode,
        timings: dict[str, float],
        search: _Pass,
    ) -> tuple[list[RetrievalResult], int]:
        """One query's ranking, or several fused by RRF (the original query's pass
        keeps its term ids and vector for the evidence).

        Each query is ranked to the same depth whatever ``k`` (up to
        ``postprocess_candidates``): fused from lists only ``k`` deep, a chunk every
        query ranks just below ``k`` would drop out, and the best results of a small
        ``top_k`` would not be the first of a larger one."""
        if len(queries) == 1:
            return await self._ranked(queries[0], k, mode, timings, search)
        depth = max(k, self._config.postprocess_candidates)
        rankings: list[list[RetrievalResult]] = []
        stale = 0
        for position, text in enumerate(queries):
            # A variant's pass reads relevance with its own count, so the response's
            # relevance_cut counts the original query's results, once.
            own = (
                search
                if position == 0
                else _Pass(
                    search.index,
                    search.view,
                    search.allowed,
                    relevance=None if search.relevance is None else search.relevance.fresh(),
                )
            )
            found, dropped = await self._ranked(text, depth, mode, timings, own)
            rankings.append(found)
            stale += dropped
        return fuse_rankings(rankings, k, self._config.rrf_k), stale

    async def _ranked(
        self,
        query: str,
        k: int,
        mode: SearchMode,
        timings: dict[str, float],
        search: _Pass,
    ) -> tuple[list[RetrievalResult], int]:
        """The ranked results of one mode, and how many hits were dropped as stale."""
        if search.allowed.empty:
            return [], 0
        if mode == "bm25":
            terms = self._analyzer.terms(query)
            hits = await self._lexical_hits(terms, k, self._config.score_threshold, search)
            return await self._join(hits, frozenset(terms), k, search.view)
        if mode == "dense":
            return await self._dense(query, k, timings, search)
        return await self._hybrid(query, k, timings, search)

    async def _dense(
        self, query: str, k: int, timings: dict[str, float], search: _Pass
    ) -> tuple[list[RetrievalResult], int]:
        """Dense hits joined to their rows; rows written since the vector handle moved
        (another process's ingest in flight) are made up for by asking for more."""
        threshold = self._config.score_threshold
        relevance = search.relevance
        depth = k
        while True:
            dense = await self._dense_hits(query, depth, timings, search)
            fetched = len(dense)
            if threshold is not None:
                dense = [h for h in dense if h.score >= threshold]
            if relevance is not None and relevance.min_cosine is not None:
                least = cosine_to_score(relevance.min_cosine)
                kept = [h for h in dense if h.score >= least]
                relevance.dropped = sum(h.score < least for h in dense[:k])
                dense = kept
            results, stale = await self._join_ids([(h.chunk_id, h.score) for h in dense], relevance)
            if len(results) >= k or stale == 0 or fetched < depth or depth >= MAX_TOP_K:
                return results[:k], stale
            depth = min(MAX_TOP_K, depth + 2 * stale)

    def _fall_back(self, reason: str) -> str:
        """The notice a search answered from BM25 carries; ``StorageError`` when the
        configuration says to refuse instead."""
        # The reason may count the whole store's rows, documents above a clearance too.
        shown = reason if self.clearance is None else "the collection's vectors need repair"
        notice = f"vector search unavailable, results are BM25 only: {shown}"
        if self._config.vector_fallback == "error":
            raise StorageError(f"{notice}; ingest again with the collection's embedder to repair")
        logger.warning("a search fell back to BM25: the vector side is unavailable")
        logger.debug("vector side unavailable: %s", reason)
        return notice

    async def _relevance(
        self, mode: SearchMode, wanted: float | Literal["auto"] | None
    ) -> _Relevance | None:
        """How this search reads relevance; ``ConfigurationError`` when a cut is asked
        for and the embedder has no calibration."""
        if mode == "bm25" or self._embedder is None:
            return None
        if self._calibration is None:
            identity = await ensure_identity(self._embedder)
            found = calibration_for(identity, self._config.relevance_calibration)
            self._calibration = (found, identity.model_name)
        calibration, model = self._calibration
        if wanted is None:
            return _Relevance(calibration, None)
        if calibration is None:
            raise ConfigurationError(
                f"min_relevance needs a relevance calibration for this collection's embedder "
                f"({model!r} has no built-in one): fit one with "
                "groundkit.retrieval.fit_relevance on judged queries and pass it as "
                "RetrievalConfig(relevance_calibration=...)"
            )
        floor = calibration.floor if wanted == "auto" else calibration.cosine_at(wanted)
        return _Relevance(calibration, floor)

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

    async def _allowed(self, flt: Filter | None, index: BM25Index) -> Allowed:
        """Where this search may look: everything, unless a filter or clearance says not."""
        if flt is None and self.clearance is None:
            return EVERYTHING
        async with self._scope_lock:
            if self._scope is None or self._scope[0] is not index:
                self._scope = (index, await Scope.load(self._store, index, self.clearance))
            if flt is not None and flt.needs_source:
                await self._scope[1].load_sources()
        return self._scope[1].allowed(flt)

    def _admits(self, metadata: Mapping[str, Any], flt: Filter | None, source: str) -> bool:
        fields = fields_of(metadata)
        return visible(fields, self.clearance) and (flt is None or flt.matches(fields, source))

    async def _lexical_hits(
        self, terms: list[str], k: int, threshold: float | None, search: _Pass
    ) -> list[_Hit]:
        if not terms:
            return []
        try:
            ids = await self._live.term_ids(terms)
        except StorageError as exc:  # the vocabulary pack, damaged in memory
            raise _LexicalDamage(str(exc)) from None
        search.term_ids.update(ids)
        query = Counter(ids[t] for t in terms if t in ids)
        if not query:
            return []
        index, mask = search.index, search.allowed.mask
        try:
            lookup = index.lookup(query)
            run = functools.partial(
                index.search_ids,
                query,
                k,
                score_threshold=threshold,
                mask=mask,
                view=search.view,
                lookup=lookup,
            )
            found = await asyncio.to_thread(run) if lookup.postings > _THREAD_POSTINGS else run()
        except StorageError as exc:
            raise _LexicalDamage(str(exc)) from None
        return [_Hit(key, score, tied) for key, score, tied in found]

    async def _dense_hits(
        self, query: str, k: int, timings: dict[str, float], search: _Pass
    ) -> list[VectorHit]:
        assert self._embedder is not None and self._vectors is not None
        clock = time.perf_counter()
        if not search.query_vector:
            # Once per search: a deeper second pass and the evidence reuse it.
            search.query_vector.append(await checked.query(self._embedder, query))
            clock = _lap(timings, "embed_ms", clock)
        vector = search.query_vector[0]
        try:
            hits = await self._vector_hits(vector, k, search.allowed)
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
        self, query: str, k: int, timings: dict[str, float], search: _Pass
    ) -> tuple[list[RetrievalResult], int]:
        """Fused results; candidates replaced since the index was caught up (another
        process writing) are made up for by fusing deeper, as dense search does."""
        depth = max(k, self._config.hybrid_candidates)
        while True:
            results, stale = await self._hybrid_at(query, k, depth, timings, search)
            if len(results) >= k or stale == 0 or depth >= MAX_TOP_K:
                return results, stale
            depth = min(MAX_TOP_K, depth + 2 * stale)

    async def _hybrid_at(
        self, query: str, k: int, depth: int, timings: dict[str, float], search: _Pass
    ) -> tuple[list[RetrievalResult], int]:
        cfg = self._config
        clock = time.perf_counter()
        terms = self._analyzer.terms(query)

        async def lexical_side() -> tuple[list[tuple[str, float]], dict[str, StoredChunk]]:
            # The candidates' ids are read here, as soon as BM25 has scored, not after
            # both sides are in.
            started = time.perf_counter()
            hits = await self._lexical_hits(terms, depth, None, search)
            started = _lap(timings, "bm25_ms", started)
            scored, known = await self._lexical_candidates(hits, depth)
            _lap(timings, "bm25_rows_ms", started)
            return scored, known

        # The vector side starts first, so a model embedding the query works in its own
        # thread while BM25 scores on the loop. The vector store's query itself is sent
        # once the loop is free again, after BM25 and its ids. Scored in a worker thread
        # instead, BM25 took twice as long and slowed the vector query it competed with
        # for two cores (ADR 0081). If one side fails the other is cancelled and
        # awaited: nothing of this search may go on reading the stores after it has
        # raised.
        dense, (lex_scored, known) = await both(
            self._dense_hits(query, depth, timings, search), lexical_side()
        )
        clock = _lap(timings, "candidates_ms", clock)
        dense_scored = [(h.chunk_id, h.score) for h in dense]
        clock = _lap(timings, "hydrate_ms", clock)
        weights = [cfg.hybrid_bm25_weight, 1.0 - cfg.hybrid_bm25_weight]
        if cfg.hybrid_fusion == "rrf":
            fused = rrf_scores(
                [[c for c, _ in lex_scored], [c for c, _ in dense_scored]],
                k=cfg.rrf_k,
                weights=weights,
            )
        else:
            fused = convex_scores([lex_scored, dense_scored], weights=weights)
        clock = _lap(timings, "fusion_ms", clock)
        lexical_of = dict(lex_scored)
        cosine_of = {c: score_to_cosine(s) for c, s in dense_scored}
        relevance = search.relevance
        if relevance is not None and relevance.min_cosine is not None:
            fused = relevance.cut(fused, cosine_of, len(dense_scored) >= depth, k)
        signals = _signals(relevance)
        # Every fused result gets highlights: a dense-only survivor may still
        # contain query terms (it ranked below the lexical candidate depth).
        spans, wanted = self._analyzer.spans, frozenset(terms)
        results: list[RetrievalResult] = []
        stale, start = 0, 0
        while len(results) < k and start < len(fused):
            # A candidate whose row is gone (replaced since) gives its place to the next.
            window = fused[start : start + k - len(results)]
            start += len(window)
            missing = [key for key, _ in window if key not in known]
            if missing:
                known.update(await self._store.get_chunks_by_ids(missing))
            for key, fused_score in window:
                row = known.get(key)
                if row is None:
                    stale += 1
                    continue
                deferred = Highlights.deferred(spans, row.content, wanted)
                scores = signals(
                    bm25=lexical_of.get(key), cosine=cosine_of.get(key), fused=fused_score
                )
                results.append(result_from_row(row, fused_score, deferred, self.collection, scores))
        _lap(timings, "hydrate_ms", clock)
        return results, stale

    def _rows_held(self) -> Mapping[int, StoredChunk] | None:
        """The rows in memory, if they belong to the index this retriever searches."""
        return self._rows if self._rows_at == self.generation else None

    async def _rows_for_keys(self, keys: list[int], view: View) -> Mapping[int, StoredChunk]:
        if not keys:
            return {}
        rows = self._rows_held()
        if (
            view.as_of is None
            and rows is not None
            and await self._store.generation() == self.generation
        ):
            return rows  # the snapshot is still the store: no read needed
        return await self._store.get_chunks_by_keys(keys)

    async def _rows_in_order(
        self, hits: list[_Hit], k: int, view: View
    ) -> tuple[list[tuple[StoredChunk, float]], int]:
        """The rows of ``hits`` in final order, cut to ``k``, and how many were stale.

        The index orders equal scores by a fixed-width prefix of the canonical key;
        hits it marks as tied on all of it are ordered here by the full key. A
        current search drops a row that is no longer current (replaced since the
        index was caught up): its text is not what the source holds now.
        """
        rows = await self._rows_for_keys([h.key for h in hits], view)
        found: list[tuple[StoredChunk, float]] = []
        tied = False
        if view.as_of is None:
            for key, score, hit_tied in hits:
                stored = rows.get(key)
                if stored is not None and stored.valid_to is None:
                    found.append((stored, score))
                tied = tied or hit_tied
        else:
            for key, score, hit_tied in hits:
                stored = rows.get(key)
                if stored is not None and _in_view(stored, view):
                    found.append((stored, score))
                tied = tied or hit_tied
        stale = len(hits) - len(found)
        if tied:
            found.sort(key=_canonical)
        return found[:k], stale

    async def _lexical_candidates(
        self, hits: list[_Hit], depth: int
    ) -> tuple[list[tuple[str, float]], dict[str, StoredChunk]]:
        """Hybrid's lexical candidates as ``(chunk id, score)``, current ones only, in
        final order and cut to ``depth``; with the rows already at hand, by id.

        Fusion needs ids, and only the few results it returns need rows: with rows
        in memory those come free, otherwise the store gives current ids by key (two
        columns by primary key: 0.2-0.4 ms for 100 candidates at 100k-1M chunks,
        against 5 ms and more for their whole rows) and the rows are read after
        fusion. Hits the index could not order (``tied``) are ordered by their rows'
        full canonical keys, so they take the row path.
        """
        if self._rows_held() is not None or any(h.tied for h in hits):
            found, _ = await self._rows_in_order(hits, depth, CURRENT)
            return [(row.chunk_id, score) for row, score in found], {
                row.chunk_id: row for row, _ in found
            }
        ids = await self._store.current_chunk_ids([h.key for h in hits])
        scored = [(ids[h.key], h.score) for h in hits if h.key in ids]
        return scored[:depth], {}

    async def _join(
        self, hits: list[_Hit], wanted: frozenset[str], k: int, view: View
    ) -> tuple[list[RetrievalResult], int]:
        found, stale = await self._rows_in_order(hits, k, view)
        spans, name, deferred = self._analyzer.spans, self.collection, Highlights.deferred
        results = [
            result_from_row(
                stored, score, deferred(spans, stored.content, wanted), name, Scores(bm25=score)
            )
            for stored, score in found
        ]
        return results, stale

    async def _join_ids(
        self, scored: list[tuple[str, float]], relevance: _Relevance | None
    ) -> tuple[list[RetrievalResult], int]:
        if not scored:
            return [], 0
        rows = await self._store.get_chunks_by_ids([c for c, _ in scored])
        name, signals = self.collection, _signals(relevance)
        results = [
            result_from_row(rows[c], s, None, name, signals(cosine=score_to_cosine(s)))
            for c, s in scored
            if c in rows
        ]
        return results, len(scored) - len(results)


class _Hit(NamedTuple):
    """A lexical hit; ``tied`` when the index could not order it against a neighbour."""

    key: int
    score: float
    tied: bool


@dataclass(frozen=True, slots=True)
class _Pass:
    """What one search reads: the index as it was when the search began, which
    documents it sees (current, or as of a moment) and where it may look."""

    index: BM25Index
    view: View
    allowed: Allowed
    # The query's embedding, once a dense side has computed it.
    query_vector: list[Any] = field(default_factory=list)
    # The query's terms with their store ids, once a lexical side has looked them up.
    term_ids: dict[str, int] = field(default_factory=dict)
    # How dense and hybrid results get their relevance, and the cut (None in bm25).
    relevance: _Relevance | None = None


@dataclass(slots=True)
class _Relevance:
    """One search's relevance reading: the embedder's calibration (None when it has
    none), the least cosine a result may have (None: no cut), and how many results
    the cut took out of the top k."""

    calibration: RelevanceCalibration | None
    min_cosine: float | None
    dropped: int = 0

    def fresh(self) -> _Relevance:
        """The same reading with nothing counted yet (for another query's pass)."""
        return _Relevance(self.calibration, self.min_cosine)

    def cut(
        self, fused: list[tuple[str, float]], cosine_of: Mapping[str, float], full: bool, k: int
    ) -> list[tuple[str, float]]:
        """The fused hits (chunk id, fused score) whose cosine reaches the cut. A hit the
        vector side did not return has a cosine at most its last candidate's when that
        side returned all it was asked for (else it has no vector in reach): that bound
        decides for it."""
        least = self.min_cosine
        assert least is not None
        bound = min(cosine_of.values()) if full and cosine_of else None
        kept: list[tuple[str, float]] = []
        for position, hit in enumerate(fused):
            cosine = cosine_of.get(hit[0], bound)
            if cosine is not None and cosine >= least:
                kept.append(hit)
            elif position < k:
                self.dropped += 1
        return kept


def _deprecated(name: str, replacement: str) -> None:
    warnings.warn(
        f"{name} is deprecated and will be removed in the next release; use {replacement}",
        DeprecationWarning,
        stacklevel=3,
    )


def validate_request(query: object, top_k: object, mode: object, config: RetrievalConfig) -> int:
    """Deprecated: ``SearchRequest`` checks every option (the effective top_k is
    ``request.k(config)``)."""
    _deprecated("validate_request", "SearchRequest(query=..., top_k=..., mode=...).k(config)")
    return SearchRequest.model_validate({"query": query, "top_k": top_k, "mode": mode}).k(config)


def validate_as_of(as_of: object, mode: str) -> View:
    """Deprecated: ``SearchRequest`` checks ``as_of`` (its view is ``request.view``)."""
    _deprecated("validate_as_of", "SearchRequest(query=..., as_of=..., mode=...).view")
    return SearchRequest.model_validate({"query": "-", "as_of": as_of, "mode": mode}).view


def _in_view(stored: StoredChunk, view: View) -> bool:
    if view.as_of is None:
        return stored.valid_to is None
    ends = math.inf if stored.valid_to is None else stored.valid_to
    return stored.valid_from <= view.as_of < ends


def _canonical(pair: tuple[StoredChunk, float]) -> tuple[float, str, int, str]:
    """Score first, then the canonical key ``(content_hash, chunk_index, document_id)``."""
    stored, score = pair
    return (-score, sha256_text(stored.content), stored.chunk_index, stored.document_id)


class _LexicalDamage(StorageError):
    """The lexical index found its own arrays out of range during a search; caught in
    ``Retriever.search``, which rebuilds the index from the store and asks again."""


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


_RESULT_FIELDS = frozenset(RetrievalResult.model_fields)
_RESPONSE_FIELDS = frozenset(SearchResponse.model_fields)
# Fields left unset (as the constructor would leave them) when their value is None.
_OPTIONAL_FIELDS = ("highlights", "collection")
# Unset until the search attaches evidence (and, when asked, context) to the final results.
_LATER_FIELDS = frozenset({"evidence", "context"})
# The field sets a result can have, by (highlights given, collection given).
_FIELDS_SET = {
    (h, c): _RESULT_FIELDS
    - _LATER_FIELDS
    - {n for n, given in zip(_OPTIONAL_FIELDS, (h, c), strict=True) if not given}
    for h in (False, True)
    for c in (False, True)
}


def result_from_row(
    stored: StoredChunk,
    score: float,
    highlights: Highlights | None = None,
    collection: str | None = None,
    scores: Scores | None = None,
) -> RetrievalResult:
    """A result from a stored row, built without validation.

    Rows were validated as Chunks when written, and BM25, cosine-derived and
    fused scores are finite and >= 0 by construction. Setting the instance
    state directly (what ``model_construct`` does, minus its per-field
    bookkeeping) costs a fifth as much, which matters on small corpora where
    building ten results cost as much as scoring. A test pins equality with
    validated construction.
    """
    # Its own copy: rows in memory serve every search (gaps are internal to passages).
    metadata = result_metadata(stored.metadata)
    values = {
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
        "metadata": metadata,
        "highlights": highlights,
        "collection": collection,
        "version": stored.version,
        "evidence": None,  # the search attaches it once the results are final
        "context": None,
        "scores": scores,
    }
    # A set of its own: pydantic's model_copy(update=...) adds to the copy's set in place.
    fields_set = set(_FIELDS_SET[highlights is not None, collection is not None])
    if scores is None:
        fields_set.discard("scores")
    return trusted(RetrievalResult, values, fields_set)


def _signals(relevance: _Relevance | None) -> Callable[..., Scores]:
    """Builds a result's ``Scores``, with its relevance when there is a calibration."""
    calibration = relevance.calibration if relevance is not None else None

    def scores(
        *, bm25: float | None = None, cosine: float | None = None, fused: float | None = None
    ) -> Scores:
        chance = None
        if calibration is not None and cosine is not None:
            chance = calibration.relevance(cosine)
        return Scores(bm25=bm25, vector=cosine, fused=fused, relevance=chance)

    return scores


def _lap(timings: dict[str, float], name: str, since: float) -> float:
    """Add the time since ``since`` to ``timings[name]``; return now."""
    now = time.perf_counter()
    timings[name] = timings.get(name, 0.0) + (now - since) * 1000
    return now
