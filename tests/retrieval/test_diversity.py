"""Diversity: MMR selection, the similarity matrices, and the lost-in-the-middle reorder."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit.errors import ConfigurationError
from groundkit.retrieval.diversity import (
    cosine_similarity,
    lost_in_the_middle,
    mmr_order,
    term_similarity,
)

scores = st.floats(-1e6, 1e6, allow_nan=False)
lambdas = st.floats(0.0, 1.0, allow_nan=False)


@st.composite
def candidates(draw: st.DrawFn) -> tuple[list[float], np.ndarray]:
    """Relevance scores (best first) and a random symmetric similarity matrix."""
    n = draw(st.integers(0, 12))
    relevance = sorted(draw(st.lists(scores, min_size=n, max_size=n)), reverse=True)
    seed = draw(st.integers(0, 2**32 - 1))
    raw = np.random.default_rng(seed).uniform(-1.0, 1.0, size=(n, n))
    sim = (raw + raw.T) / 2
    np.fill_diagonal(sim, 1.0)
    return relevance, sim


# mmr_order


@given(candidates(), lambdas, st.integers(0, 15))
def test_mmr_returns_distinct_valid_indices(
    data: tuple[list[float], np.ndarray], lambda_: float, k: int
) -> None:
    relevance, sim = data
    order = mmr_order(relevance, sim, lambda_=lambda_, k=k)
    n = len(relevance)
    assert len(order) == min(k, n)
    assert len(set(order)) == len(order)
    assert all(isinstance(i, int) and 0 <= i < n for i in order)
    assert order == mmr_order(relevance, sim.copy(), lambda_=lambda_, k=k)


@given(candidates(), st.integers(0, 15))
def test_lambda_one_is_the_ranked_order(data: tuple[list[float], np.ndarray], k: int) -> None:
    relevance, sim = data
    assert mmr_order(relevance, sim, lambda_=1.0, k=k) == list(range(min(k, len(relevance))))


@given(
    st.lists(scores, min_size=1, max_size=12, unique=True),
    st.floats(0.0, 1.0, allow_nan=False, exclude_min=True),
    st.integers(1, 15),
)
def test_first_pick_is_the_top_rank(relevance: list[float], lambda_: float, k: int) -> None:
    relevance = sorted(relevance, reverse=True)
    sim = np.random.default_rng(len(relevance)).uniform(0.0, 1.0, (len(relevance),) * 2)
    assert mmr_order(relevance, (sim + sim.T) / 2, lambda_=lambda_, k=k)[0] == 0


@pytest.mark.parametrize("value", [0.0, 0.5, 1.0])
def test_lambda_zero_with_identical_similarities_is_deterministic(value: float) -> None:
    sim = np.full((6, 6), value)
    relevance = [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]
    first = mmr_order(relevance, sim, lambda_=0.0, k=6)
    assert first == list(range(6))
    assert all(mmr_order(relevance, sim, lambda_=0.0, k=6) == first for _ in range(5))


def test_near_duplicates_are_split_by_a_distinct_item() -> None:
    relevance = [1.0, 0.9, 0.7]
    sim = np.array(
        [
            [1.0, 0.95, 0.1],
            [0.95, 1.0, 0.1],
            [0.1, 0.1, 1.0],
        ]
    )
    assert mmr_order(relevance, sim, lambda_=1.0, k=3) == [0, 1, 2]
    assert mmr_order(relevance, sim, lambda_=0.5, k=3) == [0, 2, 1]
    assert mmr_order(relevance, sim, lambda_=0.5, k=2) == [0, 2]


def test_ties_go_to_the_earlier_rank() -> None:
    # 1 duplicates 0; 2 and 3 then score the same, and the earlier of them wins.
    sim = np.array(
        [
            [1.0, 0.9, 0.2, 0.2],
            [0.9, 1.0, 0.0, 0.0],
            [0.2, 0.0, 1.0, 0.0],
            [0.2, 0.0, 0.0, 1.0],
        ]
    )
    assert mmr_order([1.0, 1.0, 1.0, 1.0], sim, lambda_=0.5, k=4) == [0, 2, 3, 1]


def test_cosine_range_is_clipped() -> None:
    # A negative similarity counts as none at all: 2 (anti-correlated with 0) ties 1
    # (orthogonal), so rank decides.
    sim = np.array([[1.0, 0.0, -1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 1.0]])
    assert mmr_order([1.0, 1.0, 1.0], sim, lambda_=0.3, k=3) == [0, 1, 2]


def test_empty_and_zero_k() -> None:
    assert mmr_order([], np.zeros((0, 0)), lambda_=0.5, k=5) == []
    assert mmr_order([1.0, 0.5], np.eye(2), lambda_=0.5, k=0) == []


@pytest.mark.parametrize("lambda_", [-0.01, 1.01, math.nan, math.inf, True, "0.5"])
def test_bad_lambda_is_refused(lambda_: object) -> None:
    with pytest.raises(ConfigurationError, match="lambda_"):
        mmr_order([1.0, 0.5], np.eye(2), lambda_=lambda_, k=2)  # type: ignore[arg-type]


@pytest.mark.parametrize("k", [-1, True, 2.5])
def test_bad_k_is_refused(k: object) -> None:
    with pytest.raises(ConfigurationError, match="k"):
        mmr_order([1.0, 0.5], np.eye(2), lambda_=0.5, k=k)  # type: ignore[arg-type]


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="2×2"):
        mmr_order([1.0, 0.5], np.eye(3), lambda_=0.5, k=2)
    with pytest.raises(ConfigurationError, match="finite"):
        mmr_order([1.0, math.nan], np.eye(2), lambda_=0.5, k=2)
    with pytest.raises(ConfigurationError, match="finite"):
        mmr_order([1.0, 0.5], np.array([[1.0, math.nan], [math.nan, 1.0]]), lambda_=0.5, k=2)


def test_extreme_relevance_does_not_overflow() -> None:
    order = mmr_order([1e308, 0.0, -1e308], np.eye(3), lambda_=0.5, k=3)
    assert order == [0, 1, 2]


_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    from groundkit.retrieval.diversity import (
        cosine_similarity, lost_in_the_middle, mmr_order, term_similarity,
    )

    words = [f"w{i}" for i in range(40)]
    rng = np.random.default_rng(7)
    sets = [{words[j] for j in rng.choice(40, size=8, replace=False)} for _ in range(30)]
    relevance = sorted(rng.uniform(0, 10, 30).tolist(), reverse=True)
    vectors = rng.normal(size=(30, 16))
    print(mmr_order(relevance, term_similarity(sets), lambda_=0.6, k=12))
    print(mmr_order(relevance, cosine_similarity(vectors), lambda_=0.4, k=30))
    print(lost_in_the_middle(sorted(sets[0])))
    print(term_similarity(sets).tobytes().hex()[:200])
    """
)


