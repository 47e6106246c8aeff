"""Fusing several rankings into one.

Two methods: reciprocal-rank fusion (rank-only, robust to incomparable score
scales) and a convex combination of min-max-normalised scores, which measured
better on SciFact (see ``../shared/notes/quality-notes.md``). Both dedupe by
key, apply their weights, expose the fused score and break ties on the key
itself, so the same inputs always give the same order.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from groundkit.errors import ConfigurationError

__all__ = ["FusedHit", "convex_combination", "reciprocal_rank_fusion"]

K = TypeVar("K", bound=Hashable)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class FusedHit(Generic[K]):
    """A fused result: its key, fused score, and 1-based rank in each input (None if absent)."""

    key: K
    score: float
    ranks: tuple[int | None, ...]


def _weights(n: int, weights: Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * n
    if len(weights) != n:
        raise ConfigurationError(f"{len(weights)} weights for {n} rankings")
    out = [float(w) for w in weights]
    if any(not math.isfinite(w) or w < 0 for w in out) or not any(out):
        raise ConfigurationError("fusion weights must be finite, >= 0, and not all zero")
    return out


def _listed(items: Iterable[_T]) -> Sequence[_T]:
    """``items`` as a sequence, read once: a caller may pass any iterable."""
    return items if isinstance(items, list | tuple) else list(items)


def _first_ranks(ranking: Sequence[K]) -> dict[K, int]:
    ranks = dict(zip(ranking, range(1, len(ranking) + 1), strict=True))  # in C
    if len(ranks) < len(ranking):  # a repeated key keeps its best (first) rank
        ranks = {}
        for position, key in enumerate(ranking, start=1):
            ranks.setdefault(key, position)
    return ranks


def _best_first(item: tuple[K, float]) -> tuple[float, K]:
    return -item[1], item[0]


def _with_ranks(order: list[tuple[K, float]], ranks: list[dict[K, int]]) -> list[FusedHit[K]]:
    if len(ranks) == 2:  # hybrid's case, spelt out: no generator per hit
        first, second = ranks
        return [FusedHit(key, score, (first.get(key), second.get(key))) for key, score in order]
    return [FusedHit(key, score, tuple([r.get(key) for r in ranks])) for key, score in order]


def reciprocal_rank_fusion(
    rankings: Sequence[Iterable[K]],
    *,
    k: int = 60,
    weights: Sequence[float] | None = None,
) -> list[FusedHit[K]]:
    """``score(d) = Σ w_i / (k + rank_i(d))`` over the rankings that contain ``d``."""
    w = _rrf_weights(k, len(rankings), weights)
    ranks = [_first_ranks(_listed(r)) for r in rankings]
    return _with_ranks(_rrf(ranks, k, w), ranks)


def rrf_scores(
    rankings: Sequence[Iterable[K]],
    *,
    k: int = 60,
    weights: Sequence[float] | None = None,
) -> list[tuple[K, float]]:
    """``reciprocal_rank_fusion``'s keys and scores, in its order, without its hits' ranks."""
    w = _rrf_weights(k, len(rankings), weights)
    return _rrf([_first_ranks(_listed(r)) for r in rankings], k, w)


def _rrf_weights(k: int, n: int, weights: Sequence[float] | None) -> list[float]:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigurationError(f"rrf k must be a positive integer, got {k!r}")
    return _weights(n, weights)


def _rrf(ranks: list[dict[K, int]], k: int, w: list[float]) -> list[tuple[K, float]]:
    scores: dict[K, float] = {}
    for weight, table in zip(w, ranks, strict=True):
        for key, rank in table.items():
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=_best_first)


def convex_combination(
    scored: Sequence[Iterable[tuple[K, float]]],
    *,
    weights: Sequence[float] | None = None,
) -> list[FusedHit[K]]:
    """``score(d) = Σ w_i · minmax_i(s_i(d))``; a list missing ``d`` contributes 0.

    Each input is a ranking of ``(key, score)``, best first. A list whose
    scores are all equal normalises to 1 for every member.
    """
    w = _weights(len(scored), weights)
    lists = [_listed(lst) for lst in scored]
    ranks = [_first_ranks([key for key, _ in lst]) for lst in lists]
    return _with_ranks(_convex(lists, w), ranks)


def convex_scores(
    scored: Sequence[Iterable[tuple[K, float]]],
    *,
    weights: Sequence[float] | None = None,
) -> list[tuple[K, float]]:
    """``convex_combination``'s keys and scores, in its order, without its hits' ranks:
    hybrid search reads only these, on every query."""
    w = _weights(len(scored), weights)
    return _convex([_listed(lst) for lst in scored], w)


def _convex(lists: list[Sequence[tuple[K, float]]], w: list[float]) -> list[tuple[K, float]]:
    total = sum(w)
    fused: dict[K, float] = {}
    for weight, lst in zip(w, lists, strict=True):
        if len(lst) == 0:
            continue
        if not all(map(math.isfinite, [value for _, value in lst])):
            raise ConfigurationError("cannot fuse a non-finite score")
        best = dict(lst)
        if len(best) < len(lst):  # a repeated key keeps its best score
            best = {}
            for key, value in lst:
                if key not in best or value > best[key]:
                    best[key] = value
        low, high = min(best.values()), max(best.values())
        span = high - low
        for key, value in best.items():
            norm = (value - low) / span if span > 0 else 1.0
            fused[key] = fused.get(key, 0.0) + weight * norm / total
    return sorted(fused.items(), key=_best_first)
