"""Dense ingest against the model floor, and hybrid query latency at 100k chunks by stage.

    python -m evals.bench_hybrid [--ingest-chunks N] [--sizes 100k] [--queries 200]
                                 [--fresh] [--out docs/benchmarks-dense.md]

Part 1 writes the first SciFact abstracts (up to about N chunks) one file per
document into a temp dir and times, in one process with the model loaded
beforehand: ``SentenceTransformer.encode`` on exactly the chunk texts groundkit
produced (the floor) and a full ``Collection.ingest`` with
``SentenceTransformerEmbedder("all-MiniLM-L6-v2")``, alternately (three floors,
two ingests, so drift on a shared machine hits both), plus a BM25-only ingest of
the same files and a cProfile of the ingest with the model's vectors replayed.

Part 2 builds a synthetic collection (``evals.synthetic``, one chunk per
passage) whose vectors come from ``HashEmbedder``: hashed tokens through a
seeded random projection. Encoding 100k chunks with MiniLM would take most of
an hour here; synthetic vectors make the vector-search cost realistic but not
its quality. The collection is cached under ``evals/out/bench_hybrid/``. The
real MiniLM's ``embed_query`` is timed on its own, and once more inside hybrid
search through ``MiniLMQueryEmbedder`` (MiniLM's query vector against the
hashed index: real cost and thread overlap, meaningless ranking).
"""

# The entry point only: the parts live in evals/hybrid/ (see its __init__ for the layout).

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

from evals.hybrid.common import BATCH_SIZE, log
from evals.hybrid.ingest import run_ingest
from evals.hybrid.ingest_page import ingest_section
from evals.hybrid.latency import LatencyResult, run_latency
from evals.hybrid.latency_page import latency_section, summary_lines
from evals.hybrid.memory import RSS_SYSTEMS, measure_memory, memory_lines, work
from evals.hybrid.prepare import prepare_synthetic
from evals.hybrid.scale import scale_lines
from evals.machine import (
    REPO_ROOT,
    carried_sections,
    command_line,
    default_scifact_dir,
    machine_lines,
    print_worker_result,
)
from evals.synthetic import parse_size
from groundkit import SentenceTransformerEmbedder

__all__ = ["main"]


async def _run(args: argparse.Namespace) -> list[str]:
    embedder = SentenceTransformerEmbedder("all-MiniLM-L6-v2", batch_size=BATCH_SIZE)
    await embedder.load()
    sections: list[str] = []
    summary: list[str] = []
    if args.ingest_chunks > 0:
        result = await run_ingest(args.data, args.ingest_chunks, embedder)
        lines, targets = ingest_section(result)
        print("\n".join(lines), flush=True)
        sections += lines
        summary += targets
    args.workdir.mkdir(parents=True, exist_ok=True)
    measured: list[LatencyResult] = []
    for size in [s.strip() for s in args.sizes.split(",") if s.strip()]:
        prepared = await prepare_synthetic(args.workdir, parse_size(size), args.queries, args.fresh)
        log(f"part 2: {prepared.name}: queries")
        latency = await run_latency(prepared, args.queries, embedder)
        measured.append(latency)
        lines, targets = latency_section(latency)
        lines += memory_lines(measure_memory(prepared), prepared.chunks)
        print("\n".join(lines), flush=True)
        sections += lines
        summary += targets
    if len(measured) > 1:
        png = args.out.parent / "img" / f"{args.out.stem}-scale.png"
        sections += scale_lines(measured, png)
    if measured:
        summary = [*summary, "", *summary_lines(measured)]
    return [*summary, "", *sections]


def main(argv: list[str] | None = None) -> int:
    for key, value in (
        ("HF_HUB_OFFLINE", "1"),
        ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
        ("LANCEDB_LOG", "error"),
    ):
        os.environ[key] = value
    parser = argparse.ArgumentParser(prog="python -m evals.bench_hybrid", description=__doc__)
    parser.add_argument(
        "--ingest-chunks", type=int, default=2800, help="part 1 corpus size (0 skips part 1)"
    )
    parser.add_argument("--sizes", default="100k", help="part 2 chunk counts ('' skips part 2)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--data", type=Path, default=default_scifact_dir())
    parser.add_argument(
        "--workdir", type=Path, default=REPO_ROOT / "evals" / "out" / "bench_hybrid"
    )
    parser.add_argument("--fresh", action="store_true", help="re-generate and re-ingest part 2")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "benchmarks-dense.md")
    parser.add_argument("--worker", choices=sorted(RSS_SYSTEMS.values()), help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return print_worker_result(asyncio.run(work(args.worker, args.dir, args.queries)))
    started = time.perf_counter()
    body = asyncio.run(_run(args))
    minutes = (time.perf_counter() - started) / 60
    text = [
        "# Dense and hybrid benchmarks",
        "",
        "Generated by `evals/bench_hybrid.py`; do not edit by hand.",
        "",
        f"Command: `{command_line()}` ({minutes:.1f} min)",
        "",
        "Targets:",
        "",
        *body,
        "Machine (2 cores, shared with other work: compare ratios taken in the same run",
        "rather than absolute times across runs):",
        "",
        *machine_lines(),
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # Sections other benchmarks keep on this page (evals.bench_onnx) are carried over.
    args.out.write_text("\n".join(text) + carried_sections(args.out), encoding="utf-8")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
