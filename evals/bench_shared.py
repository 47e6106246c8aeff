"""Shared-collection costs: PostgreSQL against SQLite, S3 against local disk.

    python -m evals.bench_shared [--sizes 100k] [--vectors 20k,100k] [--out docs/benchmarks.md]

Part 1 is ``evals.bench_postgres`` (the same documents written to SQLite and to a
PostgreSQL collection; ``Retriever.open`` and search on each). Part 2 writes the same
seeded, clustered 384-d vectors into ``LanceDBVectorStore`` on a local directory and
under ``s3://`` on an S3-compatible server, builds the ANN index on both, and times
``query(k=10)`` for the same query vectors, alternating between the two.

Without ``--dsn`` / ``--s3-endpoint`` the script starts a private PostgreSQL
(``initdb`` on 127.0.0.1) and ``moto_server`` on 127.0.0.1, as the tests do. moto is
a Python process on the same machine: its latency is not that of a real object store,
and the page says so. Results go to a marked section of ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from evals.bench_postgres import DSN_ENV
from evals.bench_postgres import _run as run_postgres
from evals.machine import REPO_ROOT, command_line, machine_lines, markdown_table, write_section
from evals.stats import percentile
from evals.synthetic import parse_size, size_label
from groundkit.storage.lancedb import LanceDBVectorStore

__all__ = ["main"]

SECTION = "shared-collections"
_DIM = 384
_BATCH = 5_000


@contextlib.contextmanager
def _servers(dsn: str | None, endpoint: str | None) -> Iterator[tuple[str, dict[str, str]]]:
    """A PostgreSQL DSN and S3 storage options: the given ones, or private servers."""
    from tests.pg_support import start_postgres
    from tests.s3_support import S3Server, start_s3

    with contextlib.ExitStack() as stack:
        if dsn is None:
            pg = start_postgres()
            stack.callback(pg.stop)
            dsn = pg.dsn
        s3 = S3Server(endpoint) if endpoint else start_s3()
        if not endpoint:
            stack.callback(s3.stop)
        s3.create_bucket("bench")
        yield dsn, s3.storage_options


def _vectors(n: int, seed: int) -> npt.NDArray[np.float32]:
    """Clustered unit vectors: 256 centres, each row a centre plus noise."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((256, _DIM)).astype(np.float32)
    rows = centres[rng.integers(0, 256, n)] + 0.6 * rng.standard_normal((n, _DIM)).astype(
        np.float32
    )
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


async def _fill(store: LanceDBVectorStore, vectors: npt.NDArray[np.float32]) -> float:
    started = time.perf_counter()
    for lo in range(0, len(vectors), _BATCH):
        part = vectors[lo : lo + _BATCH]
        doc = f"d{lo // _BATCH:05d}"
        ids = [f"{doc}#{i}" for i in range(len(part))]
        await store.upsert_documents([(doc, ids, part)])
    await store.optimize()
    return time.perf_counter() - started


async def _vector_rows(sizes: list[int], options: dict[str, str], queries: int) -> list[list[str]]:
    rows: list[list[str]] = []
    for size in sizes:
        vectors = _vectors(size, seed=size)
        probes = _vectors(queries, seed=7)
        with tempfile.TemporaryDirectory() as tmp:
            local = await LanceDBVectorStore.open(Path(tmp), "bench", _DIM)
            remote = await LanceDBVectorStore.open(
                f"s3://bench/{uuid.uuid4().hex[:8]}", "bench", _DIM, storage_options=options
            )
            try:
                fill = {"local": await _fill(local, vectors), "s3": await _fill(remote, vectors)}
                times: dict[str, list[float]] = {"local": [], "s3": []}
                same = 0
                for probe in probes:
                    found: dict[str, Any] = {}
                    for name, store in (("local", local), ("s3", remote)):
                        started = time.perf_counter()
                        found[name] = await store.query(probe, 10)
                        times[name].append((time.perf_counter() - started) * 1000)
                    same += [h.chunk_id for h in found["local"]] == [
                        h.chunk_id for h in found["s3"]
                    ]
                indexed = await remote.has_ann_index()
            finally:
                await local.close()
                await remote.close()
        base = percentile(times["local"], 50)
        for name in ("local", "s3"):
            p50 = percentile(times[name], 50)
            rows.append(
                [
                    size_label(size),
                    "local directory" if name == "local" else "S3 (moto on 127.0.0.1)",
                    f"{fill[name]:.1f}",
                    "yes" if indexed else "no",
                    f"{p50:.1f}",
                    f"{percentile(times[name], 95):.1f}",
                    f"{p50 / base:.1f}×",
                    f"{same}/{queries}",
                ]
            )
    return rows


