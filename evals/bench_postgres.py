"""The same collection in SQLite and in PostgreSQL: write, ``Retriever.open`` and search.

    python -m evals.bench_postgres --dsn postgresql://... [--sizes 20k,100k] [--queries 200]

Each size is a synthetic corpus (``evals.synthetic``) chunked with ``BENCH_CHUNKING`` and
analysed once; the same documents, chunks and terms are then written to a fresh SQLite
file and a fresh PostgreSQL collection with ``replace_documents`` in batches of 200
documents. Measured per store: the write, ``Retriever.open`` (median of three; BM25 is
rebuilt from the stored postings; no rows are read: at or below ``preload_max_chunks``
they are read in the background after the first search), and ``Retriever.search(k=10)``
latency, which includes joining the hits to their rows. The PostgreSQL collection is
dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from evals.machine import command_line, machine_lines, markdown_table
from evals.stats import percentile
from evals.synthetic import BENCH_CHUNKING, SyntheticSpec, generate, parse_size, size_label
from groundkit.contracts import Chunk, Document
from groundkit.ingestion import chunk_document
from groundkit.lexical import Analyzer
from groundkit.retrieval import Retriever
from groundkit.storage import MetadataStoreProtocol, SQLiteMetadataStore
from groundkit.storage.postgres import PostgresMetadataStore

__all__ = ["main"]

DSN_ENV = "GROUNDKIT_BENCH_POSTGRES_DSN"
_BATCH = 200
_WARMUP = 5

Items = list[tuple[Document, Sequence[Chunk], Sequence[Sequence[str]]]]


def _items(files: dict[str, str], analyzer: Analyzer) -> Items:
    out: Items = []
    for source, text in files.items():
        document = Document(document_id=f"doc:{source}", source=source, content=text)
        chunks = chunk_document(document, BENCH_CHUNKING)
        out.append((document, chunks, analyzer.terms_many(c.content for c in chunks)))
    return out


async def _timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = await call()
    return time.perf_counter() - started, value


async def _measure(
    store: MetadataStoreProtocol, items: Items, analyzer: Analyzer, queries: list[str]
) -> dict[str, float]:
    async def write() -> None:
        for i in range(0, len(items), _BATCH):
            await store.replace_documents(items[i : i + _BATCH])

    await store.bind_analyzer(analyzer.identity)
    write_s, _ = await _timed(write)
    opens = []
    for _ in range(3):
        seconds, retriever = await _timed(lambda: Retriever.open(store, analyzer=analyzer))
        opens.append(seconds)
    for query in queries[:_WARMUP]:
        await retriever.search(query, 10)
    latencies = []
    for query in queries:
        started = time.perf_counter()
        await retriever.search(query, 10)
        latencies.append((time.perf_counter() - started) * 1000)
    return {
        "chunks": float(retriever.size),
        "write_s": write_s,
        "open_ms": statistics.median(opens) * 1000,
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
    }


async def _run(dsn: str, sizes: list[int], n_queries: int) -> list[list[str]]:
    rows: list[list[str]] = []
    analyzer = Analyzer()
    for size in sizes:
        corpus = generate(SyntheticSpec(passages=size), queries=n_queries)
        items = _items(corpus.files, analyzer)
        with tempfile.TemporaryDirectory() as tmp:
            lite = await SQLiteMetadataStore.open(Path(tmp) / "bench.sqlite3")
            try:
                lite_m = await _measure(lite, items, analyzer, corpus.queries)
            finally:
                await lite.close()
        pg = await PostgresMetadataStore.open(dsn, f"bench-{size_label(size)}-{os.getpid()}")
        try:
            pg_m = await _measure(pg, items, analyzer, corpus.queries)
        finally:
            await pg.drop()
        for name, m in (("SQLite", lite_m), ("PostgreSQL", pg_m)):
            rows.append(
                [
                    size_label(size),
                    name,
                    f"{int(m['chunks']):,}",
                    f"{m['write_s']:.1f}",
                    f"{m['chunks'] / m['write_s']:,.0f}",
                    f"{m['open_ms']:,.0f}",
                    f"{m['p50_ms']:.2f}",
                    f"{m['p95_ms']:.2f}",
                ]
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", default=os.environ.get(DSN_ENV), help=f"or ${DSN_ENV}")
    parser.add_argument("--sizes", default="20k,100k", help="passages per corpus, e.g. 20k,100k")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error(f"give --dsn or set {DSN_ENV}")
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rows = asyncio.run(_run(args.dsn, sizes, args.queries))
    header = [
        "corpus",
        "store",
        "chunks",
        "write s",
        "chunks/s",
        "Retriever.open ms",
        "search p50 ms",
        "p95 ms",
    ]
    print(f"`{command_line()}`\n")
    print(markdown_table(header, rows))
    print()
    print("\n".join(line for line in machine_lines() if "load average" in line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
