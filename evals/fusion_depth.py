"""What hybrid's fusion depth buys and costs: SciFact quality and 1M-chunk latency per depth.

    python -m evals.fusion_depth [--data DIR] [--depths 10,30,50,100,200]
                                 [--scale-dir evals/out/bench_hybrid/synthetic-1m]
                                 [--queries 200] [--out docs/benchmarks-hybrid-scale.md]

``RetrievalConfig.hybrid_candidates`` is how many candidates each side of a hybrid
search hands to fusion. The vector side's query cost grows with it (LanceDB's scan of
the index keeps more rows), and fusion normalises over it.

Part 1 ingests SciFact once with the packaged all-MiniLM-L6-v2 (torch, offline) and
searches every judged query at ``top_k`` 10 with each depth: nDCG@10 of the documents
ranked by their best chunk, as ``evals.beir_run`` ranks them.

Part 2 opens the hybrid benchmark's cached synthetic collection (``evals.bench_hybrid``
builds it; hashed vectors, ANN index) and times hybrid search (``top_k`` 10, query
embedding excluded) with one retriever per depth, the depths taking turns on every
query so load on the machine falls on all of them alike. Part 2 is skipped when the
cache is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from evals.beir import (
    DEFAULT_MEASURES,
    BeirDataset,
    ingest_dataset,
    load_beir,
    offline_models,
    rank_queries,
)
from evals.hybrid.embedders import HashEmbedder
from evals.machine import (
    REPO_ROOT,
    command_line,
    default_scifact_dir,
    machine_lines,
    markdown_table,
    write_section,
)
from evals.metrics import evaluate
from evals.synthetic import BENCH_CHUNKING
from groundkit import Collection, RetrievalConfig, SentenceTransformerEmbedder
from groundkit.retrieval import Retriever

SECTION = "fusion-depth"
DEFAULT_DEPTHS = "10,30,50,100,200"
DEFAULT_SCALE_DIR = REPO_ROOT / "evals" / "out" / "bench_hybrid" / "synthetic-1m"
TOP_K = 10
WARMUP = 10


@dataclass(frozen=True)
class Quality:
    depth: int
    ndcg: float
    p50_ms: float


@dataclass(frozen=True)
class Latency:
    depth: int
    p50_ms: float
    vector_p50_ms: float


async def quality(data: BeirDataset, depths: list[int]) -> tuple[list[Quality], int]:
    """nDCG@10 per depth over every judged SciFact query, one ingest for all."""
    queries = data.judged_queries()
    qrels = {q: data.qrels[q] for q in queries}
    out: list[Quality] = []
    with tempfile.TemporaryDirectory(prefix="groundkit-depth-") as tmp:
        embedder = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
        async with ingest_dataset(data, Path(tmp), embedder=embedder) as ing:
            col = ing.collection
            for depth in depths:
                retriever = await Retriever.open(
                    col.store,
                    RetrievalConfig(hybrid_candidates=depth),
                    embedder=col.embedder,
                    vector_store=col.vector_store,
                )
                ranked = await rank_queries(retriever, queries, mode="hybrid", top_k=TOP_K)
                means = evaluate(qrels, ranked.rankings, DEFAULT_MEASURES).means
                out.append(Quality(depth, means["ndcg@10"], statistics.median(ranked.latencies_ms)))
                print(f"[fusion-depth] scifact depth {depth}: {out[-1]}", flush=True)
    return out, len(queries)


async def latency(root: Path, depths: list[int], n_queries: int) -> tuple[list[Latency], int]:
    """Hybrid p50 per depth on the cached collection, the depths taking turns per query."""
    queries: list[str] = json.loads((root / "queries.json").read_text("utf-8"))[:n_queries]
    hashed = HashEmbedder()
    async with Collection.open(
        root / "index", "bench", chunking=BENCH_CHUNKING, embedder=hashed, create=False
    ) as col:
        retrievers = {
            depth: await Retriever.open(
                col.store,
                RetrievalConfig(hybrid_candidates=depth),
                embedder=hashed,
                vector_store=col.vector_store,
            )
            for depth in depths
        }
        for q in queries[:WARMUP]:
            for retriever in retrievers.values():
                await retriever.search(q, TOP_K, mode="hybrid")
        total: dict[int, list[float]] = {d: [] for d in depths}
        vector: dict[int, list[float]] = {d: [] for d in depths}
        for q in queries:
            for depth, retriever in retrievers.items():
                started = time.perf_counter()
                response = await retriever.search(q, TOP_K, mode="hybrid")
                elapsed = (time.perf_counter() - started) * 1000
                stages = response.metadata.get("timings_ms", {})
                total[depth].append(elapsed - float(stages.get("embed_ms", 0.0)))
                vector[depth].append(float(stages.get("vector_ms", 0.0)))
        assert col.vector_store is not None
        rows = await col.vector_store.count()
    found = [Latency(d, statistics.median(total[d]), statistics.median(vector[d])) for d in depths]
    return found, rows


def section(
    scifact: list[Quality],
    n_judged: int,
    scale: tuple[list[Latency], int] | None,
    scale_dir: Path,
    n_queries: int,
) -> list[str]:
    default = RetrievalConfig().hybrid_candidates
    base = next((q for q in scifact if q.depth == default), None)
    lines = [
        "## Fusion depth: what `hybrid_candidates` buys and costs",
        "",
        "Generated by `evals/fusion_depth.py`; do not edit by hand.",
        "",
        f"Command: `{command_line()}`",
        "",
        f"`hybrid_candidates` (default {default}) is how many candidates each side hands to "
        "fusion. SciFact: every judged query "
        f"({n_judged}) at `top_k` {TOP_K}, the packaged all-MiniLM-L6-v2 (torch), documents "
        "ranked by their best chunk.",
        "",
    ]
    rows = []
    for q in scifact:
        delta = f"{q.ndcg - base.ndcg:+.4f}" if base is not None else "–"
        rows.append([str(q.depth), f"{q.ndcg:.4f}", delta, f"{q.p50_ms:.1f}"])
    lines += [
        markdown_table(
            [
                "depth",
                "SciFact nDCG@10",
                f"against depth {default}",
                "hybrid p50 ms, the query's embedding included",
            ],
            rows,
        ),
        "",
    ]
    if scale is None:
        lines += [f"Latency at scale: not measured (no cached collection at `{scale_dir}`).", ""]
    else:
        found, n_rows = scale
        ref = next((x for x in found if x.depth == default), None)
        lines += [
            f"Latency on the hybrid benchmark's cached synthetic collection ({n_rows:,} chunks, "
            f"hashed vectors, ANN index), {n_queries} queries, `top_k` {TOP_K}, query "
            "embedding excluded; the depths take turns on every query:",
            "",
        ]
        rows = []
        for x in found:
            ratio = f"{x.p50_ms / ref.p50_ms:.2f}×" if ref is not None else "–"
            rows.append([str(x.depth), f"{x.p50_ms:.2f}", f"{x.vector_p50_ms:.2f}", ratio])
        lines += [
            markdown_table(
                ["depth", "hybrid p50 ms", "of which vector search", f"× depth {default}"], rows
            ),
            "",
        ]
    lines += machine_lines()
    return lines


async def _run(args: argparse.Namespace, depths: list[int]) -> list[str]:
    scifact, n_judged = await quality(load_beir(args.data), depths)
    scale = None
    if (args.scale_dir / "index").is_dir():
        scale = await latency(args.scale_dir, depths, args.queries)
        for x in scale[0]:
            print(f"[fusion-depth] scale depth {x.depth}: {x}", flush=True)
    return section(scifact, n_judged, scale, args.scale_dir, args.queries)


def main(argv: list[str] | None = None) -> int:
    offline_models()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=default_scifact_dir())
    parser.add_argument("--depths", default=DEFAULT_DEPTHS, help="comma-separated depths")
    parser.add_argument("--scale-dir", type=Path, default=DEFAULT_SCALE_DIR)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    depths = sorted({int(d) for d in args.depths.split(",")})
    lines = asyncio.run(_run(args, depths))
    print("\n".join(lines))
    if args.out is not None:
        write_section(args.out, SECTION, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
