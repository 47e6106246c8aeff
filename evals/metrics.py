"""Ranking metrics at a cut-off, computed the way trec_eval computes them.

A *qrel* maps document ids to graded relevance; a grade above zero counts as
relevant. A *ranking* is a list of document ids, best first. Every metric
looks only at the first ``k`` entries of the ranking.

* ``ndcg``: linear gain (the grade itself), ``log2(rank + 1)`` discount, and an
  ideal DCG built from the qrel's relevant documents (not from the ranking),
  as trec_eval's ``ndcg_cut``.
* ``recall``: relevant documents found in the top ``k`` over all relevant.
* ``mrr``: reciprocal rank of the first relevant document in the top ``k``.
* ``average_precision``: trec_eval's ``map_cut``: precision at each relevant
  hit in the top ``k``, summed, over the number of relevant documents.

``evaluate`` averages over every query in the qrels; a query without a
ranking scores zero (trec_eval ``-c``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "METRICS",
    "MetricFn",
    "Qrel",
    "Qrels",
    "Ranking",
    "Report",
    "average_precision",
    "evaluate",
    "mrr",
    "ndcg",
    "paired_randomization_test",
    "rank_by_score",
    "recall",
]

Qrel = Mapping[str, int]
Qrels = Mapping[str, Qrel]
Ranking = Sequence[str]
MetricFn = Callable[[Ranking, Qrel, int], float]


def _relevant_count(qrel: Qrel) -> int:
    return sum(1 for grade in qrel.values() if grade > 0)


def _top(ranking: Ranking, k: int) -> Ranking:
    if k < 1:
        raise ValueError(f"cut-off must be at least 1, got {k}")
    return ranking[:k]


def ndcg(ranking: Ranking, qrel: Qrel, k: int) -> float:
    """Normalised DCG at ``k`` with linear gain (trec_eval ``ndcg_cut.k``)."""
    top = _top(ranking, k)
    ideal_gains = sorted((g for g in qrel.values() if g > 0), reverse=True)[:k]
    if not ideal_gains:
        return 0.0
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal_gains))
    dcg = 0.0
    for i, doc in enumerate(top):
        grade = qrel.get(doc, 0)
        if grade > 0:
            dcg += grade / math.log2(i + 2)
    return dcg / idcg


def recall(ranking: Ranking, qrel: Qrel, k: int) -> float:
    """Share of the relevant documents found in the top ``k`` (trec_eval ``recall.k``)."""
    total = _relevant_count(qrel)
    if total == 0:
        return 0.0
    found = sum(1 for doc in _top(ranking, k) if qrel.get(doc, 0) > 0)
    return found / total


def mrr(ranking: Ranking, qrel: Qrel, k: int) -> float:
    """Reciprocal rank of the first relevant document within the top ``k``."""
    for i, doc in enumerate(_top(ranking, k)):
        if qrel.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def average_precision(ranking: Ranking, qrel: Qrel, k: int) -> float:
    """Average precision cut at ``k`` (trec_eval ``map_cut.k``)."""
    total = _relevant_count(qrel)
    if total == 0:
        return 0.0
    hits = 0
    summed = 0.0
    for i, doc in enumerate(_top(ranking, k)):
        if qrel.get(doc, 0) > 0:
            hits += 1
            summed += hits / (i + 1)
    return summed / total


METRICS: dict[str, MetricFn] = {
    "ndcg": ndcg,
    "recall": recall,
    "mrr": mrr,
    "map": average_precision,
}


def rank_by_score(scores: Mapping[str, float]) -> list[str]:
    """Document ids by descending score, ties by descending id (trec_eval's order)."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]


@dataclass(frozen=True)
class Report:
    """Mean of each metric over the evaluated queries, plus per-query values."""

    means: dict[str, float]
    per_query: dict[str, dict[str, float]]
    queries: int


def evaluate(
    qrels: Qrels,
    rankings: Mapping[str, Ranking],
    measures: Iterable[tuple[str, int]] = (
        ("ndcg", 10),
        ("recall", 100),
        ("mrr", 10),
        ("map", 100),
    ),
) -> Report:
    """Score ``rankings`` against every query in ``qrels`` that has a relevant document.

    ``measures`` are ``(metric name, k)`` pairs; results are keyed ``"name@k"``.
    """
    wanted = [(name, k, METRICS[name]) for name, k in measures]
    per_query: dict[str, dict[str, float]] = {}
    for qid, qrel in qrels.items():
        if _relevant_count(qrel) == 0:
            continue
        ranking = rankings.get(qid, ())
        per_query[qid] = {f"{name}@{k}": fn(ranking, qrel, k) for name, k, fn in wanted}
    n = len(per_query)
    means = {
        f"{name}@{k}": (sum(v[f"{name}@{k}"] for v in per_query.values()) / n if n else 0.0)
        for name, k, _ in wanted
    }
    return Report(means=means, per_query=per_query, queries=n)


def paired_randomization_test(
    a: Sequence[float], b: Sequence[float], *, trials: int = 10_000, seed: int = 0
) -> float:
    """Two-sided p-value that paired per-query scores ``a`` and ``b`` have equal means.

    Sign-flip permutation test (Smucker, Allan & Carterette, CIKM 2007): each
    trial swaps every pair with probability 1/2.
    """
    if len(a) != len(b):
        raise ValueError("paired samples must have the same length")
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    if not diffs:
        return 1.0
    observed = abs(sum(diffs))
    rng = random.Random(seed)
    extreme = 0
    for _ in range(trials):
        total = sum(d if rng.random() < 0.5 else -d for d in diffs)
        if abs(total) >= observed - 1e-12:
            extreme += 1
    return (extreme + 1) / (trials + 1)
