"""Settings and helpers that several parts of the hybrid benchmark share."""

from __future__ import annotations

import time

from evals.bench_util import logger
from evals.hybrid.embedders import HashEmbedder
from groundkit import Collection, RetrievalConfig
from groundkit.retrieval import Retriever

__all__ = [
    "BATCH_SIZE",
    "RECALL_TARGET",
    "WARMUP_QUERIES",
    "WARMUP_TEXT",
    "log",
    "open_retriever",
]

# Texts per model call, for both SentenceTransformer.encode and the embedder.
BATCH_SIZE = 64
WARMUP_TEXT = "A warm-up sentence so that model loading is not timed."
# Untimed queries before each timed loop.
WARMUP_QUERIES = 5
# Recall@10 against exact search: groundkit's vector store defaults and hybrid must
# reach it, and the equal-recall anchor is tuned to it.
RECALL_TARGET = 0.95

log = logger("bench_hybrid")


async def open_retriever(col: Collection, embedder: HashEmbedder) -> tuple[Retriever, float]:
    """A Retriever over ``col`` with its vector store, and the seconds ``Retriever.open`` took."""
    assert col.vector_store is not None
    started = time.perf_counter()
    retriever = await Retriever.open(
        col.store, RetrievalConfig(), embedder=embedder, vector_store=col.vector_store
    )
    return retriever, time.perf_counter() - started
