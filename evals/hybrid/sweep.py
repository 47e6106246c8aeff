"""The vector store alone per ANN setting: p50 and recall against exact search.

Part 2 runs it on the collection it measured, at k = 10 and k = 100 (hybrid's
ask of the vector side). The reference is the store's own exact search
(``query(..., exact=True)`` with the in-memory copy off: LanceDB's flat scan of
every row, ``evals.hybrid.exact``), so below the ANN threshold the defaults'
recall also shows that the in-memory search finds the same rows.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import numpy.typing as npt

from evals.hybrid.common import WARMUP_QUERIES
from evals.hybrid.exact import lance_exact
from evals.machine import markdown_table
from evals.stats import percentile
from groundkit.storage import LanceDBVectorStore
from groundkit.storage.lancedb import DEFAULT_NPROBES, DEFAULT_REFINE_FACTOR

__all__ = ["SWEEP_QUERIES", "setting_label", "sweep_lines", "vector_sweep"]

# ANN settings tried on the vector store alone: (nprobes, refine_factor); the
# first is the store's default (every partition, refine_factor_for(limit)).
_SWEEP: tuple[tuple[int | None, int | None], ...] = (
    (DEFAULT_NPROBES, DEFAULT_REFINE_FACTOR), (None, 5), (None, 2), (100, None), (20, None),
)  # fmt: skip
_SWEEP_K = (10, 100)
# Query vectors the sweep uses, the first of the benchmark's queries.
SWEEP_QUERIES = 50


def setting_label(nprobes: int | None, refine: int | None) -> str:
    """How an ANN setting is named on the page."""
    probes = "every partition" if nprobes is None else f"nprobes {nprobes}"
    factor = "refine_factor_for(limit)" if refine is None else f"refine_factor {refine}"
    return f"{probes}, {factor}"


async def vector_sweep(
    store: LanceDBVectorStore, vectors: list[npt.NDArray[np.float32]], ann: bool
) -> tuple[list[list[str]], dict[int, float]]:
    """p50 and recall against exact search of ``store.query`` at k = 10 and 100 per ANN setting.

    k = 100 is what hybrid asks of the vector side (``hybrid_candidates``).
    Without an index only the defaults run (an exact search). Also returns the
    defaults' recall per k.
    """
    exact: dict[int, list[set[str]]] = {}
    row = ["exact (LanceDB flat scan, `query(…, exact=True)`, in-memory copy off; reference)"]
    for k in _SWEEP_K:
        latencies: list[float] = []
        exact[k] = []
        for vector in vectors:
            started = time.perf_counter()
            found = await lance_exact(store, vector, k)
            latencies.append((time.perf_counter() - started) * 1000)
            exact[k].append({h.chunk_id for h in found})
        row += [f"{percentile(latencies, 50):.2f}", "1.000"]
    rows = [row]
    saved = (store.nprobes, store.refine_factor)
    default_recall: dict[int, float] = {}
    try:
        for nprobes, refine in _SWEEP if ann else _SWEEP[:1]:
            store.nprobes, store.refine_factor = nprobes, refine
            default = (nprobes, refine) == saved
            row = [setting_label(nprobes, refine) + (" (default)" if default else "")]
            for k in _SWEEP_K:
                for vector in vectors[:WARMUP_QUERIES]:
                    await store.query(vector, k)
                latencies = []
                recalls: list[float] = []
                for vector, truth in zip(vectors, exact[k], strict=True):
                    started = time.perf_counter()
                    hits = await store.query(vector, k)
                    latencies.append((time.perf_counter() - started) * 1000)
                    recalls.append(len({h.chunk_id for h in hits} & truth) / k)
                row += [f"{percentile(latencies, 50):.2f}", f"{statistics.mean(recalls):.3f}"]
                if default:
                    default_recall[k] = statistics.mean(recalls)
            rows.append(row)
    finally:
        store.nprobes, store.refine_factor = saved
    return rows, default_recall


def sweep_lines(sweep: list[list[str]], queries: int) -> list[str]:
    """The page's paragraph and table for ``vector_sweep``'s rows (none without rows)."""
    if not sweep:
        return []
    header = ["vector search setting"] + [
        f"{what} k={k}" for k in _SWEEP_K for what in ("p50 ms", "recall@")
    ]
    header = [h.replace("recall@ k=", "recall@") for h in header]
    return [
        "",
        f"The vector store alone (`LanceDBVectorStore.query`, {queries} of the queries",
        "embedded by `HashEmbedder`), per ANN setting, against exact search. k = 100 is what",
        "hybrid asks of the vector side (the store adds 8 rows to see ties at the cut).",
        "Hashed vectors cluster weakly, so probing fewer partitions costs them more recall",
        "than real embeddings would lose; re-check changes with `evals/bench_dense.py`.",
        "",
        markdown_table(header, sweep),
        "",
    ]
