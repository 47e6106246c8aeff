"""Exact vs ANN search in ``LanceDBVectorStore``: recall@10 and latency.

    python -m evals.bench_dense [--rows 100000] [--dim 384] [--queries 200] [--seed 7]

Vectors are seeded and clustered (unit-norm centres plus Gaussian noise, then
normalised), which is closer to sentence embeddings than uniform noise and
harder for an IVF index than well-separated blobs. Queries are fresh draws
from the same mixture. The truth is a numpy brute-force top 10 by cosine.

One table serves both measurements: written through ``upsert_documents`` (documents of
``--chunks-per-doc`` rows), searched exactly, then ``optimize()`` with the
threshold lowered builds the ANN index, and the same queries run again. Each
query also runs restricted to every document (the Retriever's common case), to
show what the ``document_id IN (...)`` filter costs. Scratch data goes to a
temp dir; nothing is written to the repository.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from evals.machine import command_line, machine_lines
from evals.stats import percentile
from groundkit.storage.lancedb import LanceDBVectorStore
from groundkit.storage.protocols import VectorHit

__all__ = ["clustered_vectors", "main"]

_WARMUP = 5
_K = 10


def clustered_vectors(
    rows: int, dim: int, *, clusters: int = 256, spread: float = 1.2, seed: int = 7
) -> npt.NDArray[np.float32]:
    """``rows`` unit vectors drawn around ``clusters`` random unit centres."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    labels = rng.integers(0, clusters, rows)
    noise = rng.standard_normal((rows, dim)).astype(np.float32) * np.float32(spread / dim**0.5)
    out = centres[labels] + noise
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def exact_top(
    data: npt.NDArray[np.float32], queries: npt.NDArray[np.float32], k: int
) -> list[set[int]]:
    """Row numbers of each query's ``k`` best cosines (the data is unit-norm)."""
    out: list[set[int]] = []
    for start in range(0, queries.shape[0], 64):
        sims = queries[start : start + 64] @ data.T
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        out.extend({int(i) for i in row} for row in top)
    return out


async def timed(
    run: Callable[[int], Awaitable[list[VectorHit]]], n: int
) -> tuple[list[float], list[list[VectorHit]]]:
    for i in range(min(_WARMUP, n)):
        await run(i)
    latencies: list[float] = []
    results: list[list[VectorHit]] = []
    for i in range(n):
        start = time.perf_counter()
        results.append(await run(i))
        latencies.append((time.perf_counter() - start) * 1000.0)
    return latencies, results


def recall(results: Sequence[list[VectorHit]], truth: Sequence[set[int]]) -> float:
    return statistics.fmean(
        len({int(h.chunk_id) for h in hits} & want) / len(want)
        for hits, want in zip(results, truth, strict=True)
    )


def line(label: str, latencies: list[float], rec: float) -> str:
    return (
        f"| {label} | {rec:.4f} | {percentile(latencies, 50):.1f} | "
        f"{percentile(latencies, 95):.1f} |"
    )


async def run(args: argparse.Namespace) -> None:
    rows, dim = args.rows, args.dim
    t0 = time.perf_counter()
    vectors = clustered_vectors(
        rows + args.queries, dim, clusters=args.clusters, spread=args.spread, seed=args.seed
    )
    data, queries = vectors[:rows], vectors[rows:]
    truth = exact_top(data, queries, _K)
    print(
        f"generated {rows:,} x {dim} + {args.queries} queries, truth in "
        f"{time.perf_counter() - t0:.1f} s",
        flush=True,
    )

    scratch = Path(tempfile.mkdtemp(prefix="bench_dense_"))
    try:
        store = await LanceDBVectorStore.open(scratch, "bench", dim, ann_threshold=rows + 1)
        per_doc = args.chunks_per_doc
        doc_ids = [f"{d:08x}" for d in range(0, (rows + per_doc - 1) // per_doc)]
        t0 = time.perf_counter()
        for d, doc_id in enumerate(doc_ids):
            lo, hi = d * per_doc, min(rows, (d + 1) * per_doc)
            await store.upsert_documents(
                [(doc_id, [f"{i:09d}" for i in range(lo, hi)], data[lo:hi])]
            )
        ingest_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        await store.optimize()
        compact_s = time.perf_counter() - t0
        print(
            f"upserted {len(doc_ids)} documents in {ingest_s:.1f} s, optimize {compact_s:.1f} s",
            flush=True,
        )

        everything = set(doc_ids)
        table: list[str] = []

        async def plain(i: int) -> list[VectorHit]:
            return await store.query(queries[i], _K)

        async def restricted(i: int) -> list[VectorHit]:
            return await store.query(queries[i], _K, document_ids=everything)

        n = args.queries
        lat, res = await timed(plain, n)
        table.append(line("exact (flat scan)", lat, recall(res, truth)))
        lat_r, res_r = await timed(restricted, min(n, 50))
        table.append(
            line("exact, restricted to all documents", lat_r, recall(res_r, truth[: len(res_r)]))
        )
        print(table[-2], table[-1], sep="\n", flush=True)

        store.ann_threshold = rows
        t0 = time.perf_counter()
        await store.optimize()
        build_s = time.perf_counter() - t0
        assert await store.has_ann_index()
        print(f"ANN index built in {build_s:.1f} s", flush=True)
        for nprobes, refine in args.sweep:
            store.nprobes, store.refine_factor = nprobes, refine
            lat, res = await timed(plain, n)
            table.append(line(f"ANN nprobes={nprobes} refine={refine}", lat, recall(res, truth)))
            print(table[-1], flush=True)
        store.nprobes, store.refine_factor = args.sweep[0]
        lat_r, res_r = await timed(restricted, n)
        table.append(
            line(
                f"ANN nprobes={args.sweep[0][0]} refine={args.sweep[0][1]}, "
                "restricted to all documents",
                lat_r,
                recall(res_r, truth),
            )
        )
        print(table[-1], flush=True)
        await store.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print()
    print(f"## Dense vector search, {rows:,} x {dim}, {n} queries, k={_K}")
    print()
    print(f"- `{command_line()}`")
    print(*machine_lines(), sep="\n")
    print(
        f"- ingest: {len(doc_ids)} upserts of {args.chunks_per_doc} rows in {ingest_s:.1f} s; "
        f"optimize {compact_s:.1f} s; ANN index build {build_s:.1f} s"
    )
    print()
    print("| search | recall@10 vs numpy exact | p50 ms | p95 ms |")
    print("|---|---|---|---|")
    print(*table, sep="\n")


def _sweep(text: str) -> list[tuple[int | None, int | None]]:
    """``nprobes:refine_factor`` pairs; ``all`` and ``auto`` are the store's ``None``."""
    pairs: list[tuple[int | None, int | None]] = []
    for item in text.split(","):
        nprobes, refine = item.split(":")
        pairs.append(
            (None if nprobes == "all" else int(nprobes), None if refine == "auto" else int(refine))
        )
    return pairs


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--chunks-per-doc", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--clusters", type=int, default=1024)
    parser.add_argument("--spread", type=float, default=2.0, help="noise norm / centre norm")
    parser.add_argument(
        "--sweep",
        type=_sweep,
        default=_sweep("all:auto,4:auto,8:auto,16:auto,all:1"),
        help="nprobes:refine_factor pairs; the first is the store's default",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("LANCEDB_LOG", "error")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
