"""BEIR-format data and a document-level BM25 run through the real groundkit pipeline.

The runner writes each corpus document to its own file (``corpus/<_id>.txt``,
title, blank line, text), ingests the folder with ``groundkit.Collection``,
searches every query with ``mode="bm25"``, and ranks documents by their best
chunk (max-pooling; the document id is the file stem). Every chunk that
decides a document's rank can be read back with ``verify_citation``.
"""

from __future__ import annotations

import csv
import json
import re
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from evals.metrics import Report, evaluate
from groundkit import (
    MAX_TOP_K,
    AnalyzerConfig,
    ChunkingConfig,
    Collection,
    GroundkitError,
    RetrievalResult,
    verify_citation,
)

__all__ = [
    "DEFAULT_MEASURES",
    "BeirDataset",
    "RunResult",
    "VerifyMode",
    "document_text",
    "load_beir",
    "percentile",
    "rank_documents",
    "run_bm25",
    "write_corpus",
]

DEFAULT_MEASURES: tuple[tuple[str, int], ...] = (
    ("ndcg", 10),
    ("recall", 100),
    ("mrr", 10),
    ("map", 100),
)
VerifyMode = Literal["ranked", "all", "none"]
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class BeirDataset:
    """A BEIR split: ``corpus[id] = (title, text)``, queries and graded qrels."""

    corpus: dict[str, tuple[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    def judged_queries(self, limit: int | None = None) -> dict[str, str]:
        """Queries that have qrels, in file order, optionally the first ``limit``."""
        picked = {q: t for q, t in self.queries.items() if q in self.qrels}
        if limit is not None:
            picked = dict(list(picked.items())[:limit])
        return picked


def load_beir(data_dir: str | Path, split: str = "test") -> BeirDataset:
    """Read ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv`` in place."""
    root = Path(data_dir)
    corpus: dict[str, tuple[str, str]] = {}
    with (root / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                corpus[str(row["_id"])] = (row.get("title") or "", row.get("text") or "")
    queries: dict[str, str] = {}
    with (root / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                queries[str(row["_id"])] = row["text"]
    qrels: dict[str, dict[str, int]] = {}
    with (root / "qrels" / f"{split}.tsv").open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        for row in reader:
            if not row or row[0] == "query-id":
                continue
            qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return BeirDataset(corpus=corpus, queries=queries, qrels=qrels)


def document_text(title: str, text: str) -> str:
    """What one corpus document's file holds."""
    return f"{title}\n\n{text}"


def write_corpus(corpus: Mapping[str, tuple[str, str]], root: Path) -> Path:
    """Write ``root/corpus/<id>.txt`` for every document; returns the folder."""
    folder = root / "corpus"
    folder.mkdir(parents=True, exist_ok=True)
    for doc_id, (title, text) in corpus.items():
        if not _SAFE_ID.fullmatch(doc_id):
            raise ValueError(f"document id {doc_id!r} is not usable as a file name")
        (folder / f"{doc_id}.txt").write_text(document_text(title, text), encoding="utf-8")
    return folder


def rank_documents(results: list[RetrievalResult], depth: int) -> list[RetrievalResult]:
    """Each document's best chunk, best first, at most ``depth`` of them.

    Results arrive sorted by score with groundkit's own tie-break, so the first
    chunk seen of a document is its best one.
    """
    seen: set[str] = set()
    best: list[RetrievalResult] = []
    for result in results:
        if result.source in seen:
            continue
        seen.add(result.source)
        best.append(result)
        if len(best) == depth:
            break
    return best


def _doc_id(result: RetrievalResult) -> str:
    return PurePosixPath(result.source).stem


def percentile(values: list[float], q: float) -> float:
    """``q``-th percentile with linear interpolation (numpy's default)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class RunResult:
    """Everything one evaluation run measured."""

    report: Report
    documents: int
    chunks: int
    queries: int
    chunk_top_k: int
    ingest_s: float
    open_s: float
    latencies_ms: list[float]
    latencies_k10_ms: list[float]
    short_queries: int
    verified: int = 0
    verify_failed: int = 0
    verify_errors: list[str] = field(default_factory=list)
    rankings: dict[str, list[str]] = field(default_factory=dict)

    @property
    def p50_ms(self) -> float:
        return percentile(self.latencies_ms, 50)

    @property
    def p95_ms(self) -> float:
        return percentile(self.latencies_ms, 95)


async def _verify(results: list[RetrievalResult], base: Path, out: RunResult) -> None:
    for result in results:
        try:
            ok = await verify_citation(result.citation, result.content, base)
        except GroundkitError as exc:
            ok = False
            if len(out.verify_errors) < 5:
                out.verify_errors.append(f"{result.source}: {exc}")
        if ok:
            out.verified += 1
        else:
            out.verify_failed += 1


async def run_bm25(
    dataset: BeirDataset,
    *,
    chunking: ChunkingConfig | None = None,
    analyzer: AnalyzerConfig | None = None,
    limit_queries: int | None = None,
    depth: int = 100,
    verify: VerifyMode = "ranked",
    workdir: Path | None = None,
    latency_pass: bool = True,
) -> RunResult:
    """Ingest ``dataset`` into a fresh collection and evaluate BM25 document ranking.

    ``verify="ranked"`` checks the best chunk of every ranked document,
    ``"all"`` every chunk returned, ``"none"`` skips the check.
    """
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="groundkit-beir-") as tmp:
            return await _run(
                dataset, Path(tmp), chunking, analyzer, limit_queries, depth, verify, latency_pass
            )
    return await _run(
        dataset, workdir, chunking, analyzer, limit_queries, depth, verify, latency_pass
    )


async def _run(
    dataset: BeirDataset,
    root: Path,
    chunking: ChunkingConfig | None,
    analyzer: AnalyzerConfig | None,
    limit_queries: int | None,
    depth: int,
    verify: VerifyMode,
    latency_pass: bool,
) -> RunResult:
    corpus_dir = write_corpus(dataset.corpus, root)
    queries = dataset.judged_queries(limit_queries)
    async with Collection.open(
        root / "index", "beir", base_dir=root, chunking=chunking, analyzer=analyzer
    ) as collection:
        started = time.perf_counter()
        report = await collection.ingest(corpus_dir)
        ingest_s = time.perf_counter() - started
        if report.failed:
            raise RuntimeError(
                f"{len(report.failed)} documents failed to ingest: {report.failed[:3]}"
            )
        started = time.perf_counter()
        retriever = await collection.retriever()
        open_s = time.perf_counter() - started
        chunks = retriever.size
        documents = len(report.added) + len(report.updated) + len(report.unchanged)
        # Whole-document units need ``depth`` chunks; split documents need more to
        # fill ``depth`` distinct documents.
        chunk_top_k = depth if chunks <= documents else MAX_TOP_K
        latencies: list[float] = []
        rankings: dict[str, list[str]] = {}
        ranked_results: list[list[RetrievalResult]] = []
        all_results: list[list[RetrievalResult]] = []
        short = 0
        for qid, text in queries.items():
            started = time.perf_counter()
            response = await collection.search(text, chunk_top_k, mode="bm25")
            latencies.append((time.perf_counter() - started) * 1000)
            best = rank_documents(response.results, depth)
            if len(best) < depth and len(response.results) == chunk_top_k:
                short += 1
            rankings[qid] = [_doc_id(r) for r in best]
            ranked_results.append(best)
            if verify == "all":
                all_results.append(response.results)
        latencies_k10: list[float] = []
        if latency_pass:
            for text in queries.values():
                started = time.perf_counter()
                await collection.search(text, 10, mode="bm25")
                latencies_k10.append((time.perf_counter() - started) * 1000)
        qrels = {q: dataset.qrels[q] for q in queries}
        result = RunResult(
            report=evaluate(qrels, rankings, DEFAULT_MEASURES),
            documents=documents,
            chunks=chunks,
            queries=len(queries),
            chunk_top_k=chunk_top_k,
            ingest_s=ingest_s,
            open_s=open_s,
            latencies_ms=latencies,
            latencies_k10_ms=latencies_k10,
            short_queries=short,
            rankings=rankings,
        )
        to_check = all_results if verify == "all" else ranked_results if verify == "ranked" else []
        for batch in to_check:
            await _verify(batch, collection.base_dir, result)
    return result