def test_deterministic_across_processes() -> None:
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    assert outputs[0].count("\n") == 4


# similarity matrices


def _assert_similarity_matrix(sim: np.ndarray, n: int) -> None:
    assert sim.shape == (n, n)
    assert sim.dtype == np.float64
    assert np.array_equal(sim, sim.T)
    assert np.all(np.diag(sim) == 1.0)
    assert np.all((sim >= 0.0) & (sim <= 1.0))


@given(st.integers(0, 10), st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_cosine_similarity_is_a_similarity_matrix(n: int, dim: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, dim)) * rng.choice([0.0, 1e-30, 1.0, 1e30], size=(n, 1))
    _assert_similarity_matrix(cosine_similarity(vectors), n)


def test_cosine_similarity_values() -> None:
    vectors = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0], [-1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    sim = cosine_similarity(vectors)
    _assert_similarity_matrix(sim, 6)
    assert sim[0, 1] == pytest.approx(1.0)
    assert sim[0, 2] == 0.0
    assert sim[0, 3] == 0.0  # -1 clipped
    assert sim[4, 0] == 0.0 and sim[4, 4] == 1.0  # a zero row is similar to nothing else
    assert sim[0, 5] == pytest.approx(1 / math.sqrt(2))


def test_cosine_similarity_refuses_bad_shapes() -> None:
    with pytest.raises(ConfigurationError, match="2-D"):
        cosine_similarity(np.array([1.0, 2.0]))
    with pytest.raises(ConfigurationError, match="finite"):
        cosine_similarity(np.array([[1.0, math.inf]]))


@given(st.lists(st.frozensets(st.sampled_from("abcdef")), max_size=10))
def test_term_similarity_is_a_similarity_matrix(term_sets: list[frozenset[str]]) -> None:
    sim = term_similarity(term_sets)
    _assert_similarity_matrix(sim, len(term_sets))
    for i, a in enumerate(term_sets):
        for j, b in enumerate(term_sets):
            if i != j:
                union = a | b
                assert sim[i, j] == (len(a & b) / len(union) if union else 0.0)


def test_term_similarity_values() -> None:
    sim = term_similarity([{"a", "b"}, ["b", "c", "c"], set(), ()])
    assert sim[0, 1] == pytest.approx(1 / 3)
    assert sim[2, 3] == 0.0
    assert sim[0, 2] == 0.0
    assert np.all(np.diag(sim) == 1.0)


# lost_in_the_middle


def test_lost_in_the_middle_example() -> None:
    assert lost_in_the_middle([1, 2, 3, 4, 5]) == [1, 3, 5, 4, 2]
    assert lost_in_the_middle([1, 2, 3, 4, 5, 6]) == [1, 3, 5, 6, 4, 2]
    assert lost_in_the_middle([]) == []
    assert lost_in_the_middle(["a"]) == ["a"]
    assert lost_in_the_middle(("a", "b")) == ["a", "b"]


@given(st.integers(0, 60))
def test_lost_in_the_middle_moves_strength_to_the_ends(n: int) -> None:
    items = list(range(n))
    out = lost_in_the_middle(items)
    assert sorted(out) == items
    if n >= 1:
        assert out[0] == items[0]
    if n >= 2:
        assert out[-1] == items[1]
    if n <= 2:
        assert out == items
    position = {item: p for p, item in enumerate(out)}
    to_end = [min(position[i], n - 1 - position[i]) for i in items]
    assert all(a <= b for a, b in itertools.pairwise(to_end))


@given(st.lists(st.text(max_size=3), max_size=30))
def test_lost_in_the_middle_is_a_permutation(items: list[str]) -> None:
    out = lost_in_the_middle(items)
    assert sorted(out) == sorted(items)
    assert out == lost_in_the_middle(items)
    if items:
        assert out[0] == items[0]
    if len(items) >= 2:
        assert out[-1] == items[1]
