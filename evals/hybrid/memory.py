"""Peak memory of each system, each alone in a fresh process, and its page lines.

``measure_memory`` starts ``python -m evals.bench_hybrid --worker <system>`` once
per system; that worker runs ``work`` and prints one JSON line (its peak RSS
included, by ``evals.machine.print_worker_result``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.hybrid.common import WARMUP_QUERIES, log
from evals.hybrid.embedders import HashEmbedder
from evals.hybrid.native import NATIVE_HYBRID, NATIVE_TABLE, native_search
from evals.hybrid.prepare import Prepared
from evals.machine import REPO_ROOT, markdown_table, rss_mb
from evals.stats import percentile
from evals.synthetic import BENCH_CHUNKING
from groundkit import Collection, SearchMode

__all__ = ["RSS_SYSTEMS", "Memory", "measure_memory", "memory_lines", "work"]

# Systems measured in their own process: label -> worker name.
RSS_SYSTEMS = {
    "groundkit bm25": "bm25",
    "groundkit dense": "dense",
    "groundkit hybrid": "hybrid",
    NATIVE_HYBRID: "native-hybrid",
}
_RSS_QUERIES = 100


async def work(system: str, root: Path, n_queries: int) -> dict[str, Any]:
    """Open one system on a prepared collection and run its queries; the worker's body.

    lancedb and pyarrow are imported before the baseline, so the baseline holds
    the same libraries whichever system runs.
    """
    import lancedb
    import pyarrow  # noqa: F401

    queries: list[str] = json.loads((root / "queries.json").read_text("utf-8"))[:n_queries]
    hashed = HashEmbedder()
    base = rss_mb("VmRSS")
    started = time.perf_counter()
    search: Callable[[str], Awaitable[Any]]
    col: Collection | None = None
    if system == "native-hybrid":
        db = await lancedb.connect_async(str(root / "native-anchor"))
        table = await db.open_table(NATIVE_TABLE)

        async def search(q: str) -> Any:
            return await native_search(table, hashed, q, hybrid=True)
    else:
        col = await Collection.open(root / "index", "bench", chunking=BENCH_CHUNKING,
                                    embedder=hashed)  # fmt: skip
        retriever = await col.retriever()  # what col.search uses: its saved segments
        modes: dict[str, SearchMode] = {"bm25": "bm25", "dense": "dense", "hybrid": "hybrid"}
        mode = modes[system]

        async def search(q: str) -> Any:
            return await retriever.search(q, 10, mode=mode)

    open_s = time.perf_counter() - started
    for q in queries[:WARMUP_QUERIES]:
        await search(q)
    latencies = []
    for q in queries:
        started = time.perf_counter()
        await search(q)
        latencies.append((time.perf_counter() - started) * 1000)
    if col is not None:
        await col.close()
    return {"rss_base_mb": base, "open_s": open_s, "latency_ms": latencies}


@dataclass
class Memory:
    """One system's own process on one collection."""

    label: str
    peak_mb: float
    delta_mb: float
    open_s: float
    p50_ms: float


def measure_memory(prepared: Prepared) -> list[Memory]:
    """Each system of ``RSS_SYSTEMS`` in a fresh subprocess: peak RSS, open time, p50."""
    out = []
    for label, worker in RSS_SYSTEMS.items():
        log(f"part 2: {prepared.name}: peak RSS of {label} (own process)")
        cmd = [sys.executable, "-m", "evals.bench_hybrid", "--worker", worker,
               "--dir", str(prepared.root), "--queries", str(_RSS_QUERIES)]  # fmt: skip
        proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"{label} worker failed: {proc.stderr.strip()[-500:]}")
        data = json.loads(lines[-1])
        out.append(
            Memory(
                label=label,
                peak_mb=data["rss_peak_mb"],
                delta_mb=data["rss_peak_mb"] - data["rss_base_mb"],
                open_s=data["open_s"],
                p50_ms=percentile(data["latency_ms"], 50),
            )
        )
    return out


def memory_lines(memory: list[Memory], chunks: int) -> list[str]:
    """The page's paragraph, table and ratio line for ``measure_memory``'s results."""
    by_label = {m.label: m for m in memory}
    ours, native = by_label["groundkit hybrid"], by_label[NATIVE_HYBRID]
    rows = [
        [m.label, f"{m.peak_mb:,.0f}", f"{m.delta_mb:,.0f}", f"{m.peak_mb / native.peak_mb:.2f}×",
         f"{m.open_s:.2f}", f"{m.p50_ms:.2f}"]
        for m in memory
    ]  # fmt: skip
    header = ["system", "peak RSS MB", "Δ RSS MB", "peak × LanceDB hybrid", "open s", "p50 ms"]
    return [
        f"Peak memory at {chunks:,} chunks, each system alone in a fresh process",
        f"(`python -m evals.bench_hybrid --worker …`; {_RSS_QUERIES} queries after "
        f"{WARMUP_QUERIES} warm-ups): *peak RSS* is the process's high-water mark (VmHWM),",
        "*Δ RSS* its growth over the process after importing lancedb and pyarrow, before",
        "opening anything. groundkit opens its `Collection` and the collection's own",
        "`Retriever` (`Collection.retriever()`, what `Collection.search` uses: the lexical",
        "segments saved at ingest, mapped); the anchor opens the LanceDB table built above.",
        "Queries are embedded",
        "by `HashEmbedder` in all of them; no model is loaded.",
        "",
        markdown_table(header, rows),
        "",
        f"- groundkit hybrid / LanceDB native hybrid peak RSS = "
        f"{ours.peak_mb / native.peak_mb:.2f}× (Δ RSS {ours.delta_mb / native.delta_mb:.2f}×)",
        "",
    ]
