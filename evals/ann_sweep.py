"""Recall@10 and latency of the vector index against exact search, per ``nprobes``.

Runs on a collection that ``evals.bench_hybrid`` prepared (HashEmbedder vectors):

    python -m evals.ann_sweep --dir evals/out/bench_hybrid/synthetic-1m --nprobes 20,50,100,200

Exact search bypasses the index (a flat scan), so each query costs about a second
at 1M rows; keep ``--queries`` small.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from evals.bench_hybrid import HashEmbedder
from evals.machine import command_line, markdown_table
from groundkit.index.dense import DEFAULT_REFINE_FACTOR

__all__ = ["main"]


async def _sweep(root: Path, probes: list[int], n_queries: int) -> list[list[str]]:
    import lancedb

    db = await lancedb.connect_async(str(root / "index"))
    table: Any = await db.open_table("bench")
    queries: list[str] = json.loads((root / "queries.json").read_text("utf-8"))[:n_queries]
    embedder = HashEmbedder()
    vectors = [embedder.embed_sync([q])[0] for q in queries]

    def base(vector: Any) -> Any:
        return table.query().nearest_to(vector).column("vector").distance_type("cosine")

    exact = []
    for vector in vectors:
        found = await base(vector).bypass_vector_index().select(["chunk_id"]).limit(10).to_arrow()
        exact.append(set(found["chunk_id"].to_pylist()))
    rows = []
    for nprobes in probes:
        recalls, latencies = [], []
        for vector, truth in zip(vectors, exact, strict=True):
            started = time.perf_counter()
            query = base(vector).nprobes(nprobes).refine_factor(DEFAULT_REFINE_FACTOR)
            found = await query.select(["chunk_id"]).limit(10).to_arrow()
            latencies.append((time.perf_counter() - started) * 1000)
            recalls.append(len(truth & set(found["chunk_id"].to_pylist())) / 10)
        rows.append(
            [
                str(nprobes),
                f"{statistics.mean(recalls):.3f}",
                f"{statistics.median(latencies):.1f}",
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.ann_sweep", description=__doc__)
    parser.add_argument("--dir", type=Path, required=True, help="a bench_hybrid synthetic dir")
    parser.add_argument("--nprobes", default="20,50,100,200")
    parser.add_argument("--queries", type=int, default=15)
    args = parser.parse_args(argv)
    probes = [int(p) for p in args.nprobes.split(",") if p.strip()]
    rows = asyncio.run(_sweep(args.dir, probes, args.queries))
    print(f"`{command_line()}` ({args.queries} queries, k = 10, refine_factor "
          f"{DEFAULT_REFINE_FACTOR})\n")  # fmt: skip
    print(markdown_table(["nprobes", "recall@10", "p50 ms"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
