"""Part 2's measurement: query latency by stage on a prepared synthetic collection.

Rebuilds the vector index with the current settings, times ``Retriever.open``,
MiniLM's ``embed_query``, then bm25, dense and hybrid search (and hybrid with
MiniLM embedding the query) against the LanceDB-native anchor, settings
interleaved per query; ends with the vector-index sweep.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import cast

from evals.hybrid.common import (
    RECALL_TARGET,
    WARMUP_QUERIES,
    WARMUP_TEXT,
    log,
    open_retriever,
)
from evals.hybrid.embedders import HashEmbedder, MiniLMQueryEmbedder
from evals.hybrid.exact import ExactVectors
from evals.hybrid.native import (
    DEFAULTS,
    NATIVE_FTS,
    NATIVE_HYBRID,
    NATIVE_MATCHED,
    NativeSetting,
    RecallMatch,
    build_native_table,
    match_recall,
    mean_overlap,
    native_search,
)
from evals.hybrid.prepare import Prepared
from evals.hybrid.sweep import SWEEP_QUERIES, vector_sweep
from evals.machine import load_average
from evals.synthetic import BENCH_CHUNKING
from groundkit import Collection, RetrievalConfig, SearchMode, SentenceTransformerEmbedder
from groundkit.retrieval import Retriever
from groundkit.storage import LanceDBVectorStore
from groundkit.storage.protocols import VectorStoreProtocol

__all__ = ["LatencyResult", "Samples", "run_latency"]


@dataclass
class Samples:
    """Per-query measurements of one search setting."""

    total_ms: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)
    results: list[int] = field(default_factory=list)
    stale: int = 0

    def excluding_embed(self) -> list[float]:
        embed = self.stages.get("embed_ms", [])
        return [t - e for t, e in zip(self.total_ms, embed, strict=True)]


@dataclass
class LatencyResult:
    """Everything part 2 measured."""

    prepared: Prepared
    queries: int
    ann_index: bool
    vector_rows: int
    index_stats: str
    open_s: list[float]
    minilm_query_ms: list[float]
    samples: dict[str, Samples]
    load_before: str
    sweep: list[list[str]]
    sweep_queries: int
    recall: dict[int, float]  # the store's defaults against exact search, per k
    # Hybrid top 10 with the defaults against hybrid over exact vector search:
    # (mean recall@10, share of queries whose ordered top 10 is identical).
    hybrid_recall: tuple[float, float]
    index_build_s: float | None
    native_build_s: float
    native_note: str
    # The anchor's setting at groundkit's recall floor, and the ladder that found it.
    native_match: RecallMatch


async def _rebuild_index(store: LanceDBVectorStore) -> float | None:
    """Drop the vector index and time ``optimize()`` building it with the current settings.

    A cached collection then always carries the index the current code builds,
    whatever ingested it. ``None`` below the ANN threshold.
    """
    if await store.count() < store.ann_threshold:
        return None
    if await store.has_ann_index():
        await store.table.drop_index("vector_idx")
    started = time.perf_counter()
    await store.optimize()
    return time.perf_counter() - started


async def _index_stats(store: LanceDBVectorStore) -> str:
    """How much of the table the vector index covers, as the page states it."""
    s = await store.table.index_stats("vector_idx")
    if s is None:
        return "–"
    return (
        f"{s.index_type}, {s.num_indexed_rows:,} rows indexed, {s.num_unindexed_rows:,} unindexed"
    )


async def _hybrid_recall(
    col: Collection, retriever: Retriever, queries: list[str]
) -> tuple[float, float]:
    """Hybrid's top 10 with the defaults against hybrid whose vector side is LanceDB's
    exact flat scan (``ExactVectors``): mean recall@10 and the share of identical
    ordered top 10s."""
    assert isinstance(col.vector_store, LanceDBVectorStore)
    exact_store = cast(VectorStoreProtocol, ExactVectors(col.vector_store))
    reference = await Retriever.open(
        col.store, RetrievalConfig(), embedder=HashEmbedder(), vector_store=exact_store
    )
    got: list[list[str]] = []
    want: list[list[str]] = []
    for q in queries:
        got.append([r.chunk_id for r in (await retriever.search(q, 10, mode="hybrid")).results])
        want.append([r.chunk_id for r in (await reference.search(q, 10, mode="hybrid")).results])
    same = sum(g == w for g, w in zip(got, want, strict=True))
    return mean_overlap(got, want), same / max(1, len(queries))


async def run_latency(
    prepared: Prepared, n_queries: int, minilm: SentenceTransformerEmbedder
) -> LatencyResult:
    """Part 2: open, then every query in every setting, settings interleaved per query."""
    queries: list[str] = json.loads((prepared.root / "queries.json").read_text("utf-8"))
    queries = queries[:n_queries]
    hashed = HashEmbedder()
    async with Collection.open(
        prepared.root / "index", "bench", chunking=BENCH_CHUNKING, embedder=hashed
    ) as col:
        store = col.vector_store
        assert isinstance(store, LanceDBVectorStore)
        log(f"part 2: {prepared.name}: building the vector index")
        index_build_s = await _rebuild_index(store)
        ann = await store.has_ann_index()
        rows = await store.count()
        stats = await _index_stats(store) if ann else "–"
        opens: list[float] = []
        retriever: Retriever | None = None
        for _ in range(3):
            retriever = None
            retriever, seconds = await open_retriever(col, hashed)
            opens.append(seconds)
        assert retriever is not None
        minilm_retriever, _ = await open_retriever(col, MiniLMQueryEmbedder(minilm))
        await minilm.embed_query(WARMUP_TEXT)
        log("part 2: building LanceDB's native FTS + vector table (anchor)")
        native, native_build_s, native_note = await build_native_table(
            col, prepared.root / "native-anchor"
        )
        log(f"part 2: {prepared.name}: the anchor's probing at recall@10 ≥ {RECALL_TARGET:g}")
        native_match = await match_recall(native, hashed, queries[:SWEEP_QUERIES], RECALL_TARGET)
        load_before = load_average()

        minilm_ms: list[float] = []
        for q in queries:
            started = time.perf_counter()
            await minilm.embed_query(q)
            minilm_ms.append((time.perf_counter() - started) * 1000)

        settings: list[tuple[str, Retriever, SearchMode]] = [
            ("bm25", retriever, "bm25"),
            ("dense", retriever, "dense"),
            ("hybrid", retriever, "hybrid"),
            ("hybrid, MiniLM query", minilm_retriever, "hybrid"),
        ]
        samples = {label: Samples() for label, _, _ in settings}
        native_settings: dict[str, tuple[bool, NativeSetting]] = {
            NATIVE_FTS: (False, DEFAULTS),
            NATIVE_HYBRID: (True, DEFAULTS),
            NATIVE_MATCHED: (True, native_match.setting),
        }
        native_labels = tuple(native_settings)
        samples.update({label: Samples() for label in native_labels})

        async def anchor(label: str, q: str) -> int:
            hybrid, setting = native_settings[label]
            found = await native_search(native, hashed, q, hybrid=hybrid, setting=setting)
            return int(found.num_rows)

        for q in queries[:WARMUP_QUERIES]:
            for _, r, mode in settings:
                await r.search(q, 10, mode=mode)
            for label in native_labels:
                await anchor(label, q)
        for q in queries:
            for label, r, mode in settings:
                started = time.perf_counter()
                response = await r.search(q, 10, mode=mode)
                elapsed = (time.perf_counter() - started) * 1000
                s = samples[label]
                s.total_ms.append(elapsed)
                s.results.append(len(response.results))
                s.stale += int(response.metadata.get("stale_dropped", 0))
                for key, ms in response.metadata.get("timings_ms", {}).items():
                    s.stages.setdefault(key, []).append(float(ms))
            for label in native_labels:
                started = time.perf_counter()
                found = await anchor(label, q)
                samples[label].total_ms.append((time.perf_counter() - started) * 1000)
                samples[label].results.append(found)
        sweep_vectors = [hashed.embed_sync([q])[0] for q in queries[:SWEEP_QUERIES]]
        sweep, recall = await vector_sweep(store, sweep_vectors, ann)
        log(f"part 2: {prepared.name}: hybrid against hybrid over exact vector search")
        hybrid_recall = await _hybrid_recall(col, retriever, queries[:SWEEP_QUERIES])
    return LatencyResult(
        prepared=prepared,
        queries=len(queries),
        ann_index=ann,
        vector_rows=rows,
        index_stats=stats,
        open_s=opens,
        minilm_query_ms=minilm_ms,
        samples=samples,
        load_before=load_before,
        sweep=sweep,
        sweep_queries=len(sweep_vectors),
        recall=recall,
        hybrid_recall=hybrid_recall,
        index_build_s=index_build_s,
        native_build_s=native_build_s,
        native_note=native_note,
        native_match=native_match,
    )
