"""Fusing several rankings into one.

Two methods: reciprocal-rank fusion (rank-only, robust to incomparable score
scales) and a convex combination of min-max-normalised scores, which measured
better on SciFact (see ``../shared/notes/quality-notes.md``). Both dedupe by
key, apply their weights, expose the fused score and break ties on the key
itself, so the same inputs always give the same order.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from groundkit.errors import ConfigurationError

__all__ = ["FusedHit", "convex_combination", "reciprocal_rank_fusion"]

K = TypeVar("K", bound=Hashable)


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


def _first_ranks(ranking: Sequence[K]) -> dict[K, int]:
    ranks: dict[K, int] = {}
    for position, key in enumerate(ranking, start=1):
        ranks.setdefault(key, position)  # a repeated key keeps its best rank
    return ranks


def _ordered(scores: dict[K, float], ranks: list[dict[K, int]]) -> list[FusedHit[K]]:
    order = sorted(scores, key=lambda key: (-scores[key], key))
    return [FusedHit(key, scores[key], tuple(r.get(key) for r in ranks)) for key in order]


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[K]],
    *,
    k: int = 60,
    weights: Sequence[float] | None = None,
) -> list[FusedHit[K]]:
    """``score(d) = Σ w_i / (k + rank_i(d))`` over the rankings that contain ``d``."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigurationError(f"rrf k must be a positive integer, got {k!r}")
    w = _weights(len(rankings), weights)
    ranks = [_first_ranks(r) for r in rankings]
    scores: dict[K, float] = {}
    for weight, table in zip(w, ranks, strict=True):
        for key, rank in table.items():
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    return _ordered(scores, ranks)


def convex_combination(
    scored: Sequence[Sequence[tuple[K, float]]],
    *,
    weights: Sequence[float] | None = None,
) -> list[FusedHit[K]]:
    """``score(d) = Σ w_i · minmax_i(s_i(d))``; a list missing ``d`` contributes 0.

    Each input is a ranking of ``(key, score)``, best first. A list whose
    scores are all equal normalises to 1 for every member.
    """
    w = _weights(len(scored), weights)
    total = sum(w)
    ranks = [_first_ranks([key for key, _ in lst]) for lst in scored]
    fused: dict[K, float] = {}
    for weight, lst in zip(w, scored, strict=True):
        best: dict[K, float] = {}
        for key, value in lst:
            if not math.isfinite(value):
                raise ConfigurationError("cannot fuse a non-finite score")
            if key not in best or value > best[key]:
                best[key] = value
        if not best:
            continue
        low, high = min(best.values()), max(best.values())
        span = high - low
        for key, value in best.items():
            norm = (value - low) / span if span > 0 else 1.0
            fused[key] = fused.get(key, 0.0) + weight * norm / total
    return _ordered(fused, ranks)
