"""Fusion: the formulas, dedupe, weights, determinism, and the failure cases."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit.errors import ConfigurationError
from groundkit.retrieval.fusion import (
    convex_combination,
    convex_scores,
    reciprocal_rank_fusion,
    rrf_scores,
)

keys = st.text(alphabet="abcdefgh", min_size=1, max_size=3)
ranking = st.lists(keys, max_size=12)


def test_rrf_matches_the_formula() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "a"]], k=10)
    expected = {"a": 1 / 11 + 1 / 12, "b": 1 / 12, "c": 1 / 13 + 1 / 11}
    assert {h.key: h.score for h in fused} == pytest.approx(expected)
    assert [h.key for h in fused] == ["a", "c", "b"]
    assert fused[0].ranks == (1, 2)
    assert fused[2].ranks == (2, None)


def test_rrf_weights_change_the_order() -> None:
    lists = [["a", "b"], ["b", "a"]]
    assert next(h.key for h in reciprocal_rank_fusion(lists, weights=[2.0, 1.0])) == "a"
    assert next(h.key for h in reciprocal_rank_fusion(lists, weights=[1.0, 2.0])) == "b"


def test_rrf_k_is_honoured() -> None:
    small = reciprocal_rank_fusion([["a", "b"]], k=1)
    large = reciprocal_rank_fusion([["a", "b"]], k=1000)
    assert small[0].score == pytest.approx(1 / 2)
    assert large[0].score == pytest.approx(1 / 1001)


def test_duplicates_keep_their_best_rank() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "a"]], k=60)
    assert [h.key for h in fused] == ["a", "b"]
    assert fused[0].score == pytest.approx(1 / 61)


def test_ties_break_on_the_key() -> None:
    fused = reciprocal_rank_fusion([["b", "a"], ["a", "b"]])
    assert fused[0].score == fused[1].score
    assert [h.key for h in fused] == ["a", "b"]


@pytest.mark.parametrize("k", [0, -1, True, 2.5])
def test_bad_k_is_refused(k: object) -> None:
    with pytest.raises(ConfigurationError, match="k"):
        reciprocal_rank_fusion([["a"]], k=k)  # type: ignore[arg-type]


@pytest.mark.parametrize("weights", [[1.0], [1.0, -1.0], [0.0, 0.0], [math.nan, 1.0]])
def test_bad_weights_are_refused(weights: list[float]) -> None:
    with pytest.raises(ConfigurationError):
        reciprocal_rank_fusion([["a"], ["b"]], weights=weights)


def test_convex_combination_normalises_each_list() -> None:
    bm25 = [("a", 12.0), ("b", 6.0), ("c", 2.0)]
    dense = [("c", 0.9), ("a", 0.5)]
    fused = {h.key: h.score for h in convex_combination([bm25, dense], weights=[0.7, 0.3])}
    assert fused["a"] == pytest.approx(0.7 * 1.0 + 0.3 * 0.0)
    assert fused["b"] == pytest.approx(0.7 * 0.4)
    assert fused["c"] == pytest.approx(0.7 * 0.0 + 0.3 * 1.0)


def test_convex_combination_flat_list_and_bad_score() -> None:
    fused = convex_combination([[("a", 3.0), ("b", 3.0)]])
    assert [h.score for h in fused] == [1.0, 1.0]
    with pytest.raises(ConfigurationError):
        convex_combination([[("a", math.inf)]])


@given(st.lists(ranking, min_size=1, max_size=4), st.integers(min_value=1, max_value=100))
def test_rrf_invariants(lists: list[list[str]], k: int) -> None:
    fused = reciprocal_rank_fusion(lists, k=k)
    keys_out = [h.key for h in fused]
    assert len(keys_out) == len(set(keys_out))
    assert set(keys_out) == {key for lst in lists for key in lst}
    assert all(h.score > 0 for h in fused)
    assert all((a.score, b.key) >= (b.score, a.key) for a, b in itertools.pairwise(fused))
    assert fused == reciprocal_rank_fusion([list(x) for x in lists], k=k)


@given(
    st.lists(
        st.lists(st.tuples(keys, st.floats(-100, 100, allow_nan=False)), max_size=10),
        min_size=1,
        max_size=3,
    )
)
def test_convex_invariants(lists: list[list[tuple[str, float]]]) -> None:
    fused = convex_combination(lists)
    assert all(0.0 <= h.score <= 1.0 + 1e-12 for h in fused)
    assert [h.key for h in fused] == [h.key for h in convex_combination(lists)]
    assert len({h.key for h in fused}) == len(fused)


def _reference_rrf(lists: list[list[str]], k: int, weights: list[float]) -> list[tuple[str, float]]:
    """The formula spelt out: each key's best (first) rank in each list."""
    scores: dict[str, float] = {}
    for weight, ranking in zip(weights, lists, strict=True):
        seen: set[str] = set()
        for position, key in enumerate(ranking, start=1):
            if key not in seen:
                seen.add(key)
                scores[key] = scores.get(key, 0.0) + weight / (k + position)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def _reference_convex(
    lists: list[list[tuple[str, float]]], weights: list[float]
) -> list[tuple[str, float]]:
    """The formula spelt out: each key's best score in each list, min-max normalised."""
    total = sum(weights)
    scores: dict[str, float] = {}
    for weight, lst in zip(weights, lists, strict=True):
        best: dict[str, float] = {}
        for key, value in lst:
            best[key] = max(value, best.get(key, value))
        if not best:
            continue
        low, high = min(best.values()), max(best.values())
        for key, value in best.items():
            norm = (value - low) / (high - low) if high > low else 1.0
            scores[key] = scores.get(key, 0.0) + weight * norm / total
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def _first_rank(ranking: list[str], key: str) -> int | None:
    return ranking.index(key) + 1 if key in ranking else None


