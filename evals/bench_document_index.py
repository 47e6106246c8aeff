"""What the vector table's B-tree index on ``document_id`` saves and costs, by table size.

    python -m evals.bench_document_index [--sizes 100k,1m] [--dims 384] [--rounds 15]
        [--out docs/benchmarks-vector-costs.md]

For each size, a table of random unit vectors (documents of 10 chunks, a content
hash per chunk) is written once through ``LanceDBVectorStore`` under
``evals/out/document_index/<size>`` and optimized, so it has the store's vector index and
its ``document_id`` index (adr/0090-document-id-index.md). Each run copies it
twice: one copy as written (*indexed*), one with that index dropped (*scanned*,
what a table had before). Every round then times, on each copy in turn (the order
alternating), the same operations on the same randomly chosen documents:

* *replace*: ``upsert_documents`` of 16 existing documents with new vectors, what
  re-ingesting changed files does (a delete by ``document_id``, then an add);
* *delete*: ``delete_documents`` of 16 documents (they are written back untimed);
* *optimize*: LanceDB's ``optimize()``, which folds the round's rows into every index
  (what the index adds to the end of an ingest that wrote vectors).

After the rounds, 40 *filtered searches* on each copy in turn: ``query`` with
``document_ids`` naming 1% of the documents (a different 1% each time), vectors not
held in memory, so LanceDB's own filtered search is timed.

The writes add unindexed rows to both copies alike, as an ingest does until its
``optimize``. Medians per operation, the ratio indexed / scanned taken per round.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from evals.machine import REPO_ROOT, command_line, machine_lines, markdown_table, write_section
from evals.synthetic import parse_size, size_label
from groundkit.storage.lancedb import LanceDBVectorStore

__all__ = ["main"]

_PER_DOCUMENT = 10
_BUILD_DOCUMENTS = 5_000
_CHANGED = 16
_SECTION = "document-id-index"
_INDEX = "document_id_idx"
_SEARCHES = 40


def _doc(d: int) -> str:
    return f"doc{d:08d}"


def _items(
    docs: list[int], rng: np.random.Generator, dims: int, tag: str
) -> tuple[list[tuple[str, list[str], npt.NDArray[np.float32]]], dict[str, list[str]]]:
    matrix = rng.standard_normal((len(docs) * _PER_DOCUMENT, dims)).astype(np.float32)
    items = []
    hashes: dict[str, list[str]] = {}
    for n, d in enumerate(docs):
        ids = [f"{_doc(d)}#{i}" for i in range(_PER_DOCUMENT)]
        items.append((_doc(d), ids, matrix[n * _PER_DOCUMENT : (n + 1) * _PER_DOCUMENT]))
        hashes[_doc(d)] = [f"{tag}{d:08d}-{i}" for i in range(_PER_DOCUMENT)]
    return items, hashes


async def _build(root: Path, chunks: int, dims: int) -> None:
    if (root / "complete").exists():
        return
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    store = await LanceDBVectorStore.open(root, "bench", dims)
    rng = np.random.default_rng(7)
    documents = chunks // _PER_DOCUMENT
    try:
        for first in range(0, documents, _BUILD_DOCUMENTS):
            docs = list(range(first, min(documents, first + _BUILD_DOCUMENTS)))
            items, hashes = _items(docs, rng, dims, "h")
            await store.upsert_documents(items, content_hashes=hashes)
            print(f"  {size_label(chunks)}: {first + len(docs):,} documents", flush=True)
        await store.optimize()
    finally:
        await store.close()
    (root / "complete").write_text("ok\n", encoding="utf-8")


async def _copy(base: Path, target: Path, dims: int, *, scanned: bool) -> LanceDBVectorStore:
    shutil.rmtree(target, ignore_errors=True)
    await asyncio.to_thread(shutil.copytree, base, target)
    store = await LanceDBVectorStore.open(target, "bench", dims, create=False)
    store.memory_max_bytes = 0  # LanceDB's own filtered search, not a copy in memory
    table: Any = store.table
    if scanned:
        await table.drop_index(_INDEX)
    names = {i.name for i in await table.list_indices()}
    assert (_INDEX in names) != scanned, names
    return store


async def _timed(run: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await run()
    return (time.perf_counter() - started) * 1000


async def _round(
    store: LanceDBVectorStore, documents: int, dims: int, seed: int, out: dict[str, list[float]]
) -> None:
    rng = np.random.default_rng(seed)  # the same choices on both copies
    chosen = sorted({int(d) for d in rng.choice(documents, 3 * _CHANGED, replace=False)})
    replaced, deleted = chosen[:_CHANGED], chosen[_CHANGED : 2 * _CHANGED]
    items, hashes = _items(replaced, rng, dims, f"r{seed}-")
    out["replace"].append(
        await _timed(lambda: store.upsert_documents(items, content_hashes=hashes))
    )
    out["delete"].append(await _timed(lambda: store.delete_documents([_doc(d) for d in deleted])))
    back, back_hashes = _items(deleted, rng, dims, "h")
    await store.upsert_documents(back, content_hashes=back_hashes)
    table: Any = store.table  # LanceDB's own: the store's would add the index back
    out["optimize"].append(await _timed(lambda: table.optimize()))


async def _search(
    store: LanceDBVectorStore, documents: int, dims: int, seed: int, out: list[float]
) -> None:
    rng = np.random.default_rng(seed)  # the same query and filter on both copies
    narrow = [_doc(int(d)) for d in rng.choice(documents, max(1, documents // 100), replace=False)]
    vector = rng.standard_normal(dims).astype(np.float32)
    out.append(await _timed(lambda: store.query(vector, 10, document_ids=narrow)))


async def _measure(root: Path, chunks: int, dims: int, rounds: int) -> dict[str, Any]:
    base = root / "base"
    await _build(base, chunks, dims)
    work = root / "work"
    stores = {
        "indexed": await _copy(base, work / "indexed", dims, scanned=False),
        "scanned": await _copy(base, work / "scanned", dims, scanned=True),
    }
    ops = ("replace", "delete", "optimize")
    times: dict[str, dict[str, list[float]]] = {
        k: {op: [] for op in (*ops, "filtered search")} for k in stores
    }
    documents = chunks // _PER_DOCUMENT
    try:
        for store in stores.values():  # warm the handles and the page cache
            await _round(store, documents, dims, 10_000, {op: [] for op in ops})
        for r in range(rounds):
            order = ("indexed", "scanned") if r % 2 == 0 else ("scanned", "indexed")
            for arm in order:
                await _round(stores[arm], documents, dims, r, times[arm])
        # Searches after the writes, each copy's index files read once first.
        for store in stores.values():
            await _search(store, documents, dims, 20_000, [])
        for r in range(_SEARCHES):
            order = ("indexed", "scanned") if r % 2 == 0 else ("scanned", "indexed")
            for arm in order:
                await _search(stores[arm], documents, dims, r, times[arm]["filtered search"])
        table: Any = stores["indexed"].table
        uuids = [i.index_uuid for i in await table.list_indices() if i.name == _INDEX]
        index_dir = work / "indexed" / "bench.lance" / "_indices"
        index_mb = sum(
            f.stat().st_size for u in uuids for f in (index_dir / u).rglob("*") if f.is_file()
        )
    finally:
        for store in stores.values():
            await store.close()
        shutil.rmtree(work, ignore_errors=True)
    return {"times": times, "index_mb": index_mb / 1e6}


def _fmt(ms: float) -> str:
    return f"{ms:,.1f}"


async def _run(sizes: list[int], dims: int, rounds: int) -> list[list[str]]:
    rows = []
    for chunks in sizes:
        root = REPO_ROOT / "evals" / "out" / "document_index" / size_label(chunks)
        got = await _measure(root, chunks, dims, rounds)
        times = got["times"]
        for op in times["indexed"]:
            a, b = times["indexed"][op], times["scanned"][op]
            ratio = statistics.median(x / y for x, y in zip(a, b, strict=True))
            rows.append(
                [
                    f"{chunks:,}",
                    op,
                    _fmt(statistics.median(b)),
                    _fmt(statistics.median(a)),
                    f"{ratio:.2f}×",
                ]
            )
        rows.append([f"{chunks:,}", "the index on disk (MB)", "–", f"{got['index_mb']:.1f}", "–"])
        print(markdown_table(_HEADER, rows), flush=True)
    return rows


_HEADER = ["rows", "operation", "scanned p50 ms", "indexed p50 ms", "indexed ÷ scanned"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100k,1m")
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rows = asyncio.run(_run(sizes, args.dims, args.rounds))
    if args.out is not None:
        lines = [
            "## The vector table's document_id index",
            "",
            f"Generated by `evals/bench_document_index.py`. Command: `{command_line()}`",
            "",
            f"Random {args.dims}-d unit vectors, documents of {_PER_DOCUMENT} chunks, written"
            " through `LanceDBVectorStore` and optimized; one copy with the B-tree index on"
            " `document_id` (*indexed*), one without (*scanned*). Each of "
            f"{args.rounds} rounds runs the same operations on the same documents on both copies,"
            " in alternating order: *replace* upserts 16 existing documents, *delete* removes 16"
            " documents (written back untimed), *optimize* is LanceDB's `optimize()` folding the"
            " round's rows into every index. Then 40 *filtered searches* on each copy in turn: a"
            " top-10 vector query restricted to 1% of the documents, vectors not held in memory."
            " The ratio is taken per round (per search), then the median.",
            "",
            markdown_table(_HEADER, rows),
            "",
            *machine_lines(),
        ]
        write_section(args.out, _SECTION, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
