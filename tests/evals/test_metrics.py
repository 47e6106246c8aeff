"""evals.metrics against hand-computed values and against pytrec_eval."""

from __future__ import annotations

import math
import random

import pytest

from evals.metrics import (
    average_precision,
    evaluate,
    mrr,
    ndcg,
    paired_randomization_test,
    rank_by_score,
    recall,
)

pytrec_eval = pytest.importorskip("pytrec_eval")

# trec_eval measure for each of ours; MRR is recip_rank on a ranking cut at k.
_TREC = {"ndcg": "ndcg_cut_{k}", "recall": "recall_{k}", "map": "map_cut_{k}"}


def _trec_scores(ranking: list[str]) -> dict[str, float]:
    """Strictly decreasing scores, so trec_eval keeps our order."""
    return {doc: float(len(ranking) - i) for i, doc in enumerate(ranking)}


def _pytrec(
    qrels: dict[str, dict[str, int]], rankings: dict[str, list[str]], metric: str, k: int
) -> dict[str, float]:
    if metric == "mrr":
        run = {q: _trec_scores(r[:k]) for q, r in rankings.items()}
        measure, key = "recip_rank", "recip_rank"
    else:
        run = {q: _trec_scores(r) for q, r in rankings.items()}
        base = _TREC[metric].split("_{k}")[0]
        measure, key = f"{base}.{k}", _TREC[metric].format(k=k)
    out = pytrec_eval.RelevanceEvaluator(qrels, {measure}).evaluate(run)
    return {q: v[key] for q, v in out.items()}


def test_hand_computed_case() -> None:
    # Relevant: d1 (grade 2), d3 (grade 1), d9 (grade 1, never retrieved).
    qrel = {"d1": 2, "d3": 1, "d9": 1, "d4": 0}
    ranking = ["d2", "d1", "d4", "d3", "d5"]
    dcg = 2 / math.log2(3) + 1 / math.log2(5)
    idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg(ranking, qrel, 5) == pytest.approx(dcg / idcg)
    assert ndcg(ranking, qrel, 1) == 0.0
    assert recall(ranking, qrel, 5) == pytest.approx(2 / 3)
    assert recall(ranking, qrel, 2) == pytest.approx(1 / 3)
    assert mrr(ranking, qrel, 5) == pytest.approx(0.5)
    assert mrr(ranking, qrel, 1) == 0.0
    assert average_precision(ranking, qrel, 5) == pytest.approx((1 / 2 + 2 / 4) / 3)
    assert average_precision(ranking, qrel, 3) == pytest.approx((1 / 2) / 3)


def test_perfect_and_empty_rankings() -> None:
    qrel = {"a": 1, "b": 1}
    assert ndcg(["a", "b", "x"], qrel, 10) == pytest.approx(1.0)
    assert ndcg([], qrel, 10) == 0.0
    assert recall([], qrel, 10) == 0.0
    with pytest.raises(ValueError):
        ndcg(["a"], qrel, 0)


def test_evaluate_counts_missing_queries_as_zero() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}}
    report = evaluate(qrels, {"q1": ["a"]}, [("ndcg", 10), ("recall", 100)])
    assert report.queries == 2  # q3 has nothing relevant and is left out
    assert report.means["ndcg@10"] == pytest.approx(0.5)
    assert report.per_query["q2"]["recall@100"] == 0.0


def test_rank_by_score_breaks_ties_like_trec_eval() -> None:
    assert rank_by_score({"a": 1.0, "c": 1.0, "b": 2.0}) == ["b", "c", "a"]
    qrels = {"q": {"a": 1}}
    run = {"q": {"a": 1.0, "c": 1.0, "b": 2.0}}
    ours = ndcg(rank_by_score(run["q"]), qrels["q"], 2)
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.2"}).evaluate(run)
    assert ours == pytest.approx(theirs["q"]["ndcg_cut_2"])


def _random_case(rng: random.Random) -> tuple[dict[str, dict[str, int]], dict[str, list[str]]]:
    docs = [f"d{i:03d}" for i in range(rng.randint(5, 150))]
    qrels: dict[str, dict[str, int]] = {}
    rankings: dict[str, list[str]] = {}
    for q in range(rng.randint(1, 12)):
        qid = f"q{q}"
        judged = rng.sample(docs, rng.randint(1, min(30, len(docs))))
        qrel = {d: rng.choice((0, 1, 1, 2, 3)) for d in judged}
        if not any(g > 0 for g in qrel.values()):
            qrel[judged[0]] = 1
        qrels[qid] = qrel
        rankings[qid] = rng.sample(docs, rng.randint(1, len(docs)))
    return qrels, rankings


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize(
    ("metric", "k"),
    [
        ("ndcg", 1),
        ("ndcg", 5),
        ("ndcg", 10),
        ("recall", 10),
        ("recall", 100),
        ("mrr", 10),
        ("map", 10),
        ("map", 100),
    ],
)
def test_matches_pytrec_eval_on_random_runs(seed: int, metric: str, k: int) -> None:
    qrels, rankings = _random_case(random.Random(seed * 7919 + k))
    theirs = _pytrec(qrels, rankings, metric, k)
    report = evaluate(qrels, rankings, [(metric, k)])
    assert set(report.per_query) == set(theirs)
    for qid, value in theirs.items():
        assert report.per_query[qid][f"{metric}@{k}"] == pytest.approx(value, abs=1e-9), qid


def test_paired_randomization_test() -> None:
    same = [0.1, 0.5, 0.9, 0.3]
    assert paired_randomization_test(same, same, trials=200) == pytest.approx(1.0)
    better = [1.0] * 30
    worse = [0.0] * 30
    assert paired_randomization_test(better, worse, trials=2000) < 0.01
    with pytest.raises(ValueError):
        paired_randomization_test([1.0], [1.0, 2.0])