@given(st.lists(ranking, min_size=1, max_size=3), st.integers(1, 100), st.data())
def test_rrf_equals_the_formula_spelt_out(
    lists: list[list[str]], k: int, data: st.DataObject
) -> None:
    weights = data.draw(
        st.lists(st.floats(0.0, 5.0), min_size=len(lists), max_size=len(lists)).filter(any)
    )
    expected = _reference_rrf(lists, k, weights)
    assert rrf_scores(lists, k=k, weights=weights) == expected
    fused = reciprocal_rank_fusion(lists, k=k, weights=weights)
    assert [(h.key, h.score) for h in fused] == expected
    assert [h.ranks for h in fused] == [
        tuple(_first_rank(r, key) for r in lists) for key, _ in expected
    ]


@given(
    st.lists(
        st.lists(st.tuples(keys, st.floats(-100, 100, allow_nan=False)), max_size=10),
        min_size=1,
        max_size=3,
    ),
    st.data(),
)
def test_convex_equals_the_formula_spelt_out(
    lists: list[list[tuple[str, float]]], data: st.DataObject
) -> None:
    weights = data.draw(
        st.lists(st.floats(0.0, 5.0), min_size=len(lists), max_size=len(lists)).filter(any)
    )
    expected = _reference_convex(lists, weights)
    assert convex_scores(lists, weights=weights) == expected
    fused = convex_combination(lists, weights=weights)
    assert [(h.key, h.score) for h in fused] == expected
    assert [h.ranks for h in fused] == [
        tuple(_first_rank([key for key, _ in lst], key) for lst in lists) for key, _ in expected
    ]


def test_inner_rankings_may_be_any_iterable() -> None:
    lists = [["a", "b", "a", "c"], ["c", "b"]]
    expected = reciprocal_rank_fusion(lists, k=5)
    assert reciprocal_rank_fusion([iter(lists[0]), tuple(lists[1])], k=5) == expected
    assert rrf_scores([(key for key in lists[0]), iter(lists[1])], k=5) == [
        (h.key, h.score) for h in expected
    ]
    scored = [[("a", 3.0), ("b", 1.0)], [("b", 0.9), ("c", 0.1)]]
    fused = convex_combination(scored)
    assert convex_combination([iter(scored[0]), iter(scored[1])]) == fused
    assert convex_scores([iter(scored[0]), tuple(scored[1])]) == [(h.key, h.score) for h in fused]


def test_bad_k_and_weights_are_refused_before_the_rankings_are_read() -> None:
    with pytest.raises(ConfigurationError):
        reciprocal_rank_fusion([[["unhashable"]]], k=0)  # type: ignore[type-var]
    with pytest.raises(ConfigurationError):
        rrf_scores([[["unhashable"]]], weights=[-1.0])  # type: ignore[type-var]
