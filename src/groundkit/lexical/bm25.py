"""In-memory BM25 over term statistics persisted at ingest.

Opening does no tokenising: chunks' term ids and frequencies are read back from
the store and laid out as a term-major sparse matrix of precomputed BM25
weights (Lucene's idf and length normalisation, exact ``k1``/``b``). A query
sums the posting columns of its terms with numpy and selects the top-k; ties
break on canonical position, which is ``(content_hash, chunk_index,
document_id)`` order. See adr/0002-bm25-engine.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from groundkit.lexical.protocols import LexicalHit, PostingsBatch, PostingsSource

__all__ = ["BM25Index"]


class BM25Index:
    """Term-major BM25 weight matrix for one store snapshot (``LexicalIndexProtocol``)."""

    def __init__(
        self,
        *,
        keys: npt.NDArray[np.int64],
        indptr: npt.NDArray[np.int64],
        rows: npt.NDArray[np.int32],
        weights: npt.NDArray[np.float32],
        vocabulary: dict[str, int],
    ) -> None:
        self._keys = keys
        self._indptr = indptr
        self._rows = rows
        self._weights = weights
        self._vocab = vocabulary

    @property
    def size(self) -> int:
        return int(self._keys.shape[0])

    @property
    def keys(self) -> npt.NDArray[np.int64]:
        return self._keys

    @classmethod
    async def from_store(
        cls, store: PostingsSource, *, k1: float = 1.5, b: float = 0.75
    ) -> BM25Index:
        batches = [batch async for batch in store.iter_postings()]
        # Read after the postings: the vocabulary only grows, so it covers them.
        vocabulary = await store.vocabulary()
        return cls.from_postings(batches, vocabulary, k1=k1, b=b)

    @classmethod
    def from_postings(
        cls,
        batches: Sequence[PostingsBatch],
        vocabulary: dict[str, int],
        *,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> BM25Index:
        n_terms = (max(vocabulary.values()) + 1) if vocabulary else 0
        if not batches:
            return cls._empty(vocabulary, n_terms)
        keys = np.concatenate([p.keys for p in batches])
        term_ids = np.concatenate([p.term_ids for p in batches])
        tfs = np.concatenate([p.tfs for p in batches]).astype(np.float32)
        counts = np.concatenate([np.diff(p.offsets) for p in batches])
        n_docs = int(keys.shape[0])
        if n_docs == 0:
            return cls._empty(vocabulary, n_terms)
        if term_ids.size:
            n_terms = max(n_terms, int(term_ids.max()) + 1)

        entry_row = np.repeat(np.arange(n_docs, dtype=np.int32), counts)
        lengths = np.bincount(entry_row, weights=tfs, minlength=n_docs).astype(np.float32)
        avg_len = float(lengths.mean()) or 1.0
        df = np.bincount(term_ids, minlength=n_terms).astype(np.float64)
        idf = np.log1p((n_docs - df + 0.5) / (df + 0.5)).astype(np.float32)

        norm = (k1 * (1.0 - b + b * lengths / avg_len)).astype(np.float32)
        weights = idf[term_ids] * tfs / (tfs + norm[entry_row])
        del tfs

        order = np.argsort(term_ids, kind="stable")
        indptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(df.astype(np.int64), out=indptr[1:])
        return cls(
            keys=keys,
            indptr=indptr,
            rows=entry_row[order],
            weights=weights[order].astype(np.float32, copy=False),
            vocabulary=vocabulary,
        )

    @classmethod
    def _empty(cls, vocabulary: dict[str, int], n_terms: int) -> BM25Index:
        return cls(
            keys=np.zeros(0, dtype=np.int64),
            indptr=np.zeros(n_terms + 1, dtype=np.int64),
            rows=np.zeros(0, dtype=np.int32),
            weights=np.zeros(0, dtype=np.float32),
            vocabulary=vocabulary,
        )

    def search(
        self,
        query_terms: Sequence[str],
        top_k: int,
        *,
        score_threshold: float | None = None,
        mask: npt.NDArray[np.bool_] | None = None,
    ) -> list[LexicalHit]:
        if top_k < 1 or self.size == 0:
            return []
        if mask is not None and mask.shape != (self.size,):
            raise ValueError(f"mask has shape {mask.shape}, expected ({self.size},)")
        n_terms = self._indptr.shape[0] - 1
        vocab = self._vocab
        wanted = Counter(vocab[t] for t in query_terms if t in vocab and vocab[t] < n_terms)
        if not wanted:
            return []
        # One bincount over the query terms' posting slices (in term-id order, so
        # the float sums are the same every time) instead of a scatter per term.
        slices = [(t, int(self._indptr[t]), int(self._indptr[t + 1])) for t in sorted(wanted)]
        rows = np.concatenate([self._rows[s:e] for _, s, e in slices])
        if rows.size == 0:
            return []
        weights = np.concatenate(
            [
                self._weights[s:e] if wanted[t] == 1 else self._weights[s:e] * np.float32(wanted[t])
                for t, s, e in slices
            ]
        )
        scores = np.bincount(rows, weights=weights, minlength=self.size).astype(np.float32)
        # A boolean mask lists candidates several times faster than nonzero() on
        # floats; partitioning the whole score array instead degrades on zeros.
        if score_threshold is not None and score_threshold > 0:
            matched = scores >= score_threshold
        else:
            matched = scores > 0
        if mask is not None:
            matched &= mask  # before the cut: filtered-out chunks never take a place
        candidates = np.flatnonzero(matched)
        if candidates.size == 0:
            return []
        cand_scores = scores[candidates]
        if candidates.size > top_k:
            cut = candidates.size - top_k
            kth = np.partition(cand_scores, cut)[cut]
            keep = cand_scores >= kth  # keeps every tie at the cut for a stable choice
            candidates, cand_scores = candidates[keep], cand_scores[keep]
        order = np.lexsort((candidates, -cand_scores))[:top_k]
        keys = self._keys[candidates[order]].tolist()
        values = cand_scores[order].tolist()
        return [LexicalHit(key=k, score=v) for k, v in zip(keys, values, strict=True)]
