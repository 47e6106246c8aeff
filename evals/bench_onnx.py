"""The int8 ONNX embedder against the torch fp32 one, side by side on SciFact.

    python -m evals.bench_onnx [--data DIR] [--limit-queries N] [--out docs/benchmarks-dense.md]

One process, both embedders of the packaged all-MiniLM-L6-v2, offline:

1. the int8 export into a fresh cache directory (timed: the one-time cost), then a
   second embedder loading it from the cache, and the torch model's load;
2. the SciFact corpus ingested twice through ``Collection`` (``evals.dense_scifact.run``),
   once per embedder, each followed by dense and hybrid (default settings) over the judged
   queries: chunks per second of ingest, nDCG@10;
3. query embedding alone: every judged query embedded by each embedder in turn
   (int8, fp32, int8, ...), so load on the machine falls on both alike; p50 and p95.

The page's section ``onnx-int8`` is written with ``evals.machine.write_section``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from evals.beir import BeirDataset, load_beir, offline_models
from evals.dense_scifact import ModeResult, Setting
from evals.dense_scifact import run as run_scifact
from evals.machine import (
    command_line,
    default_scifact_dir,
    load_average,
    machine_lines,
    markdown_table,
    write_section,
)
from evals.stats import percentile
from groundkit import RetrievalConfig, SentenceTransformerEmbedder

__all__ = ["main"]

SECTION = "onnx-int8"
SETTINGS: list[Setting] = [
    ("dense", "dense", RetrievalConfig()),
    ("hybrid", "hybrid", RetrievalConfig()),
]
# Targets: ingest at least twice as fast, nDCG@10 within 0.005 of fp32 in both modes.
SPEEDUP_TARGET = 2.0
NDCG_TOLERANCE = 0.005


@dataclass(frozen=True)
class Side:
    """One embedder's figures."""

    label: str
    load_s: float
    ingest_s: float
    chunks: int
    modes: dict[str, ModeResult]
    query_ms: list[float]

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.ingest_s


async def _loaded(embedder: SentenceTransformerEmbedder) -> float:
    started = time.perf_counter()
    await embedder.load()
    elapsed = time.perf_counter() - started
    await embedder.embed_documents(["warm-up"])
    return elapsed


async def _query_latencies(
    embedders: list[SentenceTransformerEmbedder], queries: list[str]
) -> list[list[float]]:
    out: list[list[float]] = [[] for _ in embedders]
    for text in queries:
        for i, embedder in enumerate(embedders):
            started = time.perf_counter()
            await embedder.embed_query(text)
            out[i].append((time.perf_counter() - started) * 1000)
    return out


async def measure(data: BeirDataset, limit: int | None) -> tuple[list[Side], float, str]:
    """Both sides; the export's seconds; the load average when timing started."""
    int8 = SentenceTransformerEmbedder("all-MiniLM-L6-v2", backend="onnx", quantize="int8")
    export_s = await _loaded(int8)
    cached = SentenceTransformerEmbedder("all-MiniLM-L6-v2", backend="onnx", quantize="int8")
    int8_load_s = await _loaded(cached)
    fp32 = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    fp32_load_s = await _loaded(fp32)
    started_load = load_average()
    results: dict[str, tuple[list[ModeResult], float, int]] = {}
    for label, embedder in (("fp32", fp32), ("int8", cached)):
        print(f"-- {label}: ingest and search", flush=True)
        results[label] = await run_scifact(data, limit, SETTINGS, embedder=embedder)
    queries = list(data.judged_queries(limit).values())
    int8_ms, fp32_ms = await _query_latencies([cached, fp32], queries)
    sides = []
    for label, load_s, query_ms in (("fp32", fp32_load_s, fp32_ms), ("int8", int8_load_s, int8_ms)):
        modes, ingest_s, chunks = results[label]
        sides.append(Side(label, load_s, ingest_s, chunks, {m.label: m for m in modes}, query_ms))
    return sides, export_s, started_load


