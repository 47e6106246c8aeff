"""What checking the vector side against the metadata store costs, by collection size.

    python -m evals.reconcile_costs [--sizes 100k,1m] [--dims 384] [--repeats 5]

For each size, a synthetic collection (documents of 10 chunks, random unit vectors,
every document confirmed) is written once under ``evals/out/reconcile/<size>`` and
reused: the metadata rows go in through SQLite directly (the schema is groundkit's,
the contents are not what matters), the vectors through ``LanceDBVectorStore``.
Then it times, with a warm page cache, median of ``--repeats``:

* ``vector_problem``: the check every ``Collection`` and ``Retriever`` open runs
  (``confirmed_vector_count``, the vector handle moved to the latest version, its
  damage flag and ``count()``);
* ``reconcile_vectors``: the exact check an ingest runs before it writes
  (``recover()``, every confirmed chunk id from SQLite, every row's ids from LanceDB),
  on a vector handle opened for it, as an ingest's is;
* its two reads apart (the LanceDB one on a fresh handle too).

Prints a Markdown table; nothing is written to docs/ (ADR 0029 quotes the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from evals.machine import REPO_ROOT, command_line, machine_lines, markdown_table
from evals.synthetic import parse_size, size_label
from groundkit.storage.lancedb import LanceDBVectorStore
from groundkit.storage.reconcile import reconcile_vectors, vector_problem
from groundkit.storage.sqlite import SQLiteMetadataStore

__all__ = ["main"]

_CHUNKS_PER_DOCUMENT = 10
_BATCH_DOCUMENTS = 5_000


async def _build(root: Path, chunks: int, dims: int) -> None:
    marker = root / "complete"
    if marker.exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    for leftover in root.glob("bench*"):
        if leftover.is_file():
            leftover.unlink()
    store = await SQLiteMetadataStore.open(root / "bench.sqlite3")
    await store.close()
    vectors = await LanceDBVectorStore.open(root, "bench", dims)
    documents = chunks // _CHUNKS_PER_DOCUMENT
    rng = np.random.default_rng(7)
    conn = sqlite3.connect(root / "bench.sqlite3")
    try:
        for first in range(0, documents, _BATCH_DOCUMENTS):
            ids = [f"{d:032x}" for d in range(first, min(documents, first + _BATCH_DOCUMENTS))]
            conn.executemany(
                "INSERT INTO documents (id, source, content_hash, ingested_at, source_class,"
                " metadata, vectors_hash) VALUES (?, ?, ?, '2026-01-01', 'text', '{}', ?)",
                [(d, f"doc/{d}.txt", f"h{d}", f"h{d}") for d in ids],
            )
            conn.executemany(
                "INSERT INTO chunks (id, document_id, chunk_index, content, start_offset,"
                " end_offset, content_hash, term_ids, tfs) VALUES (?, ?, ?, 'text', 0, 4, 'c',"
                " X'01000000', X'01000000')",
                [(f"{d}#{i}", d, i) for d in ids for i in range(_CHUNKS_PER_DOCUMENT)],
            )
            conn.commit()
            matrix = rng.standard_normal((len(ids) * _CHUNKS_PER_DOCUMENT, dims))
            await vectors.upsert_documents(
                [
                    (
                        d,
                        [f"{d}#{i}" for i in range(_CHUNKS_PER_DOCUMENT)],
                        matrix[n * _CHUNKS_PER_DOCUMENT : (n + 1) * _CHUNKS_PER_DOCUMENT],
                    )
                    for n, d in enumerate(ids)
                ]
            )
            print(f"  {size_label(chunks)}: {first + len(ids):,} documents", flush=True)
        await vectors.optimize()
    finally:
        conn.close()
        await vectors.close()
    marker.write_text("ok\n", encoding="utf-8")


async def _median_ms(run: Callable[[], Awaitable[Any]], repeats: int) -> float:
    await run()  # warm the page cache and the handles
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        await run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def _measure(root: Path, dims: int, repeats: int) -> list[float]:
    store = await SQLiteMetadataStore.open(root / "bench.sqlite3", create=False)
    vectors = await LanceDBVectorStore.open(root, "bench", dims, create=False)
    try:
        assert await vector_problem(store, vectors) is None
        assert await reconcile_vectors(store, vectors) == []

        async def fresh_inventory() -> None:
            # A handle of its own each time: the store remembers an inventory per version.
            handle = await LanceDBVectorStore.open(root, "bench", dims, create=False)
            try:
                await handle.inventory()
            finally:
                await handle.close()

        async def fresh_reconcile() -> None:
            handle = await LanceDBVectorStore.open(root, "bench", dims, create=False)
            try:
                await reconcile_vectors(store, handle)
            finally:
                await handle.close()

        return [
            await _median_ms(lambda: vector_problem(store, vectors), repeats),
            await _median_ms(fresh_reconcile, repeats),
            await _median_ms(store.confirmed_vectors, repeats),
            await _median_ms(fresh_inventory, repeats),
        ]
    finally:
        await store.close()
        await vectors.close()


async def _run(sizes: list[int], dims: int, repeats: int) -> list[list[str]]:
    rows = []
    for chunks in sizes:
        root = REPO_ROOT / "evals" / "out" / "reconcile" / f"{size_label(chunks)}-{dims}d"
        await _build(root, chunks, dims)
        figures = await _measure(root, dims, repeats)
        rows.append([f"{chunks:,}", *(f"{ms:,.1f}" for ms in figures)])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100k,1m")
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rows = asyncio.run(_run(sizes, args.dims, args.repeats))
    header = [
        "chunks",
        "vector_problem ms (every open)",
        "reconcile_vectors ms (every ingest)",
        "of which SQLite ids ms",
        "of which LanceDB ids ms",
    ]
    print(f"Command: `{command_line()}`\n")
    print(markdown_table(header, rows))
    print()
    print("\n".join(machine_lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
