"""The opt-in steps a search can take after ranking, in one fixed order.

Query variants are searched and fused first (RRF, original query first), then
the cross-encoder (if asked) reorders, then the steps here: passages around the
results (``expand``), diversity (``mmr``), the cut to ``top_k``, and last the
prompt-friendly reorder. Every step is deterministic: equal inputs give equal
outputs, and ties fall back on the order the ranking already fixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from groundkit.config import RetrievalConfig
from groundkit.contracts import ContextKind, RetrievalResult, with_fused
from groundkit.errors import GroundkitError, RetrievalError, StorageError
from groundkit.lexical.analyzer import Analyzer
from groundkit.providers import checked
from groundkit.providers.protocols import EmbeddingProtocol
from groundkit.retrieval.context import expand_results
from groundkit.retrieval.diversity import (
    cosine_similarity,
    lost_in_the_middle,
    mmr_order,
    term_similarity,
)
from groundkit.retrieval.fusion import reciprocal_rank_fusion
from groundkit.retrieval.request import MAX_QUERY_CHARS, REORDERS, Reorder, SearchRequest
from groundkit.retrieval.rewriting import QueryRewriterProtocol, queries_for
from groundkit.storage.protocols import MetadataStoreProtocol, VectorStoreProtocol
from groundkit.utils.hashing import sha256_text
from groundkit.utils.text import describe_unencodable

__all__ = [
    "NO_STEPS",
    "REORDERS",
    "Reorder",
    "Steps",
    "fuse_rankings",
    "postprocess",
    "rewritten",
]


@dataclass(frozen=True, slots=True)
class Steps:
    """Which post-ranking steps one search takes."""

    expand: ContextKind | None = None
    mmr: float | None = None
    reorder: Reorder | None = None
    rewrite: bool = False

    @classmethod
    def of(cls, request: SearchRequest) -> Steps:
        """The steps ``request`` asks for (its options were checked when it was made)."""
        return cls(request.expand, request.mmr, request.reorder, request.rewrite)

    @property
    def any(self) -> bool:
        """True when a step after ranking runs."""
        return self.expand is not None or self.mmr is not None or self.reorder is not None

    @property
    def widens(self) -> bool:
        """True when a step chooses among more candidates than it returns."""
        return self.expand is not None or self.mmr is not None

    @property
    def names(self) -> list[str]:
        """The steps taken, as the response metadata names them."""
        out = ["rewrite"] if self.rewrite else []
        if self.expand is not None:
            out.append(f"expand:{self.expand}")
        if self.mmr is not None:
            out.append(f"mmr:{self.mmr:g}")
        if self.reorder is not None:
            out.append(f"reorder:{self.reorder}")
        return out


NO_STEPS = Steps()


async def rewritten(rewriter: QueryRewriterProtocol, query: str, limit: int) -> list[str]:
    """The queries searched: ``query`` first, then up to ``limit`` distinct variants.

    A rewriter is application code: whatever it raises or returns wrongly is a
    ``RetrievalError`` naming it, never its own exception.
    """
    name = getattr(rewriter, "identity", type(rewriter).__name__)
    try:
        variants = await rewriter.rewrite(query)
    except GroundkitError:
        raise
    except Exception as exc:
        raise RetrievalError(f"query rewriter {name!r} failed: {exc}") from None
    if not isinstance(variants, list | tuple) or not all(isinstance(v, str) for v in variants):
        raise RetrievalError(f"query rewriter {name!r} must return a list of strings")
    searched = queries_for(query, list(variants), limit)
    # A variant is searched like a query, so it is held to the query's rules.
    for position, variant in enumerate(searched[1:], start=1):
        problem = describe_unencodable(variant, f"variant {position}")
        if problem is None and len(variant) > MAX_QUERY_CHARS:
            problem = f"variant {position} is longer than {MAX_QUERY_CHARS} characters"
        if problem is not None:
            raise RetrievalError(f"query rewriter {name!r} returned a bad query: {problem}")
    return searched


def fuse_rankings(
    rankings: Sequence[Sequence[RetrievalResult]], k: int, rrf_k: int
) -> list[RetrievalResult]:
    """Rankings of several queries fused by RRF; each chunk keeps the result (and
    highlights) of the first ranking that found it, with the fused score."""
    first: dict[str, RetrievalResult] = {}
    for ranking in rankings:
        for result in ranking:
            first.setdefault(result.chunk_id, result)
    fused = reciprocal_rank_fusion([[r.chunk_id for r in ranking] for ranking in rankings], k=rrf_k)
    return [
        first[hit.key].model_copy(
            update={"score": hit.score, "scores": with_fused(first[hit.key].scores, hit.score)}
        )
        for hit in fused[:k]
    ]


async def postprocess(
    results: list[RetrievalResult],
    steps: Steps,
    *,
    top_k: int,
    store: MetadataStoreProtocol,
    config: RetrievalConfig,
    analyzer: Analyzer,
    embedder: EmbeddingProtocol | None,
    vectors: VectorStoreProtocol | None = None,
) -> list[RetrievalResult]:
    """``results`` (best first) after the steps, at most ``top_k`` of them."""
    if steps.expand is not None:
        results = await expand_results(
            results,
            store,
            kind=steps.expand,
            # With MMR to follow, every uncollapsed candidate is kept for it to choose from.
            top_k=len(results) if steps.mmr is not None else top_k,
            window=config.context_window,
            max_chars=config.context_max_chars,
        )
    if steps.mmr is not None and len(results) > 1:
        texts = [r.context.content if r.context else r.content for r in results]
        if embedder is not None:
            similarity = cosine_similarity(await _vectors_of(texts, embedder, vectors))
        else:
            similarity = term_similarity([frozenset(analyzer.terms(t)) for t in texts])
        order = mmr_order([r.score for r in results], similarity, lambda_=steps.mmr, k=top_k)
        results = [results[i] for i in order]
    results = results[:top_k]
    if steps.reorder == "lost-in-the-middle":
        results = lost_in_the_middle(results)
    return results


async def _vectors_of(
    texts: Sequence[str], embedder: EmbeddingProtocol, vectors: VectorStoreProtocol | None
) -> npt.NDArray[np.float32]:
    """A vector per text: the stored one where the collection embedded exactly this text
    at ingest (found by its hash, as the ingest reuses vectors), the others embedded in
    one call. Reading fifty stored vectors costs a lookup, not fifty passes of the model."""
    hashes = [sha256_text(t) for t in texts]
    text_of = dict(zip(hashes, texts, strict=True))  # one text per hash, in order
    found: dict[str, npt.NDArray[np.float32]] = {}
    if vectors is not None:
        try:
            found = dict(await vectors.vectors_by_content(list(text_of)))
        except StorageError:
            found = {}  # the model gives the same vectors, only slower
    missing = [h for h in text_of if h not in found]
    if missing:
        rows = await checked.documents(embedder, [text_of[h] for h in missing], for_query=True)
        found.update(zip(missing, rows, strict=True))
    return np.stack([np.asarray(found[h], dtype=np.float32) for h in hashes])
