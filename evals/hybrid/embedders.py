"""Embedders for the benchmarks: hashed vectors, and two wrappers used only for timing.

``HashEmbedder`` gives the synthetic collections vectors in microseconds per
text (real vector-search cost, meaningless ranking); ``evals.ann_sweep``,
``evals.vector_costs`` and ``evals.bench_filters`` reuse it. ``MiniLMQueryEmbedder``
keeps its identity but embeds queries with the real MiniLM; ``ReplayEmbedder``
hands back vectors computed earlier, so an ingest can be profiled without the model.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from groundkit import SentenceTransformerEmbedder

__all__ = ["HashEmbedder", "MiniLMQueryEmbedder", "ReplayEmbedder"]

_TOKEN = re.compile(r"\w+")


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
