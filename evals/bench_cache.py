"""Dense search on S3 through the local vector cache, against uncached and local disk.

    python -m evals.bench_cache [--vectors 20k] [--queries 50] [--colds 3] [--out FILE]

One run, one table: the same seeded, clustered 384-d vectors written to a
``LanceDBVectorStore`` on a local directory and under ``s3://`` on an S3-compatible
server (moto on 127.0.0.1 unless ``--s3-endpoint``), ANN index built on both. Then
``query(k=10)`` for the same probes on the local table, on S3 uncached, and on S3
through ``CachedLanceDBVectorStore``: *cold* is a first query on an empty cache
directory (listing, manifest and downloads included; median of ``--colds`` fresh
stores), *warm* every query after it. Local, uncached and warm alternate per probe,
and every ratio is against the local p50 of this run. Results go to a marked
section of ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from evals.bench_shared import _DIM, _fill, _vectors
from evals.machine import REPO_ROOT, command_line, machine_lines, markdown_table, write_section
from evals.stats import percentile
from evals.synthetic import parse_size, size_label
from groundkit.storage.lancedb import LanceDBVectorStore
from groundkit.storage.vector_cache import CachedLanceDBVectorStore, VectorCacheSettings

__all__ = ["main"]

SECTION = "vector-cache"
_BUDGET = 10 * 2**30


def _ids(hits: list[Any]) -> list[str]:
    return [h.chunk_id for h in hits]


async def _timed(store: LanceDBVectorStore, probe: Any) -> tuple[float, list[str]]:
    started = time.perf_counter()
    hits = await store.query(probe, 10)
    return (time.perf_counter() - started) * 1000, _ids(hits)


async def _measure(size: int, options: dict[str, str], queries: int, colds: int) -> list[str]:
    vectors = _vectors(size, seed=size)
    probes = _vectors(queries, seed=7)
    uri = f"s3://bench/{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        cache = VectorCacheSettings(Path(tmp) / "cache", _BUDGET)
        local = await LanceDBVectorStore.open(Path(tmp) / "local", "bench", _DIM)
        remote = await LanceDBVectorStore.open(uri, "bench", _DIM, storage_options=options)
        stores: list[LanceDBVectorStore] = [local, remote]
        try:
            await _fill(local, vectors)
            await _fill(remote, vectors)
            cold_ms: list[float] = []
            fetched = (0, 0)
            for _ in range(colds):
                shutil.rmtree(cache.root, ignore_errors=True)
                fresh = await CachedLanceDBVectorStore.open_cached(
                    uri, "bench", _DIM, cache=cache, storage_options=options
                )
                try:
                    cold_ms.append((await _timed(fresh, probes[0]))[0])
                    assert fresh.mirror is not None
                    fetched = (fresh.mirror.fetched_files, fresh.mirror.fetched_bytes)
                finally:
                    await fresh.close()
            cached = await CachedLanceDBVectorStore.open_cached(
                uri, "bench", _DIM, cache=cache, storage_options=options
            )
            stores.append(cached)
            await cached.query(probes[0], 10)  # the first query of a store on a full cache
            times: dict[str, list[float]] = {"local": [], "s3": [], "warm": []}
            as_local = {"local": 0, "s3": 0, "warm": 0}
            as_uncached = {"local": 0, "s3": 0, "warm": 0}
            for probe in probes:
                found: dict[str, list[str]] = {}
                for name, store in (("local", local), ("s3", remote), ("warm", cached)):
                    took, found[name] = await _timed(store, probe)
                    times[name].append(took)
                for name in times:
                    as_local[name] += found[name] == found["local"]
                    as_uncached[name] += found[name] == found["s3"]
            indexed = await remote.has_ann_index()
            state = cached.cache_state
        finally:
            for store in stores:
                await store.close()
    base = percentile(times["local"], 50)
    cold_p50 = statistics.median(cold_ms)
    label = size_label(size)
    names = {"local": "local directory", "s3": "S3, uncached", "warm": "S3, cached (warm)"}
    table = [
        [
            label,
            names[key],
            f"{percentile(times[key], 50):.1f}",
            f"{percentile(times[key], 95):.1f}",
            f"{percentile(times[key], 50) / base:.2f}×",
            f"{as_local[key]}/{queries}",
            f"{as_uncached[key]}/{queries}",
        ]
        for key in names
    ]
    cold_row = ["S3, cached (cold: first query)", f"{cold_p50:.0f}", "", f"{cold_p50 / base:.0f}×"]
    table.append([label, *cold_row, "", ""])
    warm_ratio = percentile(times["warm"], 50) / base
    return [
        markdown_table(
            [
                "vectors",
                "table",
                "p50 ms",
                "p95 ms",
                "p50 × local",
                "same top-10 as local",
                "as S3 uncached",
            ],
            table,
        ),
        "",
        f"- {label}: ANN index {'yes' if indexed else 'no'}; a cold query downloaded "
        f"{fetched[0]} files, {fetched[1] / 2**20:.1f} MiB (median of {colds} cold stores: "
        f"{', '.join(f'{c:.0f}' for c in cold_ms)} ms); cache state after the run: {state}",
        f"- {label}: warm cached p50 = {warm_ratio:.2f}× local (target ≤ 1.5×), uncached = "
        f"{percentile(times['s3'], 50) / base:.1f}× local",
        "",
    ]


async def _run(args: argparse.Namespace) -> list[str]:
    from tests.s3_support import S3Server, start_s3

    with contextlib.ExitStack() as stack:
        s3 = S3Server(args.s3_endpoint) if args.s3_endpoint else start_s3()
        if not args.s3_endpoint:
            stack.callback(s3.stop)
        s3.create_bucket("bench")
        body: list[str] = []
        for size in [parse_size(s) for s in args.vectors.split(",") if s]:
            body += await _measure(size, s3.storage_options, args.queries, args.colds)
    return [
        "## Vector cache: dense search on S3, cached and uncached, against local disk",
        "",
        f"Command: `{command_line()}` (`evals/bench_cache.py`). moto, a Python S3 emulator, "
        "runs on this machine: the uncached and cold figures show what the object store adds "
        "here, not what a networked one costs; warm figures do not touch it.",
        "",
        *machine_lines(),
        "",
        f"Seeded clustered {_DIM}-d unit vectors written to a local directory and to S3 "
        f"(batches of 5,000, optimised, ANN index on both); {args.queries} probes, "
        "`query(k=10)` with the shipped index settings. Local, S3 uncached and S3 through "
        "the cache (`CachedLanceDBVectorStore`, warm) alternate per probe; *cold* is the first "
        "query of a store on an empty cache directory, downloads included.",
        "",
        *body,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--s3-endpoint", default=None, help="an S3 endpoint (default: moto)")
    parser.add_argument("--vectors", default="20k", help="table sizes, comma-separated")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--colds", type=int, default=3, help="cold first queries to time")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    lines = asyncio.run(_run(args))
    print("\n".join(lines))
    write_section(args.out, SECTION, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
