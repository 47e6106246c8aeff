"""What metadata filters and clearances cost, per search mode, at a given size.

Generates the seeded synthetic corpus (``evals.synthetic``), deals its files into
50 folders, ingests them folder by folder so each folder's documents carry fields
(``shard`` = folder number, ``team`` = one of five, ``sensitivity`` public or
internal), with ``HashEmbedder`` vectors, and then times the same queries with no
filter, filters keeping about 50%, 8% and 2% of the chunks, and a clearance
keeping half. It also times the first filtered search of a fresh Retriever, which
reads every chunk's owner (``chunk_owners``) before it can build its masks.

    python -m evals.bench_filters --sizes 100k --out docs/benchmarks-filters.md
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

from evals.hybrid.embedders import HashEmbedder
from evals.machine import command_line, machine_lines, markdown_table
from evals.plots import FilterPoint, plot_filter_cost, size_name
from evals.stats import percentile
from evals.synthetic import (
    BENCH_CHUNKING,
    SyntheticSpec,
    generate,
    parse_size,
    size_label,
)
from groundkit import Collection, RetrievalConfig, SearchMode
from groundkit.contracts import fields_of
from groundkit.retrieval import Retriever
from groundkit.retrieval.filters import parse_filters
from groundkit.retrieval.sensitivity import visible

__all__ = ["main", "plot_link"]

_TEAMS = ("ops", "data", "web", "infra", "legal")


def _fields(shard: int) -> dict[str, object]:
    return {
        "shard": shard,
        "team": _TEAMS[shard % len(_TEAMS)],
        "sensitivity": "internal" if shard % 2 else "public",
    }


async def _ingest(root: Path, index: Path) -> tuple[int, int, float]:
    """Ingest ``root``'s folders with per-folder fields; (folders, chunks, seconds)."""
    folders = sorted(p for p in root.iterdir() if p.is_dir())
    started = time.perf_counter()
    async with Collection.open(
        index, "bench", base_dir=root, chunking=BENCH_CHUNKING, embedder=HashEmbedder()
    ) as col:
        for shard, folder in enumerate(folders):
            report = await col.ingest(folder, metadata=_fields(shard))
            if report.failed:
                raise RuntimeError(f"{len(report.failed)} files failed in {folder}")
        chunks = await col.store.chunk_count()
    return len(folders), chunks, time.perf_counter() - started


_SHARDS = 50
# Name → filter; the share of chunks each keeps is printed beside it.
_SETTINGS: dict[str, dict[str, Any] | None] = {
    "no filter": None,
    "shard < 25": {"shard": {"lt": 25}},
    "team = ops AND shard < 20": {"team": "ops", "shard": {"lt": 20}},
    "shard = 7": {"shard": 7},
}


def _write_sharded(files: dict[str, str], root: Path) -> None:
    """The corpus's files dealt round-robin into ``_SHARDS`` folders."""
    for i, text in enumerate(files.values()):
        path = root / f"{i % _SHARDS:02d}" / f"p{i:07d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


async def _shares(col: Collection, settings: list[tuple[str, Any]]) -> dict[str, float]:
    """Share of chunks each setting keeps, counted on the stored rows."""
    rows = [s async for batch in col.store.iter_chunks() for s in batch]
    shares: dict[str, float] = {}
    for name, filters in settings:
        flt = parse_filters(filters)
        kept = sum(1 for r in rows if flt is None or flt.matches(fields_of(r.metadata)))
        shares[name] = kept / len(rows)
    shares["clearance public"] = sum(
        1 for r in rows if visible(fields_of(r.metadata), "public")
    ) / len(rows)
    return shares


