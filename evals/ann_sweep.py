"""Recall@10 and latency of ``LanceDBVectorStore.query`` against exact search, per ``nprobes``.

Runs on a collection that ``evals.bench_hybrid`` prepared (HashEmbedder vectors),
through the store's own search path with its default refine factor:

    python -m evals.ann_sweep --dir evals/out/bench_hybrid/synthetic-1m --nprobes all,20,50,100

``all`` is the store's default (every partition). Exact search bypasses the index
(a flat scan), so each reference query costs about a second at 1M rows; keep
``--queries`` small.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from evals.hybrid.embedders import HashEmbedder
from evals.machine import command_line, markdown_table
from evals.stats import percentile
from groundkit.storage.lancedb import LanceDBVectorStore

__all__ = ["main"]


async def _sweep(root: Path, probes: list[int | None], n_queries: int) -> list[list[str]]:
    embedder = HashEmbedder()
    dims = embedder.dimensions
    store = await LanceDBVectorStore.open(root / "index", "bench", dims, create=False)
    try:
        queries: list[str] = json.loads((root / "queries.json").read_text("utf-8"))[:n_queries]
        vectors = [embedder.embed_sync([q])[0] for q in queries]
        # The reference: the store's exact search, which bypasses the index.
        exact = [{h.chunk_id for h in await store.query(v, 10, exact=True)} for v in vectors]
        rows = []
        for nprobes in probes:
            store.nprobes = nprobes
            await store.query(vectors[0], 10)  # warm-up
            recalls, latencies = [], []
            for vector, truth in zip(vectors, exact, strict=True):
                started = time.perf_counter()
                hits = await store.query(vector, 10)
                latencies.append((time.perf_counter() - started) * 1000)
                recalls.append(len(truth & {h.chunk_id for h in hits}) / 10)
            rows.append(
                [
                    "every partition" if nprobes is None else str(nprobes),
                    f"{statistics.mean(recalls):.3f}",
                    f"{percentile(latencies, 50):.1f}",
                ]
            )
        return rows
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.ann_sweep", description=__doc__)
    parser.add_argument("--dir", type=Path, required=True, help="a bench_hybrid synthetic dir")
    parser.add_argument("--nprobes", default="all,20,50,100")
    parser.add_argument("--queries", type=int, default=15)
    args = parser.parse_args(argv)
    probes = [None if p.strip() == "all" else int(p) for p in args.nprobes.split(",") if p.strip()]
    rows = asyncio.run(_sweep(args.dir, probes, args.queries))
    print(f"`{command_line()}` ({args.queries} queries, k = 10, the store's default refine)\n")
    print(markdown_table(["nprobes", "recall@10", "p50 ms"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