def subset(data: BeirDataset, documents: int | None, queries: int | None) -> BeirDataset:
    """``data`` with its first ``documents`` abstracts and every abstract judged for the
    first ``queries`` judged queries (all of them when ``documents`` is None)."""
    if documents is None:
        return data
    judged = data.judged_queries(queries)
    keep = set(list(data.corpus)[:documents])
    keep.update(doc for q in judged for doc in data.qrels[q])
    corpus = {doc: text for doc, text in data.corpus.items() if doc in keep}
    return BeirDataset(corpus=corpus, queries=judged, qrels={q: data.qrels[q] for q in judged})


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def report(sides: list[Side], export_s: float, started_load: str, documents: int) -> list[str]:
    fp32, int8 = sides
    speedup = int8.chunks_per_s / fp32.chunks_per_s
    deltas = {
        mode: int8.modes[mode].means["ndcg@10"] - fp32.modes[mode].means["ndcg@10"]
        for mode in ("dense", "hybrid")
    }
    names = {
        "fp32": "torch fp32 (`SentenceTransformerEmbedder('all-MiniLM-L6-v2')`)",
        "int8": "ONNX int8 (`backend='onnx', quantize='int8'`)",
    }
    rows = [
        [
            names[s.label],
            f"{s.ingest_s:.1f}",
            f"{s.chunks_per_s:.1f}",
            f"{s.modes['dense'].means['ndcg@10']:.4f}",
            f"{s.modes['hybrid'].means['ndcg@10']:.4f}",
            f"{percentile(s.query_ms, 50):.2f}",
            f"{percentile(s.query_ms, 95):.2f}",
            f"{s.load_s:.2f}",
        ]
        for s in sides
    ]
    header = [
        "embedder",
        "ingest s",
        "chunks/s",
        "dense nDCG@10",
        "hybrid nDCG@10",
        "query embed p50 ms",
        "p95 ms",
        "load s",
    ]
    p50_ratio = percentile(fp32.query_ms, 50) / percentile(int8.query_ms, 50)
    return [
        "## ONNX int8 embedder against torch fp32",
        "",
        "Generated by `evals/bench_onnx.py`; do not edit by hand.",
        "",
        f"Command: `{command_line()}`",
        "",
        "Targets:",
        "",
        f"- dense ingest ≥ {SPEEDUP_TARGET:.1f}× the chunks per second of torch fp32: "
        f"{speedup:.2f}× → {_verdict(speedup >= SPEEDUP_TARGET)}",
        *(
            f"- {mode} nDCG@10 within {NDCG_TOLERANCE} of fp32: {delta:+.4f} → "
            f"{_verdict(abs(delta) <= NDCG_TOLERANCE)}"
            for mode, delta in deltas.items()
        ),
        f"- query embedding p50: {p50_ratio:.2f}× faster with int8 (reported, no target)",
        "",
        f"SciFact, {documents} abstracts one file each, {fp32.chunks} chunks, default chunking,",
        "ingested through `Collection` once per embedder (fp32 first), each followed by dense",
        "and hybrid (default settings) over the judged queries as `evals/dense_scifact.py`",
        "runs them. Query embedding: every judged query embedded by each embedder in turn",
        "(`embed_query`, one text), so drift from other work on the machine lands on both.",
        f"The int8 export (once, into an empty cache directory) took {export_s:.1f} s; `load s`",
        "is loading an already exported model from the cache, or the torch model.",
        f"Load average when timing started: {started_load}.",
        "",
        markdown_table(header, rows),
        "",
        "Machine:",
        "",
        *machine_lines(),
    ]


def main(argv: list[str] | None = None) -> int:
    offline_models()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=default_scifact_dir())
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument(
        "--limit-docs",
        type=int,
        default=None,
        help="a quick run: the first N abstracts plus every one the queries' judgements name",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    data = subset(load_beir(args.data), args.limit_docs, args.limit_queries)
    with tempfile.TemporaryDirectory(prefix="groundkit-onnx-cache-") as cache:
        # A fresh cache: the first int8 embedder exports, and that export is timed.
        os.environ["GROUNDKIT_CACHE_DIR"] = cache
        sides, export_s, started_load = asyncio.run(measure(data, args.limit_queries))
    lines = report(sides, export_s, started_load, len(data.corpus))
    print("\n".join(lines))
    if args.out:
        write_section(args.out, SECTION, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
