"""Diversifying and arranging a ranked list.

Maximal Marginal Relevance (MMR) gives up a little relevance for coverage: after
the best passage it prefers ones unlike those already picked, so five
near-duplicate chunks of one paragraph do not crowd out the second source.
Similarity comes from embeddings (:func:`cosine_similarity`) or, when results
carry no vectors, from term overlap (:func:`term_similarity`).

:func:`lost_in_the_middle` is for building LLM prompts, not for ranking
quality: models attend least to the middle of a long context, so it moves the
strongest passages to both ends and the weakest to the middle.

Everything here is pure and deterministic; ties go to the earlier rank.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from groundkit.errors import ConfigurationError

__all__ = ["cosine_similarity", "lost_in_the_middle", "mmr_order", "term_similarity"]

T = TypeVar("T")

FloatArray = npt.NDArray[np.float64]


def _lambda(lambda_: float) -> float:
    if isinstance(lambda_, bool) or not isinstance(lambda_, int | float | np.integer | np.floating):
        raise ConfigurationError(f"MMR lambda_ must be a number in [0, 1], got {lambda_!r}")
    value = float(lambda_)
    if not 0.0 <= value <= 1.0:  # also refuses NaN
        raise ConfigurationError(
            f"MMR lambda_ must be in [0, 1] (1 = pure relevance, 0 = pure diversity), "
            f"got {lambda_!r}"
        )
    return value


def _k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 0:
        raise ConfigurationError(f"MMR k must be an integer >= 0, got {k!r}")
    return int(k)


def _normalised(relevance: Sequence[float]) -> FloatArray:
    rel = np.asarray(relevance, dtype=np.float64).reshape(-1)
    if rel.size == 0:
        return rel
    if not np.all(np.isfinite(rel)):
        raise ConfigurationError("MMR relevance scores must be finite")
    lo, hi = float(rel.min()), float(rel.max())
    if hi == lo:
        return np.ones_like(rel)
    if not math.isfinite(hi - lo):  # the span overflows: halve everything first
        return (rel / 2 - lo / 2) / (hi / 2 - lo / 2)
    return (rel - lo) / (hi - lo)


def mmr_order(
    relevance: Sequence[float],
    similarity: npt.NDArray[np.floating[Any]],
    *,
    lambda_: float,
    k: int,
) -> list[int]:
    """Up to ``k`` indices into ``relevance``, in Maximal Marginal Relevance order.

    ``relevance`` is best first with ties already broken; it is min-max
    normalised to [0, 1] (all equal -> all 1.0). ``similarity`` is the n×n
    pairwise similarity, clipped to [0, 1]. Each step picks the candidate
    maximising ``lambda_ * rel[i] - (1 - lambda_) * max(sim[i, j] for j picked)``,
    the lower index winning a tie. ``lambda_ = 1`` is the ranked order itself.
    """
    lam = _lambda(lambda_)
    limit = _k(k)
    rel = _normalised(relevance)
    n = rel.size
    sim = np.asarray(similarity, dtype=np.float64)
    if sim.shape != (n, n):
        raise ConfigurationError(
            f"MMR similarity must be {n}×{n} for {n} candidates, got shape {sim.shape}"
        )
    if not np.all(np.isfinite(sim)):
        raise ConfigurationError("MMR similarity must be finite")
    take = min(limit, n)
    if lam == 1.0:
        return list(range(take))
    sim = np.clip(sim, 0.0, 1.0)
    gain = lam * rel
    penalty = 1.0 - lam
    max_sim = np.zeros(n, dtype=np.float64)  # max similarity to anything picked so far
    picked = np.zeros(n, dtype=bool)
    order: list[int] = []
    for _ in range(take):
        score = gain - penalty * max_sim
        score[picked] = -np.inf
        best = int(np.argmax(score))  # argmax returns the first maximum: the earlier rank
        order.append(best)
        picked[best] = True
        np.maximum(max_sim, sim[:, best], out=max_sim)
    return order


def cosine_similarity(vectors: npt.NDArray[np.floating[Any]]) -> FloatArray:
    """Pairwise cosine similarity of the rows of ``vectors``, clipped to [0, 1].

    Rows are L2-normalised (an all-zero row stays zero, so it is similar to
    nothing); the result is float64, exactly symmetric, with a diagonal of 1.0.
    """
    v = np.asarray(vectors, dtype=np.float64)
    if v.ndim != 2:
        raise ConfigurationError(f"vectors must be a 2-D array (n × dim), got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ConfigurationError("vectors must be finite")
    scale = np.max(np.abs(v), axis=1, keepdims=True)  # guards the norm against overflow
    scale[scale == 0.0] = 1.0
    v = v / scale
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0
    unit = v / norms
    raw = unit @ unit.T
    sim: FloatArray = np.clip((raw + raw.T) / 2.0, 0.0, 1.0)  # exactly symmetric
    np.fill_diagonal(sim, 1.0)
    return sim


def term_similarity(term_sets: Sequence[Collection[str]]) -> FloatArray:
    """Pairwise Jaccard overlap of term sets: the fallback when results have no vectors.

    Two empty sets share nothing (0.0); the diagonal is 1.0.
    """
    sets = [frozenset(terms) for terms in term_sets]
    n = len(sets)
    vocabulary: dict[str, int] = {}
    for terms in sets:
        for term in sorted(terms):
            vocabulary.setdefault(term, len(vocabulary))
    # One incidence matrix and a product: intersections for every pair at once.
    incidence = np.zeros((n, max(1, len(vocabulary))), dtype=np.float64)
    for row, terms in enumerate(sets):
        incidence[row, [vocabulary[t] for t in terms]] = 1.0
    shared = incidence @ incidence.T
    sizes = np.array([len(t) for t in sets], dtype=np.float64)
    union = sizes[:, None] + sizes[None, :] - shared
    sim: FloatArray = np.divide(shared, union, out=np.zeros_like(shared), where=union > 0)
    np.fill_diagonal(sim, 1.0)
    return sim


def lost_in_the_middle(items: Sequence[T]) -> list[T]:
    """Reorder best-first ``items`` so the strongest sit at both ends, the weakest mid-way.

    Rank 1 goes first, rank 2 last, rank 3 second, rank 4 second-to-last, and so
    on. For building prompts only; a list of two or fewer is returned as is.
    """
    ordered = list(items)
    return ordered[0::2] + ordered[1::2][::-1]
