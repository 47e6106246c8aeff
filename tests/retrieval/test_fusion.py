"""Fusion: the formulas, dedupe, weights, determinism, and the failure cases."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit.errors import ConfigurationError
from groundkit.retrieval.fusion import convex_combination, reciprocal_rank_fusion

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