async def _measure(index: Path, queries: list[str]) -> dict[str, Any]:
    embedder = HashEmbedder()
    out: dict[str, Any] = {"rows": [], "first": [], "p50": []}
    async with Collection.open(index, "bench", embedder=embedder) as col:
        assert col.vector_store is not None
        settings = _SETTINGS
        # The one-off cost: a fresh snapshot's first filtered search builds its masks.
        for _ in range(3):
            retriever = await Retriever.open(
                col.store, RetrievalConfig(), embedder=embedder, vector_store=col.vector_store
            )
            started = time.perf_counter()
            await retriever.search(queries[0], 10, filters={"shard": 0})
            out["first"].append((time.perf_counter() - started) * 1000)
        plain = await Retriever.open(
            col.store, RetrievalConfig(), embedder=embedder, vector_store=col.vector_store
        )
        cleared = await Retriever.open(
            col.store,
            RetrievalConfig(),
            embedder=embedder,
            vector_store=col.vector_store,
            clearance="public",
        )
        variants = [(name, plain, flt) for name, flt in settings.items()]
        variants.append(("clearance public", cleared, None))
        out["share"] = await _shares(col, [(n, f) for n, f in settings.items()])
        modes: tuple[SearchMode, ...] = ("bm25", "dense", "hybrid")
        for mode in modes:
            samples: dict[str, list[float]] = {name: [] for name, _, _ in variants}
            counts: dict[str, list[int]] = {name: [] for name, _, _ in variants}
            for _, retriever, flt in variants:  # warm-up: masks built, caches filled
                await retriever.search(queries[0], 10, mode=mode, filters=flt)
            for query in queries:
                for name, retriever, flt in variants:
                    started = time.perf_counter()
                    found = await retriever.search(query, 10, mode=mode, filters=flt)
                    samples[name].append((time.perf_counter() - started) * 1000)
                    counts[name].append(found.total_results)
            base = percentile(samples["no filter"], 50)
            for name, _, _ in variants:
                p50 = percentile(samples[name], 50)
                out["p50"].append((mode, name, out["share"][name], p50))
                out["rows"].append(
                    [
                        mode,
                        f"{name} ({out['share'][name]:.0%} of chunks)",
                        f"{p50:.2f}",
                        f"{percentile(samples[name], 95):.2f}",
                        f"{p50 / base:.2f}×",
                        f"{min(counts[name])}–{max(counts[name])}",
                    ]
                )
    return out


async def _run(args: argparse.Namespace) -> list[str]:
    lines = [
        "# Filter and clearance benchmarks",
        "",
        "Generated by `evals/bench_filters.py`; do not edit by hand.",
        "",
        f"Command: `{command_line()}`",
        "",
        *machine_lines(),
        "",
    ]
    points: list[FilterPoint] = []
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        name = f"synthetic-{size_label(size)}"
        root = args.workdir / name
        if root.exists():
            shutil.rmtree(root)
        corpus = generate(SyntheticSpec(passages=size), args.queries)
        _write_sharded(corpus.files, root / "corpus")
        queries = corpus.queries
        folders, chunks, ingest_s = await _ingest(root / "corpus", root / "index")
        measured = await _measure(root / "index", queries)
        points += [FilterPoint(size_name(chunks), *row) for row in measured["p50"]]
        lines += [
            f"## {chunks:,} chunks",
            "",
            f"Corpus `{name}` ({folders} folders) ingested with fields in "
            f"{ingest_s:.0f} s (HashEmbedder vectors, as in docs/benchmarks-hybrid-scale.md). "
            f"{len(queries)} queries, top_k 10; every setting runs each query "
            "in turn, after one warm-up search per setting. *× none* is the p50 against the "
            "same mode without a filter, measured in the same loop. Dense and hybrid times "
            "include embedding the query with HashEmbedder (microseconds).",
            "",
            "First filtered search of a freshly opened Retriever (reads every chunk's owner, "
            "builds the masks): " + ", ".join(f"{ms:.0f} ms" for ms in measured["first"]) + ".",
            "",
            markdown_table(
                ["mode", "setting", "p50 ms", "p95 ms", "× none", "results"], measured["rows"]
            ),
            "",
        ]
    png = args.out.parent / "img" / f"{args.out.stem}-p50.png"
    plot_filter_cost(points, png)
    return [*lines, *plot_section(f"{png.parent.name}/{png.name}")]


def plot_link(path: str) -> str:
    """The page's line showing the plot, ``path`` relative to the page."""
    return f"![query p50 against the share of chunks a filter keeps, per mode and size]({path})"


def plot_section(path: str) -> list[str]:
    """The closing section: the tables above as one figure."""
    return [
        "## Against the share of chunks kept",
        "",
        "The p50 of every table above, a panel per mode: field filters (and no filter, at",
        "100%) as a line per corpus size, the clearance as its own marker, and each size's",
        "unfiltered p50 as a dotted reference line.",
        "",
        plot_link(path),
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100k")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--workdir", type=Path, default=Path("evals/out/bench_filters"))
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks-filters.md"))
    args = parser.parse_args(argv)
    lines = asyncio.run(_run(args))
    args.out.write_text("\n".join(lines).rstrip("\n") + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
