"""Where a full-recall vector search spends its time, and what the alternatives cost.

Runs on a collection ``evals.bench_hybrid`` prepared (hashed vectors, the
store's IVF_RQ index), at hybrid's ask of 100 rows (108 with the tie pad):

    python -m evals.vector_costs --dir evals/out/bench_hybrid/synthetic-1m \\
        --out docs/benchmarks-vector-costs.md

LanceDB is timed in parts: the index scan alone (row ids only), the scan plus
the id columns, the store's default query (plus re-scoring 2x the rows on the
float32 vectors), and the random reads of those vectors on their own. The
alternatives hold the vectors in this process: a float32 matrix-vector product
(numpy, and bfloat16 through torch when installed) and sign-bit codes with
exact re-scoring. Recall is against exact search on the same vectors. Queries
run interleaved, so load on the shared cores hits every method alike; the re-scoring reads
alone run in a pass of their own (a large take slows the LanceDB query after it), and each
round starts with an untimed LanceDB query (so does in-memory work).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from evals.hybrid.embedders import HashEmbedder
from evals.machine import carried_sections, command_line, machine_lines, markdown_table
from evals.stats import percentile
from groundkit.storage.lancedb import LanceDBVectorStore

__all__ = ["main"]

_K = 108  # hybrid's 100 candidates plus the store's tie pad
_Matrix = npt.NDArray[np.float32]


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _recall(found: list[list[int]], exact: npt.NDArray[np.intp], k: int) -> float:
    """Mean share of each query's exact top k that ``found``'s top k holds."""
    shares = [
        len(set(got[:k]) & set(truth[:k].tolist())) / k
        for got, truth in zip(found, exact, strict=True)
    ]
    return float(np.mean(shares))


class _Method:
    def __init__(self, name: str, run: Callable[[int], Awaitable[list[int]]]) -> None:
        self.name, self.run = name, run
        self.ms: list[float] = []
        self.cpu: list[float] = []
        self.found: list[list[int]] = []

    async def timed(self, i: int) -> None:
        wall, cpu = time.perf_counter(), _cpu_s()
        self.found.append(await self.run(i))
        self.ms.append((time.perf_counter() - wall) * 1000)
        self.cpu.append(_cpu_s() - cpu)


async def _measure(root: Path, n_queries: int, sign_candidates: list[int]) -> list[str]:
    embedder = HashEmbedder()
    dims = embedder.dimensions
    store = await LanceDBVectorStore.open(root / "index", "bench", dims, create=False)
    table = store.table  # timing LanceDB's parts needs the raw table
    try:
        kind = await store.ann_index_type()
        started = time.perf_counter()
        data = await table.query().with_row_id().select(["vector"]).to_arrow()
        rowids: npt.NDArray[np.uint64] = data["_rowid"].to_numpy()
        flat = data["vector"].combine_chunks().flatten().to_numpy()
        matrix: _Matrix = flat.reshape(len(rowids), -1)
        load_s = time.perf_counter() - started
        queries: list[str] = json.loads((root / "queries.json").read_text("utf-8"))[:n_queries]
        vectors: _Matrix = embedder.embed_sync(queries)
        exact = np.argsort(-(vectors @ matrix.T), axis=1, kind="stable")[:, :100]

        def lance(
            refine: bool, columns: list[str], limit: int = _K
        ) -> Callable[[int], Awaitable[list[int]]]:
            async def run(i: int) -> list[int]:
                q = table.query().nearest_to(vectors[i]).column("vector")
                q = q.distance_type("cosine").nprobes(1 << 30).limit(limit).with_row_id()
                if refine:
                    q = q.refine_factor(2)
                found = await q.select(columns).to_arrow()
                return list(found["_rowid"].to_pylist())

            return run

        # The rows 2x re-scoring reads: the scan's best 2 * _K, fetched once up front.
        candidates = [
            sorted(await lance(False, ["_distance"], 2 * _K)(i)) for i in range(len(queries))
        ]

        async def take(i: int) -> list[int]:
            await table.take_row_ids(candidates[i]).select(["vector"]).to_arrow()
            return []

        position = {int(r): n for n, r in enumerate(rowids)}

        async def numpy_scan(i: int) -> list[int]:
            scores = matrix @ vectors[i]
            top = np.argpartition(-scores, _K)[:_K]
            return [int(rowids[j]) for j in top[np.argsort(-scores[top], kind="stable")]]

        methods = [
            _Method("LanceDB: index scan, row ids only", lance(False, ["_distance"])),
            _Method("LanceDB: index scan + id columns", lance(False, ["chunk_id", "document_id"])),
            _Method(
                "LanceDB: + re-score 2× on float32 (what the store runs)",
                lance(True, ["chunk_id", "document_id", "_distance"]),
            ),
            _Method("in memory: float32 matrix × vector (numpy)", numpy_scan),
        ]
        try:
            import torch

            bf16 = torch.from_numpy(matrix).to(torch.bfloat16)

            async def torch_scan(i: int) -> list[int]:
                scores = torch.mv(bf16, torch.from_numpy(vectors[i]).to(torch.bfloat16))
                top = torch.topk(scores.float(), _K).indices.numpy()
                return [int(rowids[j]) for j in top]

            methods.append(_Method("in memory: bfloat16 matrix × vector (torch)", torch_scan))
        except ImportError:
            pass
        signs = np.packbits(matrix > 0, axis=1).view(np.uint64)
        for n in sign_candidates:

            def sign_scan(i: int, n: int = n) -> Awaitable[list[int]]:
                async def run() -> list[int]:
                    code = np.packbits(vectors[i] > 0).view(np.uint64)
                    distance = np.bitwise_count(signs ^ code).sum(axis=1, dtype=np.uint16)
                    pool = np.argpartition(distance, n)[:n]
                    scores = matrix[pool] @ vectors[i]
                    best = pool[np.argsort(-scores, kind="stable")[:_K]]
                    return [int(rowids[j]) for j in best]

                return run()

            methods.append(_Method(f"in memory: sign bits, re-score {n:,} exactly", sign_scan))
        reads = _Method(f"LanceDB: the {2 * _K} float32 reads alone (sorted take)", take)
        for method in [*methods, reads]:
            await method.run(0)  # warm-up
        defaults: list[float] = []
        for i in range(len(queries)):
            # Untimed: the first LanceDB query after the in-memory methods' work ran
            # up to twice as slow, whichever query it was.
            await store.query(vectors[i - 1], 100)
            started = time.perf_counter()
            await store.query(vectors[i], 100)
            defaults.append((time.perf_counter() - started) * 1000)
            for method in methods:
                await method.timed(i)
        # Alone, after the rest: the next LanceDB query after a 216-row take ran
        # 1.5-2x slower, which would charge the take's cost to whatever followed it.
        for i in range(len(queries)):
            await reads.timed(i)
        every = [*methods, reads]
        base = percentile(defaults, 50)
        rows = []
        for method in every:
            p50 = percentile(method.ms, 50)
            recall = ["–", "–"]
            if method.found[0]:
                got = [[position[r] for r in found] for found in method.found]
                recall = [f"{_recall(got, exact, 10):.3f}", f"{_recall(got, exact, 100):.3f}"]
            cores = sum(method.cpu) / (sum(method.ms) / 1000)
            rows.append(
                [
                    method.name,
                    f"{p50:.1f}",
                    f"{percentile(method.ms, 95):.1f}",
                    *recall,
                    f"{cores:.2f}",
                    f"{p50 / base:.2f}×",
                ]
            )
        header = ["method (k = 108)", "p50 ms", "p95 ms", "recall@10", "recall@100"]
        return [
            "# Where the vector search time goes",
            "",
            "Generated by `evals/vector_costs.py`; do not edit by hand.",
            "",
            f"Command: `{command_line()}`",
            "",
            f"{len(rowids):,} hashed 384-d vectors (`HashEmbedder` of `evals.hybrid.embedders`), "
            f"index {kind}; {len(queries)} queries, each run by every method in turn (the "
            "re-scoring reads alone in a pass of their own after the rest). The "
            f"baseline is `LanceDBVectorStore.query(vector, 100)` with the shipped defaults, "
            f"timed in the same loop: p50 {base:.1f} ms. *cores busy* is process CPU time over "
            "wall time. Recall is against exact search (numpy, float32). The in-memory "
            f"methods first read every vector into this process ({load_s:.1f} s, "
            f"{matrix.nbytes / 2**20:,.0f} MB as float32).",
            "",
            markdown_table([*header, "cores busy", "× store p50"], rows),
            "",
            "Machine:",
            "",
            *machine_lines(),
            "",
        ]
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.vector_costs", description=__doc__)
    parser.add_argument("--dir", type=Path, required=True, help="a bench_hybrid synthetic dir")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--sign-candidates", default="1000,4000")
    parser.add_argument("--out", type=Path, help="write the page here as well")
    args = parser.parse_args(argv)
    pool = [int(n) for n in args.sign_candidates.split(",") if n.strip()]
    text = "\n".join(asyncio.run(_measure(args.dir, args.queries, pool)))
    print(text)
    if args.out is not None:
        # Sections other benchmarks write here (bench_document_index) are kept.
        args.out.write_text(text + carried_sections(args.out), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
