"""Segments and the pruned search: exact, whatever the pruning, the split or the history.

Three equalities are proved on random corpora (with duplicate documents, so ties
are common): the pruned top k equals the exhaustive one, with masks, thresholds
and past views; an index of several segments with retired documents equals one
fresh segment of the current documents (same keys, same scores); and a past view
equals a fresh index of the documents current at that moment. Each holds for the
compiled kernel and for the numpy path alike.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
from collections import Counter
from collections.abc import Sequence
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groundkit.lexical import bm25
from groundkit.lexical.bm25 import BM25Index, SegmentView, View
from groundkit.lexical.segment import BLOCK, build_segment, order_key
from tests.lexical.kernels import KERNELS, lexical_path, numpy_only

Doc = list[int]  # term ids


def _order(doc: Doc, doc_no: int) -> tuple[int, int, int]:
    text = " ".join(map(str, doc))
    return order_key(hashlib.sha256(text.encode()).hexdigest(), 0, f"d{doc_no:05d}")


def _segment(docs: Sequence[Doc], numbers: Sequence[int], starts: Sequence[float] | None = None):  # type: ignore[no-untyped-def]
    keys = np.asarray([1000 + n for n in numbers], dtype=np.int64)
    offsets = [0]
    term_ids: list[int] = []
    tfs: list[int] = []
    for doc in docs:
        counts = sorted(Counter(doc).items())
        term_ids.extend(t for t, _ in counts)
        tfs.extend(c for _, c in counts)
        offsets.append(len(term_ids))
    order = np.asarray(
        [_order(d, n) for d, n in zip(docs, numbers, strict=True)], dtype=np.uint64
    ).reshape(len(docs), 3)
    valid_from = np.asarray(starts if starts is not None else [0.0] * len(docs), dtype=np.float64)
    return build_segment(
        keys,
        np.asarray(offsets, dtype=np.int64),
        np.asarray(term_ids, dtype=np.int32),
        np.asarray(tfs, dtype=np.int32),
        order,
        valid_from,
    )


def _vocab(n_terms: int) -> dict[str, int]:
    return {f"t{i}": i for i in range(n_terms)}


def _corpus(rng: random.Random, n_docs: int, n_terms: int) -> list[Doc]:
    weights = [1 / (i + 1) for i in range(n_terms)]
    docs: list[Doc] = []
    for _ in range(n_docs):
        if docs and rng.random() < 0.15:
            docs.append(list(rng.choice(docs)))  # a duplicate: ties on score
        else:
            docs.append(rng.choices(range(n_terms), weights, k=rng.randint(1, 30)))
    return docs


def _split(rng: random.Random, n: int, parts: int) -> list[list[int]]:
    cuts = sorted(rng.sample(range(1, n), min(parts - 1, n - 1))) if n > 1 else []
    bounds = [0, *cuts, n]
    return [list(range(bounds[i], bounds[i + 1])) for i in range(len(bounds) - 1)]


def _index(docs: list[Doc], groups: list[list[int]], valid_to: dict[int, float], **kw: float):  # type: ignore[no-untyped-def]
    views = []
    for group in groups:
        seg = _segment([docs[i] for i in group], group)
        vt = np.full(seg.size, math.inf)
        for local, key in enumerate(seg.keys.tolist()):
            vt[local] = valid_to.get(key - 1000, math.inf)
        views.append(SegmentView.with_valid_to(seg, vt))
    return BM25Index(views, _vocab(max((t for d in docs for t in d), default=0) + 1), **kw)


def _query(rng: random.Random, n_terms: int) -> dict[int, int]:
    return dict(Counter(rng.choices(range(n_terms), k=rng.randint(1, 5))))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n_docs=st.integers(1, 400),
    n_terms=st.integers(2, 40),
    parts=st.integers(1, 5),
    k=st.integers(1, 30),
)
def test_pruned_top_k_equals_exhaustive(
    seed: int, n_docs: int, n_terms: int, parts: int, k: int
) -> None:
    rng = random.Random(seed)
    docs = _corpus(rng, n_docs, n_terms)
    retired = {i: -math.inf for i in range(n_docs) if rng.random() < 0.1}
    index = _index(docs, _split(rng, n_docs, parts), retired)
    mask = np.asarray([rng.random() < 0.8 for _ in range(index.size)]) if seed % 3 == 0 else None
    threshold = rng.choice([None, None, 0.5, 1.5])
    for _ in range(4):
        query = _query(rng, n_terms)
        kw = {"score_threshold": threshold, "mask": mask}
        compiled = index.search_ids(query, k, prune=True, **kw)  # the kernel, where built
        with mock.patch.object(bm25, "_KERNEL_MODE", 0):  # document at a time
            assert index.search_ids(query, k, **kw) == compiled
        with mock.patch.object(bm25, "_KERNEL_MODE", 1):  # term at a time
            assert index.search_ids(query, k, **kw) == compiled
        with numpy_only():
            auto = index.search_ids(query, k, prune=True, **kw)  # small: mostly scored whole
            with mock.patch.object(bm25, "_DENSE_POSTINGS", 0):  # MaxScore, whatever the size
                pruned = index.search_ids(query, k, prune=True, **kw)
        exhaustive = index.search_ids(query, k, prune=False, **kw)
        assert compiled == auto == pruned == exhaustive


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n_docs=st.integers(BLOCK, 12 * BLOCK),
    n_terms=st.integers(2, 60),
    parts=st.integers(1, 3),
    k=st.integers(1, 50),
)
def test_pruned_top_k_equals_exhaustive_over_many_blocks(
    seed: int, n_docs: int, n_terms: int, parts: int, k: int
) -> None:
    # Posting lists of many blocks, so block bounds and skipping are exercised.
    rng = random.Random(seed)
    docs = _corpus(rng, n_docs, n_terms)
    retired = {i: -math.inf for i in range(n_docs) if rng.random() < 0.05}
    index = _index(docs, _split(rng, n_docs, parts), retired)
    mask = np.asarray([rng.random() < 0.7 for _ in range(index.size)]) if seed % 2 else None
    threshold = rng.choice([None, None, None, 1.0, 2.5])
    for _ in range(3):
        query = dict(Counter(rng.choices(range(n_terms), k=rng.randint(1, 8))))
        kw = {"score_threshold": threshold, "mask": mask}
        compiled = index.search_ids(query, k, **kw)
        with mock.patch.object(bm25, "_KERNEL_MODE", 0):  # document at a time
            assert index.search_ids(query, k, **kw) == compiled
        with numpy_only():
            pruned = index.search_ids(query, k, **kw)
        assert compiled == pruned == index.search_ids(query, k, prune=False, **kw)


@KERNELS
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n_docs=st.integers(2, 300), parts=st.integers(2, 6))
def test_segments_with_retired_documents_equal_one_fresh_segment(
    compiled: bool, seed: int, n_docs: int, parts: int
) -> None:
    with lexical_path(compiled):
        _retired_equal_fresh(seed, n_docs, parts)


def _retired_equal_fresh(seed: int, n_docs: int, parts: int) -> None:
    rng = random.Random(seed)
    n_terms = rng.randint(3, 30)
    docs = _corpus(rng, n_docs, n_terms)
    retired = {i: float(rng.randint(1, 5)) for i in range(n_docs) if rng.random() < 0.3}
    live = _index(docs, _split(rng, n_docs, parts), retired)
    current = [i for i in range(n_docs) if i not in retired]
    fresh = _index(docs, [current], {}) if current else None
    for _ in range(5):
        query = _query(rng, n_terms)
        k = rng.randint(1, 40)
        got = live.search_ids(query, k)
        want = fresh.search_ids(query, k) if fresh is not None else []
        assert got == want


@KERNELS
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n_docs=st.integers(2, 250))
def test_a_past_view_equals_an_index_of_what_was_current_then(
    compiled: bool, seed: int, n_docs: int
) -> None:
    with lexical_path(compiled):
        _past_view_equals_fresh(seed, n_docs)


def _past_view_equals_fresh(seed: int, n_docs: int) -> None:
    rng = random.Random(seed)
    n_terms = rng.randint(3, 25)
    docs = _corpus(rng, n_docs, n_terms)
    starts = [float(rng.randint(0, 10)) for _ in range(n_docs)]
    ends = {i: starts[i] + rng.randint(1, 10) for i in range(n_docs) if rng.random() < 0.4}
    seg = _segment(docs, list(range(n_docs)), starts)
    vt = np.asarray([ends.get(int(key) - 1000, math.inf) for key in seg.keys], dtype=np.float64)
    index = BM25Index([SegmentView.with_valid_to(seg, vt)], _vocab(n_terms))
    for moment in (0.0, 3.0, 7.5, 12.0, 100.0):
        then = [i for i in range(n_docs) if starts[i] <= moment < ends.get(i, math.inf)]
        fresh = _index(docs, [then], {}) if then else None
        for _ in range(3):
            query = _query(rng, n_terms)
            k = rng.randint(1, 25)
            got = index.search_ids(query, k, view=View(as_of=moment))
            pruned_off = index.search_ids(query, k, view=View(as_of=moment), prune=False)
            assert got == pruned_off
            assert got == (fresh.search_ids(query, k) if fresh is not None else [])


def test_scores_are_lucene_bm25() -> None:
    rng = random.Random(3)
    docs = _corpus(rng, 60, 12)
    index = _index(docs, [list(range(30)), list(range(30, 60))], {}, k1=1.2, b=0.6)
    n = len(docs)
    avg = sum(len(d) for d in docs) / n
    df = Counter(t for d in docs for t in set(d))
    query = {1: 1, 4: 2}
    hits = index.search_ids(query, n)
    for key, score, _ in hits:
        doc = docs[key - 1000]
        tf = Counter(doc)
        expected = 0.0
        for t, q in query.items():
            if tf[t]:
                idf = math.log1p((n - df[t] + 0.5) / (df[t] + 0.5))
                expected += q * idf * tf[t] / (tf[t] + 1.2 * (1 - 0.6 + 0.6 * len(doc) / avg))
        assert score == pytest.approx(expected, rel=1e-6)


@KERNELS
def test_ties_break_on_the_canonical_key_across_segments(compiled: bool) -> None:
    with lexical_path(compiled):
        _ties_across_segments()


def _ties_across_segments() -> None:
    docs = [[1, 2], [1, 2], [1, 2], [3], [1, 2]]
    split = _index(docs, [[0, 3], [1], [2, 4]], {})
    whole = _index(docs, [[0, 1, 2, 3, 4]], {})
    got = split.search_ids({1: 1}, 3)
    assert got == whole.search_ids({1: 1}, 3)
    ordered = sorted(
        (i for i in range(5) if 1 in docs[i]),
        key=lambda i: _order(docs[i], i),
    )
    assert [key - 1000 for key, _, _ in got] == ordered[:3]


@KERNELS
def test_blocks_are_skipped_and_the_answer_is_still_exact(compiled: bool) -> None:
    # One very common term and a rare one: the common term's blocks mostly cannot matter.
    rng = random.Random(5)
    docs = [[0] * rng.randint(1, 3) + ([7] if i % 97 == 0 else []) for i in range(20 * BLOCK)]
    index = _index(docs, [list(range(len(docs)))], {})
    query = {0: 1, 7: 1}
    scored: list[int] = []
    real_score = bm25._SegmentSearch.score
    real_compiled = bm25._SegmentSearch.run_compiled

    def counting(self: bm25._SegmentSearch, candidates: np.ndarray, theta: float) -> object:
        scored.append(int(candidates.shape[0]))
        return real_score(self, candidates, theta)

    def counting_compiled(self: bm25._SegmentSearch, best: object) -> None:
        real_compiled(self, best)  # type: ignore[arg-type]
        scored.append(self.scored)

    with (
        lexical_path(compiled),
        mock.patch.object(bm25, "_KERNEL_MODE", 0),
        mock.patch.object(bm25, "_DENSE_POSTINGS", 0),
        mock.patch.object(bm25._SegmentSearch, "score", counting),
        mock.patch.object(bm25._SegmentSearch, "run_compiled", counting_compiled),
    ):
        pruned = index.search_ids(query, 10)
    assert scored and max(scored) < len(docs) // 4  # most blocks never became candidates
    assert pruned == index.search_ids(query, 10, prune=False) == index.search_ids(query, 10)
    # The rare term decides the top: every hit holds it.
    assert all(7 in docs[key - 1000] for key, _, _ in index.search_ids(query, 5))


@pytest.mark.parametrize(
    ("repeat", "stored"),
    [(3, np.uint8), (300, np.uint16), (70_000, np.uint32)],
)
def test_counts_are_stored_narrow_and_score_the_same(repeat: int, stored: type) -> None:
    # Frequencies and lengths take the narrowest type that holds them; the scores do not
    # depend on it (every weight is computed in float64 from the stored counts; Lucene's
    # BM25, without the (k1 + 1) factor).
    docs = [[1] * repeat + [2], [1, 2, 2], [2] * 5]
    seg = _segment(docs, [0, 1, 2])
    for name in ("tfs", "lengths", "term_max_tf", "block_max_tf"):
        assert getattr(seg, name).dtype == stored, name
    assert seg.term_min_len.dtype == np.uint8 and seg.block_min_len.dtype == np.uint8
    counts = ("tfs", "lengths", "term_max_tf", "term_min_len", "block_max_tf", "block_min_len")
    wide = dataclasses.replace(seg, **{n: getattr(seg, n).astype(np.uint32) for n in counts})
    index = BM25Index([SegmentView.fresh(seg)], _vocab(3))
    same = BM25Index([SegmentView.fresh(wide)], _vocab(3))
    k1, b = index.k1, index.b
    avg = (repeat + 1 + 3 + 5) / 3
    idf1 = math.log1p((3 - 2 + 0.5) / (2 + 0.5))
    expected = idf1 * repeat / (repeat + k1 * (1 - b + b * (repeat + 1) / avg))
    got = index.search_ids({1: 1}, 3)
    assert got == same.search_ids({1: 1}, 3)
    assert dict((k, s) for k, s, _ in got)[1000] == pytest.approx(expected, rel=1e-6)
