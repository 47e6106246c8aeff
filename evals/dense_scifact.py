"""SciFact hybrid fusion settings side by side (the evidence behind ADR 0012).

python -m evals.dense_scifact [--data DIR] [--limit-queries N] [--out docs/quality-dense.md]

One ingest with ``SentenceTransformerEmbedder("all-MiniLM-L6-v2")`` (the packaged
copy, offline), then bm25, dense and several hybrid fusion settings on the same
collection, each through its own ``Retriever``. The per-mode figures with the
default settings come from ``evals.beir_run``; this module exists to compare
fusion choices. The top ten ranked documents' cited spans are read back.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from evals.beir import (
    DEFAULT_MEASURES,
    BeirDataset,
    VerifyTally,
    ingest_dataset,
    load_beir,
    offline_models,
    rank_queries,
    verify_results,
)
from evals.machine import command_line, default_scifact_dir, machine_lines
from evals.metrics import evaluate
from evals.plots import fusion_points, plot_fusion_weight
from evals.stats import percentile
from groundkit import EmbeddingProtocol, RetrievalConfig, SearchMode, SentenceTransformerEmbedder
from groundkit.config import MAX_TOP_K
from groundkit.retrieval import Retriever

Setting = tuple[str, SearchMode, RetrievalConfig]

SETTINGS: list[Setting] = [
    ("bm25", "bm25", RetrievalConfig()),
    ("dense", "dense", RetrievalConfig()),
    (
        "hybrid rrf k=60, equal weights",
        "hybrid",
        RetrievalConfig(hybrid_fusion="rrf", hybrid_bm25_weight=0.5),
    ),
    (
        "hybrid convex, bm25 weight 0.5",
        "hybrid",
        RetrievalConfig(hybrid_fusion="convex", hybrid_bm25_weight=0.5),
    ),
    (
        "hybrid convex, bm25 weight 0.6 (default)",
        "hybrid",
        RetrievalConfig(hybrid_fusion="convex", hybrid_bm25_weight=0.6),
    ),
    (
        "hybrid convex, bm25 weight 0.7",
        "hybrid",
        RetrievalConfig(hybrid_fusion="convex", hybrid_bm25_weight=0.7),
    ),
]


@dataclass(frozen=True)
class ModeResult:
    label: str
    means: dict[str, float]
    p50_ms: float
    verified: int
    failed: int


async def run(
    data: BeirDataset,
    limit: int | None,
    settings: list[Setting] | None = None,
    embedder: EmbeddingProtocol | None = None,
) -> tuple[list[ModeResult], float, int]:
    """Ingest once with vectors (``embedder``, default the packaged MiniLM on torch), then
    evaluate each ``(label, mode, config)``."""
    queries = data.judged_queries(limit)
    qrels = {q: data.qrels[q] for q in queries}
    out: list[ModeResult] = []
    embedder = embedder or SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    with tempfile.TemporaryDirectory(prefix="groundkit-dense-") as tmp:
        async with ingest_dataset(data, Path(tmp), embedder=embedder) as ing:
            col = ing.collection
            for label, mode, cfg in settings or SETTINGS:
                cfg = cfg.model_copy(update={"hybrid_candidates": MAX_TOP_K})
                retriever = await Retriever.open(
                    col.store, cfg, embedder=col.embedder, vector_store=col.vector_store
                )
                qpass = await rank_queries(retriever, queries, mode=mode, top_k=MAX_TOP_K)
                tally = VerifyTally()
                for best in qpass.ranked.values():
                    await verify_results(best[:10], col.base_dir, tally)
                means = evaluate(qrels, qpass.rankings, DEFAULT_MEASURES).means
                out.append(
                    ModeResult(
                        label,
                        dict(means),
                        percentile(qpass.latencies_ms, 50),
                        tally.verified,
                        tally.failed,
                    )
                )
                print(_row(out[-1]), flush=True)
    return out, ing.ingest_s, ing.chunks


def _row(r: ModeResult) -> str:
    m = r.means
    return (
        f"| {r.label} | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} | {m['mrr@10']:.4f} | "
        f"{r.p50_ms:.1f} | {r.verified}/{r.verified + r.failed} |"
    )


def plot_link(path: str) -> str:
    """The page's line showing the plot, ``path`` relative to the page."""
    return f"![nDCG@10 against the BM25 weight of convex fusion, RRF as a reference]({path})"


def main(argv: list[str] | None = None) -> int:
    offline_models()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=default_scifact_dir())
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    data = load_beir(args.data)
    results, ingest_s, chunks = asyncio.run(run(data, args.limit_queries))
    rows = [_row(r) for r in results]
    link: list[str] = []
    if args.out:
        png = args.out.parent / "img" / f"{args.out.stem}-fusion.png"
        weights, references = fusion_points([(r.label, r.means["ndcg@10"]) for r in results])
        plot_fusion_weight(weights, references, RetrievalConfig().hybrid_bm25_weight, png)
        link = [plot_link(f"{png.parent.name}/{png.name}"), ""]
    text = [
        "# SciFact: bm25, dense and hybrid",
        "",
        "Generated by `evals/dense_scifact.py`; do not edit by hand.",
        "",
        f"Command: `{command_line()}`",
        "",
        "One file per abstract, ingested with `SentenceTransformerEmbedder('all-MiniLM-L6-v2')`",
        f"(packaged copy, CPU): {len(data.corpus)} documents, {chunks} chunks, ingest (chunk,",
        f"analyse, embed, store) {ingest_s:.0f} s. Documents ranked by their best chunk out of",
        f"{MAX_TOP_K}; hybrid takes {MAX_TOP_K} candidates from each side. Latency is per query",
        "at that depth, query embedding included. The last column counts the top-10 citations",
        "read back intact with `check_citation`.",
        "",
        "| run | nDCG@10 | Recall@100 | MRR@10 | p50 ms | citations verified |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        *link,
        "Machine:",
        "",
        *machine_lines(),
        "",
    ]
    if args.out:
        args.out.write_text("\n".join(text), encoding="utf-8")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
