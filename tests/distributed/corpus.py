"""A deterministic corpus of markdown files, and the comparison of two collections.

Used by the distributed tests and ``evals/bench_ray.py``: the same files ingested two
ways must give the same collection (chunk ids, vectors within float tolerance, BM25
rankings, every citation verifying).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from groundkit import ChunkingConfig, Collection
from groundkit.ingestion.indexer import index_texts
from groundkit.utils.hashing import sha256_text

__all__ = ["QUERIES", "assert_same_collection", "collection_chunks", "write_corpus"]

# Words drawn from, as one string each (a list literal would run to a hundred lines).
_TOPIC_TEXT = (
    "refund shipping warranty invoice battery firmware sensor orbit enzyme protein glacier "
    "harbour compiler kernel ledger turbine vaccine lattice pigment canal monsoon quartz "
    "violin archive"
)
_WORD_TEXT = (
    "the a of and to in is was for on with as by at from that this which be are were it "
    "policy customer measure result sample method report system value level period change "
    "study model process energy water surface signal network record patient device market"
)
_TOPICS = _TOPIC_TEXT.split()
_WORDS = _WORD_TEXT.split()
QUERIES = [
    "refund policy for damaged items",
    "firmware update of the sensor",
    "glacier surface measurement",
    "kernel compiler report",
    "protein enzyme sample method",
    "turbine energy output period",
    "archive ledger record",
    "monsoon water level change",
]


def write_corpus(folder: Path, files: int, paragraphs: int = 24, seed: int = 31) -> int:
    """Write ``files`` markdown files under ``folder``; returns the characters written."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for number in range(files):
        topics = rng.sample(_TOPICS, 3)
        lines = [f"# Notes {number:05d} on {topics[0]} and {topics[1]}", ""]
        for p in range(paragraphs):
            if p % 6 == 0:
                lines += [f"## Section {p // 6 + 1}: {rng.choice(topics)}", ""]
            words = [
                rng.choice(topics) if rng.random() < 0.12 else rng.choice(_WORDS)
                for _ in range(rng.randint(30, 60))
            ]
            lines += [" ".join(words).capitalize() + ".", ""]
        text = "\n".join(lines)
        (folder / f"n{number:05d}.md").write_text(text, encoding="utf-8")
        written += len(text)
    return written


async def collection_chunks(col: Collection) -> dict[str, list[tuple[str, str]]]:
    """``{source: [(chunk_id, index-text hash), ...]}`` of the current documents."""
    ids = sorted(await col.store.document_ids())
    grouped = await col.store.get_chunks_for_documents(ids)
    out: dict[str, list[tuple[str, str]]] = {}
    chunking = ChunkingConfig()
    for rows in grouped.values():
        ordered = sorted(rows, key=lambda r: r.chunk_index)
        texts = index_texts([r.chunk for r in ordered], ordered[0].metadata, chunking)
        out[ordered[0].source] = [
            (r.chunk_id, sha256_text(t)) for r, t in zip(ordered, texts, strict=True)
        ]
    return out


async def assert_same_collection(expected: Collection, got: Collection) -> None:
    """Same chunk ids, vectors within float tolerance, BM25 rankings, citations verified."""
    want = await collection_chunks(expected)
    have = await collection_chunks(got)
    assert have == want
    assert not await got.store.documents_missing_vectors()
    hashes = sorted({h for chunks in want.values() for _, h in chunks})
    assert expected.vector_store is not None and got.vector_store is not None
    a = await expected.vector_store.vectors_by_content(hashes)
    b = await got.vector_store.vectors_by_content(hashes)
    assert set(a) == set(b) == set(hashes)
    worst = max(float(np.max(np.abs(a[h] - b[h]))) for h in hashes)
    assert worst < 1e-4, worst
    assert await got.vector_store.count() == sum(len(c) for c in want.values())
    for query in QUERIES:
        ranked_a = await expected.search(query, top_k=10, mode="bm25")
        ranked_b = await got.search(query, top_k=10, mode="bm25")
        assert [(r.chunk_id, r.score) for r in ranked_b.results] == [
            (r.chunk_id, r.score) for r in ranked_a.results
        ]
    report = await got.verify_all()
    assert report.ok, report.problems[:3]
    assert report.verified == sum(len(c) for c in want.values())