def _ratio_lines(rows: list[list[str]]) -> list[str]:
    """PostgreSQL against SQLite per corpus, from the table's rows (SQLite row first)."""
    lines = []
    for lite, pg in zip(rows[::2], rows[1::2], strict=True):
        open_ratio = float(pg[5].replace(",", "")) / float(lite[5].replace(",", ""))
        p50_ratio = float(pg[6]) / float(lite[6])
        lines.append(
            f"- {lite[0]}: PostgreSQL / SQLite `Retriever.open` = {open_ratio:.2f}×, "
            f"search p50 = {p50_ratio:.2f}×"
        )
    return [*lines, ""] if lines else []


async def _run(args: argparse.Namespace) -> list[str]:
    with _servers(args.dsn, args.s3_endpoint) as (dsn, options):
        sizes = [parse_size(s) for s in args.sizes.split(",") if s]
        pg_rows = await run_postgres(dsn, sizes, args.queries) if sizes else []
        vector_sizes = [parse_size(s) for s in args.vectors.split(",") if s]
        vector_rows = await _vector_rows(vector_sizes, options, args.queries)
    lines = [
        "## Shared collections: PostgreSQL and S3",
        "",
        f"Command: `{command_line()}` (`evals/bench_shared.py`). Both servers run on this "
        "machine (PostgreSQL 15 with `fsync=off`; moto, a Python S3 emulator): the ratios "
        "show what each store adds here, not what a networked deployment costs.",
        "",
        *machine_lines(),
        "",
        "### Metadata: `Retriever.open` from PostgreSQL against SQLite",
        "",
        "The same analysed documents written to both stores (batches of 200 documents); "
        "`Retriever.open` is the median of three, search is `k=10` including the row join.",
        "",
        markdown_table(
            ["corpus", "store", "chunks", "write s", "chunks/s", "open ms", "p50 ms", "p95 ms"],
            pg_rows,
        ),
        "",
        *_ratio_lines(pg_rows),
        "### Vectors: dense query latency on S3 against a local directory",
        "",
        f"Seeded clustered {_DIM}-d unit vectors, written in batches of {_BATCH:,} and "
        f"optimised; {args.queries} query vectors, `LanceDBVectorStore.query(k=10)` with the "
        "shipped index settings, local and S3 alternating per query. *same top-10* counts "
        "queries whose ten ids agree exactly.",
        "",
        markdown_table(
            [
                "vectors",
                "table on",
                "write + optimise s",
                "ANN index",
                "p50 ms",
                "p95 ms",
                "p50 × local",
                "same top-10",
            ],
            vector_rows,
        ),
        "",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", default=os.environ.get(DSN_ENV), help=f"or ${DSN_ENV}")
    parser.add_argument("--s3-endpoint", default=None, help="an S3 endpoint (default: moto)")
    parser.add_argument("--sizes", default="100k", help="corpora for part 1 ('' skips it)")
    parser.add_argument("--vectors", default="20k,100k", help="table sizes for part 2")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    lines = asyncio.run(_run(args))
    write_section(args.out, SECTION, lines)
    print(f"wrote section {SECTION!r} of {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
