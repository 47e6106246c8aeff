"""The hybrid benchmark's parts, on tiny inputs: page sections and the vector sweep."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evals.bench_util import Timers, ratio_text
from evals.hybrid.embedders import HashEmbedder
from evals.hybrid.ingest import IngestResult
from evals.hybrid.ingest_page import ingest_section
from evals.hybrid.ingest_profile import ProfileResult
from evals.hybrid.latency import LatencyResult, Samples
from evals.hybrid.latency_page import latency_section, summary_lines
from evals.hybrid.memory import RSS_SYSTEMS, Memory, memory_lines
from evals.hybrid.native import (
    ANCHOR_RQ_BITS,
    NATIVE_FTS,
    NATIVE_HYBRID,
    NATIVE_MATCHED,
    NativeSetting,
    RecallMatch,
    match_recall,
)
from evals.hybrid.prepare import Prepared
from evals.hybrid.sweep import sweep_lines, vector_sweep
from groundkit.storage import LanceDBVectorStore


def _latency_result() -> LatencyResult:
    prepared = Prepared(
        name="synthetic-10k",
        root=Path("unused"),
        chunks=10_000,
        files=900,
        ingest_s=30.0,
        docs_phase_s=20.0,
        vector_s={"embed_documents (hash)": 1.0, "vector upsert": 5.0, "vector optimize": 0.5},
        ingested_at="2025-01-01T00:00:00+00:00",
    )
    samples: dict[str, Samples] = {}
    for i, label in enumerate(("bm25", "dense", "hybrid", "hybrid, MiniLM query")):
        total = [float(i + 1 + q % 7) for q in range(20)]
        stages = {"embed_ms": [0.5] * 20, "vector_ms": [1.0] * 20} if label != "bm25" else {}
        samples[label] = Samples(total_ms=total, stages=stages, results=[10] * 20)
    samples[NATIVE_FTS] = Samples(total_ms=[2.0] * 20, results=[10] * 20)
    samples[NATIVE_HYBRID] = Samples(total_ms=[2.5] * 20, results=[10] * 20)
    samples[NATIVE_MATCHED] = Samples(total_ms=[3.0] * 20, results=[10] * 20)
    matched = NativeSetting(nprobes=40)
    ladder = [
        (NativeSetting(), 0.5, 0.8),
        (NativeSetting(nprobes=20), 0.7, 0.9),
        (matched, 0.96, 0.98),
    ]
    return LatencyResult(
        prepared=prepared,
        queries=20,
        ann_index=False,
        vector_rows=10_000,
        index_stats="–",
        open_s=[0.2, 0.3, 0.25],
        minilm_query_ms=[5.0] * 20,
        samples=samples,
        load_before="1.00 1.00 1.00",
        sweep=[["exact", "9.00", "1.000", "9.50", "1.000"]],
        sweep_queries=20,
        recall={10: 1.0, 100: 1.0},
        hybrid_recall=(1.0, 1.0),
        index_build_s=None,
        native_build_s=1.5,
        native_note="10,000 rows",
        native_match=RecallMatch(setting=matched, ladder=ladder, floor=0.95),
    )


def _ingest_result() -> IngestResult:
    timers = []
    for run in range(2):
        t = Timers()
        t.add("embed_documents", 9.0 + run)
        t.add("vector upsert", 0.5)
        timers.append(t)
    profile = ProfileResult(2.0, 1.8, [("x.py:1(f)", 10, 0.5, 1.0)], 400, 100)
    return IngestResult(
        documents=100,
        chunks=300,
        chars=250_000,
        encode_s=[9.0, 9.2, 9.1],
        direct_s=[9.1, 9.3],
        dense_s=[10.0, 10.2],
        bm25_s=0.8,
        docs_phase_s=[0.7, 0.7],
        bm25_docs_phase_s=0.6,
        timers=timers,
        max_cosine_gap=1e-7,
        load_before="1.00 1.00 1.00",
        groups=[300],
        grouped_s=None,
        tokens={"text": 1000, "one call": 1200, "indexer groups": 1200},
        profile=profile,
    )


def test_sections_state_their_targets_without_history() -> None:
    result = _latency_result()
    lines, targets = latency_section(result)
    assert len(targets) == 4
    # hybrid − embed p50 is 5.5 ms against the anchor's 3 ms.
    assert targets[0].startswith("- hybrid p50 excluding query embedding ≤ 1.2× LanceDB's")
    # The target's anchor is LanceDB at the recall floor, not at its defaults.
    assert "at recall@10 ≥ 0.95 (nprobes 40) at 10,000 chunks" in targets[0]
    assert targets[0].endswith("5.5 ms / 3.0 ms = 1.83× → **missed**")
    page = "\n".join(lines)
    assert "| **nprobes 40** (chosen) | 0.960 | 0.980 |" in page
    assert "whose recall@10 is 0.500 in vector search and 0.800 in hybrid, 2.20×" in page
    assert targets[1].startswith("- hybrid p50 excluding query embedding ≤ 50 ms at 10,000")
    assert targets[1].endswith("→ met")
    assert targets[3].endswith("(identical ordered top 10: 100% of queries) → met")
    summary = "\n".join(summary_lines([result]))
    assert (
        "| 10,000 | exact, in memory | 4.50 | 5.50 | 1.000 / 1.000 | 3.00 (nprobes 40) "
        "| **1.83×** (**missed**) | 2.50 | 0.500 / 0.800 | 2.20× |"
    ) in summary
    ingest_lines, ingest_targets = ingest_section(_ingest_result())
    assert ingest_targets[0].startswith("- dense ingest ≤ 1.1×")
    memory = [Memory(label, 300.0, 100.0, 0.1, 2.0) for label in RSS_SYSTEMS]
    text = "\n".join([*lines, *ingest_lines, *memory_lines(memory, 10_000)]).lower()
    assert "issue" not in text
    assert "| anchor: lancedb native hybrid (fts + vector, rrf) | 300 | 100 | 1.00× |" in text


async def test_vector_sweep_reference_is_the_stores_exact_search(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    texts = [f"word{i % 37} word{i % 11} other{i % 5} thing{i}" for i in range(300)]
    vectors = embedder.embed_sync(texts)
    store = await LanceDBVectorStore.open(tmp_path, "bench", embedder.dimensions)
    try:
        ids = [f"{i:05d}" for i in range(len(texts))]
        await store.upsert_documents([("doc", ids, vectors)])
        queries = [np.asarray(v) for v in embedder.embed_sync(["word3 other2", "thing7", "word5"])]
        rows, recall = await vector_sweep(store, queries, ann=False)
    finally:
        await store.close()
    # Without an index the store's default search is exact too: full recall at both k.
    assert recall == {10: 1.0, 100: 1.0}
    assert [row[0] for row in rows][1].endswith("(default)")
    assert rows[0][2] == rows[0][4] == "1.000"
    page = sweep_lines(rows, len(queries))
    assert any(line.startswith("| vector search setting |") for line in page)


async def test_anchor_is_probed_until_it_reaches_the_recall_floor(tmp_path: Path) -> None:
    import lancedb
    import pyarrow as pa
    from lancedb.index import FTS, IvfRq

    from groundkit.storage.lancedb import _RQ_BITS

    assert ANCHOR_RQ_BITS == _RQ_BITS  # the anchor's index is the kind groundkit builds

    embedder = HashEmbedder()
    texts = [f"w{i % 53} w{i % 29} v{i % 17} u{i % 7} t{i}" for i in range(2_000)]
    vectors = embedder.embed_sync(texts)
    data = pa.table(
        {
            "chunk_id": pa.array([f"{i:05d}" for i in range(len(texts))], pa.string()),
            "text": pa.array(texts, pa.string()),
            "vector": pa.array([list(map(float, v)) for v in vectors], pa.list_(pa.float32(), 384)),
        }
    )
    db = await lancedb.connect_async(str(tmp_path))
    table = await db.create_table("native", data=data)
    await table.create_index("text", config=FTS(language="English"))
    rq = IvfRq(distance_type="cosine", num_bits=ANCHOR_RQ_BITS, num_partitions=64)
    await table.create_index("vector", config=rq)
    queries = [f"w{i} v{i % 17} u{i % 7}" for i in range(12)]

    # A floor nothing but the flat scan reaches ends the ladder there, exact.
    flat = await match_recall(table, embedder, queries, 1.01)
    assert flat.setting == NativeSetting(exact=True)
    assert flat.ladder[-1] == (flat.setting, 1.0, 1.0)
    assert flat.ladder[0][0] == NativeSetting()  # LanceDB's defaults come first
    assert len(flat.ladder) == 1 + 8 * 3 + 1
    assert [s.refine_factor for s, _, _ in flat.ladder[1:4]] == [None, 2, 5]
    assert {s.nprobes for s, _, _ in flat.ladder[1:4]} == {20}
    # Re-scoring every partition's candidates by full vectors finds the exact neighbours.
    every = [v for s, v, _ in flat.ladder if s == NativeSetting(nprobes=80, refine_factor=5)]
    assert every == [1.0]

    # A reachable floor stops at the first rung meeting it in vector search and hybrid.
    reached = await match_recall(table, embedder, queries, 0.95)
    chosen = reached.ladder[-1]
    assert chosen[0] == reached.setting and not reached.setting.exact
    assert chosen[1] >= 0.95 and chosen[2] >= 0.95
    assert all(v < 0.95 or h < 0.95 for _, v, h in reached.ladder[:-1])
    assert reached.ladder == flat.ladder[: len(reached.ladder)]


@pytest.mark.parametrize(
    ("ratio", "target", "shown"),
    [
        (1.17, 1.2, "1.17×"),
        (1.2012, 1.2, "1.201×"),  # 1.20× beside "missed" would read as met
        (1.2004, 1.2, "1.2004×"),
        (1.2, 1.2, "1.20×"),
        (1.1996, 1.2, "1.20×"),  # rounds onto the target, and is met
        (0.9951, 1.0, "1.00×"),
        (1.004, 1.0, "1.004×"),
    ],
)
def test_a_ratio_is_shown_on_its_verdicts_side(ratio: float, target: float, shown: str) -> None:
    assert ratio_text(ratio, target) == shown
