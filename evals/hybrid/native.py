"""The anchor of part 2: LanceDB's own FTS and FTS + vector hybrid over the same data.

The table holds the chunk texts and the vectors groundkit stored; the latency
loop and the memory workers both search it through ``native_search``.

LanceDB's default hybrid probes a few IVF partitions and keeps whatever recall
that gives, while groundkit's defaults hold recall@10 ≥ 0.95 against exact
search. So the anchor runs twice: with LanceDB's defaults, and at the least
``nprobes`` of a ladder whose vector and hybrid recall@10 reach the same floor
(``match_recall``; adr/0079-equal-recall-anchor.md).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.hybrid.embedders import HashEmbedder
from groundkit import Collection
from groundkit.storage import LanceDBVectorStore

__all__ = [
    "ANCHOR_RQ_BITS",
    "NATIVE_FTS",
    "NATIVE_HYBRID",
    "NATIVE_MATCHED",
    "NATIVE_TABLE",
    "NativeSetting",
    "RecallMatch",
    "build_native_table",
    "match_recall",
    "mean_overlap",
    "native_search",
]

NATIVE_FTS = "anchor: LanceDB native FTS"
NATIVE_HYBRID = "anchor: LanceDB native hybrid (FTS + vector, RRF)"
NATIVE_MATCHED = "anchor: LanceDB native hybrid at groundkit's recall floor"
NATIVE_TABLE = "native"
# RaBitQ code width of the anchor's vector index: that of groundkit's store (ADR 0023).
ANCHOR_RQ_BITS = 4
# nprobes tried, each without and then with re-scoring by full vectors (LanceDB's
# refine_factor: k × factor candidates re-ranked), before the flat scan, exact by
# construction; the top rungs exceed any partition count here.
_NPROBES_LADDER = (20, 40, 80, 160, 320, 640, 1280, 2560)
_REFINE_LADDER = (None, 2, 5)


@dataclass(frozen=True)
class NativeSetting:
    """How the anchor's vector side searches: LanceDB's defaults, ``nprobes``, or flat."""

    nprobes: int | None = None
    refine_factor: int | None = None
    exact: bool = False

    @property
    def label(self) -> str:
        if self.exact:
            return "flat scan (`bypass_vector_index()`)"
        if self.nprobes is None:
            return "LanceDB's defaults"
        if self.refine_factor is None:
            return f"nprobes {self.nprobes}"
        return f"nprobes {self.nprobes}, refine_factor {self.refine_factor}"


DEFAULTS = NativeSetting()


@dataclass(frozen=True)
class RecallMatch:
    """The anchor setting chosen by ``match_recall`` and every rung measured on the way.

    ``ladder`` rows: (setting, vector recall@10, hybrid recall@10), both against the
    anchor's own flat scan; the first row is LanceDB's defaults.
    """

    setting: NativeSetting
    ladder: list[tuple[NativeSetting, float, float]]
    floor: float


async def build_native_table(col: Collection, workdir: Path) -> tuple[Any, float, str]:
    """LanceDB's own hybrid stack over the same chunk texts and vectors: an anchor.

    One table of (chunk_id, text, vector) with LanceDB's native FTS index
    (English stemming and stop words, its BM25) and the kind of vector index
    groundkit's store builds at scale (IVF_RQ, 4-bit codes, cosine, LanceDB's
    default partitioning), so that at equal recall the two differ in what runs
    around the index, not in the index. Returns the table, build seconds (table
    + both indexes) and a note on what was built.
    """
    import lancedb
    import pyarrow as pa
    from lancedb.index import FTS, IvfRq

    store = col.vector_store
    assert isinstance(store, LanceDBVectorStore)
    # Copy the vectors groundkit stored, read through the store's raw table.
    vectors = await store.table.query().select(["chunk_id", "vector"]).to_arrow()
    texts = {s.chunk_id: s.content async for batch in col.store.iter_chunks() for s in batch}
    ids = [str(c) for c in vectors["chunk_id"].to_pylist()]
    data = pa.table(
        {
            "chunk_id": pa.array(ids, pa.string()),
            "text": pa.array([texts[c] for c in ids], pa.string()),
            "vector": vectors["vector"],
        }
    )
    shutil.rmtree(workdir, ignore_errors=True)
    started = time.perf_counter()
    db = await lancedb.connect_async(str(workdir))
    table = await db.create_table(NATIVE_TABLE, data=data)
    await table.create_index("text", config=FTS(language="English"))
    await table.create_index(
        "vector", config=IvfRq(distance_type="cosine", num_bits=ANCHOR_RQ_BITS)
    )
    build_s = time.perf_counter() - started
    note = (
        f"{len(ids):,} rows; FTS index (LanceDB native, English stemming and stop words) and "
        f"IVF_RQ cosine index ({ANCHOR_RQ_BITS}-bit codes, as groundkit's store builds at "
        "scale); hybrid = `nearest_to(vector).nearest_to_text(query)` with LanceDB's default "
        "RRF reranker"
    )
    return table, build_s, note


def _probe(query: Any, setting: NativeSetting) -> Any:
    if setting.exact:
        return query.bypass_vector_index()
    if setting.nprobes is not None:
        query = query.nprobes(setting.nprobes)
    if setting.refine_factor is not None:
        query = query.refine_factor(setting.refine_factor)
    return query


async def native_search(
    table: Any,
    embedder: HashEmbedder,
    q: str,
    *,
    hybrid: bool,
    setting: NativeSetting = DEFAULTS,
) -> Any:
    """The top 10 chunk ids for ``q`` (an Arrow table): FTS alone, or FTS + vector.

    The query vector is ``embedder``'s, as in groundkit's dense and hybrid rows;
    ``setting`` applies to the vector side of hybrid.
    """
    if hybrid:
        vector = embedder.embed_sync([q])[0]
        query = _probe(table.query().nearest_to(vector), setting).nearest_to_text(q)
    else:
        query = table.query().nearest_to_text(q)
    return await query.select(["chunk_id"]).limit(10).to_arrow()


async def _vector_ids(table: Any, vector: Any, setting: NativeSetting) -> list[str]:
    query = _probe(table.query().nearest_to(vector), setting)
    found = await query.select(["chunk_id"]).limit(10).to_arrow()
    return [str(c) for c in found["chunk_id"].to_pylist()]


async def _hybrid_ids(
    table: Any, embedder: HashEmbedder, q: str, setting: NativeSetting
) -> list[str]:
    found = await native_search(table, embedder, q, hybrid=True, setting=setting)
    return [str(c) for c in found["chunk_id"].to_pylist()]


def mean_overlap(got: list[list[str]], want: list[list[str]]) -> float:
    """Recall of each ``got`` against its ``want`` (the share of ``want`` found), averaged."""
    shares = [len(set(g) & set(w)) / max(1, len(w)) for g, w in zip(got, want, strict=True)]
    return sum(shares) / max(1, len(shares))


async def match_recall(
    table: Any, embedder: HashEmbedder, queries: list[str], floor: float
) -> RecallMatch:
    """The least probing at which the anchor's vector and hybrid recall@10 reach ``floor``.

    Each is measured against the anchor's own flat scan (``bypass_vector_index``),
    as groundkit's are against its exact search. Tries LanceDB's defaults, then
    ``_NPROBES_LADDER`` each with ``_REFINE_LADDER``; the flat scan, exact by
    construction, ends the ladder.
    """
    vectors = [embedder.embed_sync([q])[0] for q in queries]
    flat = NativeSetting(exact=True)
    want_vector = [await _vector_ids(table, v, flat) for v in vectors]
    want_hybrid = [await _hybrid_ids(table, embedder, q, flat) for q in queries]
    ladder: list[tuple[NativeSetting, float, float]] = []
    rungs = [NativeSetting(n, f) for n in _NPROBES_LADDER for f in _REFINE_LADDER]
    for setting in (DEFAULTS, *rungs):
        got_vector = [await _vector_ids(table, v, setting) for v in vectors]
        vector_recall = mean_overlap(got_vector, want_vector)
        hybrid_recall = mean_overlap(
            [await _hybrid_ids(table, embedder, q, setting) for q in queries], want_hybrid
        )
        ladder.append((setting, vector_recall, hybrid_recall))
        if vector_recall >= floor and hybrid_recall >= floor:
            return RecallMatch(setting=setting, ladder=ladder, floor=floor)
    ladder.append((flat, 1.0, 1.0))
    return RecallMatch(setting=flat, ladder=ladder, floor=floor)
