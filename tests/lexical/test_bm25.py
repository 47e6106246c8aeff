"""BM25Index: parity with bm25s (Lucene variant), ranking order, ties, thresholds."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import ClassVar

import bm25s
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundkit.lexical import BM25Index
from groundkit.storage import SQLiteMetadataStore
from groundkit.storage.protocols import ChunkPostings
from groundkit.testing.conformance.helpers import make_document, put_document
from groundkit.testing.conformance.lexical import BuiltIndex as Built
from groundkit.testing.conformance.lexical import Corpus, LexicalIndexConformance

Builder = Callable[[Corpus], Awaitable[Built]]


def postings_for(
    corpus: Sequence[Sequence[str]], keys: Sequence[int], *, batch: int = 3
) -> tuple[list[ChunkPostings], dict[str, int]]:
    """Postings of ``corpus`` (already in canonical order) and a vocabulary, in batches."""
    vocab = {t: i for i, t in enumerate(sorted({t for doc in corpus for t in doc}))}
    batches: list[ChunkPostings] = []
    for lo in range(0, len(corpus), batch):
        part = corpus[lo : lo + batch]
        ids: list[int] = []
        tfs: list[int] = []
        offsets = [0]
        for doc in part:
            for term, tf in sorted(Counter(doc).items(), key=lambda kv: vocab[kv[0]]):
                ids.append(vocab[term])
                tfs.append(tf)
            offsets.append(len(ids))
        batches.append(
            ChunkPostings(
                keys=np.asarray(keys[lo : lo + batch], dtype=np.int64),
                offsets=np.asarray(offsets, dtype=np.int64),
                term_ids=np.asarray(ids, dtype=np.int32),
                tfs=np.asarray(tfs, dtype=np.int32),
            )
        )
    return batches, vocab


def build_from_postings(
    corpus: Sequence[Sequence[str]], *, k1: float = 1.5, b: float = 0.75, seed: int = 0
) -> tuple[BM25Index, list[int]]:
    """Index ``corpus`` under distinct, shuffled keys; returns the keys by position."""
    keys = list(range(1000, 1000 + 7 * len(corpus), 7))
    random.Random(seed).shuffle(keys)
    batches, vocab = postings_for(corpus, keys)
    return BM25Index.from_postings(batches, vocab, k1=k1, b=b), keys


def reference_scores(
    corpus: Sequence[Sequence[str]], query: Sequence[str], *, k1: float = 1.5, b: float = 0.75
) -> list[float]:
    """Lucene BM25 straight from the formula, in float64."""
    n = len(corpus)
    avg = sum(len(d) for d in corpus) / n if n else 0.0
    avg = avg or 1.0
    df = Counter(t for d in corpus for t in set(d))
    out = []
    for doc in corpus:
        tf = Counter(doc)
        score = 0.0
        for term in query:
            if tf[term]:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * tf[term] / (tf[term] + k1 * (1 - b + b * len(doc) / avg))
        out.append(score)
    return out


def ranked(
    index: BM25Index, keys: list[int], query: Sequence[str], **kw: object
) -> list[tuple[int, float]]:
    """Hits as ``(position, score)``."""
    position = {k: i for i, k in enumerate(keys)}
    return [(position[h.key], h.score) for h in index.search(query, max(index.size, 1), **kw)]  # type: ignore[arg-type]


def random_corpus(seed: int, n_docs: int = 80, vocab_size: int = 50) -> Corpus:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab_size)]
    weights = [1 / (i + 1) for i in range(vocab_size)]  # Zipf-like
    return [rng.choices(words, weights, k=rng.randint(0, 40)) for _ in range(n_docs)]


# -- conformance (the shipped suite) -----------------------------------------


class TestBM25FromPostings(LexicalIndexConformance):
    @pytest.fixture
    def build(self) -> Builder:
        async def make(corpus: Corpus) -> Built:
            index, keys = build_from_postings(corpus)
            return Built(index, keys, keys)

        return make


async def build_from_store(
    store: SQLiteMetadataStore, corpus: Corpus, *, k1: float = 1.5, b: float = 0.75
) -> Built:
    """Write one single-chunk document per corpus entry, then index the store."""
    for i, tokens in enumerate(corpus):
        doc, chunks, _ = make_document(f"{i:04d}.txt", [" ".join(tokens) or "-"])
        await put_document(store, doc, chunks, [tokens])
    index = await BM25Index.from_store(store, k1=k1, b=b)
    key_of = {
        int(s.document.source[:4]): s.key async for batch in store.iter_chunks() for s in batch
    }
    canonical = [k async for p in store.iter_postings() for k in p.keys.tolist()]
    return Built(index, [key_of[i] for i in range(len(corpus))], canonical)


class TestBM25FromStore(LexicalIndexConformance):
    """The same suite over postings written to SQLite and read back."""

    @pytest.fixture
    def build(self, store: SQLiteMetadataStore) -> Builder:
        return lambda corpus: build_from_store(store, corpus)


# -- parity with bm25s -------------------------------------------------------

QUERIES: list[list[str]] = [
    ["w0"],
    ["w1", "w7"],
    ["w3", "w3", "w12"],  # a repeated term counts twice in both engines
    ["w40", "w2", "w9", "w25"],
    ["w49", "not-in-corpus"],
]


def bm25s_scores(corpus: Corpus, query: list[str], *, k1: float, b: float) -> list[float]:
    engine = bm25s.BM25(k1=k1, b=b, method="lucene")
    engine.index(corpus, show_progress=False)
    known = [t for t in query if t in engine.vocab_dict]
    scores: list[float] = engine.get_scores(known).tolist()
    return scores


def assert_close(ours: list[tuple[int, float]], expected: list[float], rel: float = 1e-5) -> None:
    got = dict(ours)
    assert set(got) == {i for i, s in enumerate(expected) if s > 0}
    for i, score in got.items():
        assert score == pytest.approx(expected[i], rel=rel), i


@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (0.9, 0.4), (2.0, 1.0), (1.2, 0.0)])
async def test_matches_bm25s_through_the_store(
    store: SQLiteMetadataStore, k1: float, b: float
) -> None:
    corpus = random_corpus(seed=7)
    built = await build_from_store(store, corpus, k1=k1, b=b)
    for query in QUERIES:
        hits = built.index.search(query, len(corpus))
        ours = [(built.position(h), h.score) for h in hits]
        assert_close(ours, bm25s_scores(corpus, query, k1=k1, b=b))


def test_matches_bm25s_from_postings() -> None:
    corpus = random_corpus(seed=11, n_docs=300, vocab_size=120)
    index, keys = build_from_postings(corpus)
    for query in QUERIES:
        assert_close(ranked(index, keys, query), bm25s_scores(corpus, query, k1=1.5, b=0.75))


class TestParameters:
    CORPUS: ClassVar[Corpus] = [
        ["cat"],
        ["cat", "cat", "cat", "dog", "dog", "dog"],
        ["cat", "dog", "bird", "fish", "cow", "pig", "hen", "owl"],
        ["dog"],
    ]

    @pytest.mark.parametrize(("k1", "b"), [(0.0, 0.75), (0.5, 0.0), (1.5, 0.75), (3.0, 1.0)])
    def test_formula(self, k1: float, b: float) -> None:
        index, keys = build_from_postings(self.CORPUS, k1=k1, b=b)
        for query in (["cat"], ["cat", "dog"], ["bird"]):
            expected = reference_scores(self.CORPUS, query, k1=k1, b=b)
            assert_close(ranked(index, keys, query), expected)

    def test_b_zero_ignores_length(self) -> None:
        index, keys = build_from_postings(self.CORPUS, b=0.0)
        scores = dict(ranked(index, keys, ["cat"]))
        assert scores[0] == pytest.approx(scores[2], rel=1e-6)  # same tf, different length
        index, keys = build_from_postings(self.CORPUS, b=0.75)
        scores = dict(ranked(index, keys, ["cat"]))
        assert scores[0] > scores[2]

    def test_k1_zero_ignores_term_frequency(self) -> None:
        index, keys = build_from_postings(self.CORPUS, k1=0.0)
        scores = dict(ranked(index, keys, ["cat"]))
        assert scores[0] == pytest.approx(scores[1], rel=1e-6)
        index, keys = build_from_postings(self.CORPUS, k1=1.5, b=0.0)
        scores = dict(ranked(index, keys, ["cat"]))
        assert scores[1] > scores[0]

    def test_larger_k1_rewards_repetition_more(self) -> None:
        low, keys = build_from_postings(self.CORPUS, k1=0.5, b=0.0)
        high, _ = build_from_postings(self.CORPUS, k1=3.0, b=0.0)
        ratio_low = dict(ranked(low, keys, ["cat"]))
        ratio_high = dict(ranked(high, keys, ["cat"]))
        assert ratio_high[1] / ratio_high[0] > ratio_low[1] / ratio_low[0]


def test_duplicate_contents_in_different_documents_rank_deterministically(tmp_path: object) -> None:
    corpus: Corpus = [["shared", "words"]] * 5 + [["other", "shared", "thing", "else"]]
    first, keys = build_from_postings(corpus, seed=1)
    hits = first.search(["shared"], 10)
    # All five identical chunks tie; they come in canonical (position) order.
    assert [keys.index(h.key) for h in hits] == [0, 1, 2, 3, 4, 5]
    assert len({h.score for h in hits[:5]}) == 1
    assert first.search(["shared"], 3) == hits[:3]


# -- properties ----------------------------------------------------------------

TOKENS = st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h"])


@settings(max_examples=150)
@given(
    corpus=st.lists(st.lists(TOKENS, max_size=12), min_size=1, max_size=40),
    query=st.lists(st.one_of(TOKENS, st.just("zz")), min_size=1, max_size=5),
    top_k=st.integers(min_value=1, max_value=45),
    seed=st.integers(min_value=0, max_value=10),
)
def test_ranking_properties(corpus: Corpus, query: list[str], top_k: int, seed: int) -> None:
    index, keys = build_from_postings(corpus, seed=seed)
    position = {k: i for i, k in enumerate(keys)}
    hits = index.search(query, top_k)
    ranks = [(-h.score, position[h.key]) for h in hits]
    assert ranks == sorted(ranks)
    assert len({h.key for h in hits}) == len(hits)
    expected = reference_scores(corpus, query)
    matching = sum(1 for s in expected if s > 0)
    assert len(hits) == min(top_k, matching)
    for hit in hits:
        assert hit.score == pytest.approx(expected[position[hit.key]], rel=1e-5)
    # The cut is a prefix of the full ranking, and a rebuild ranks identically.
    full = index.search(query, len(corpus))
    assert hits == full[:top_k]
    again, _ = build_from_postings(corpus, seed=seed)
    assert again.search(query, top_k) == hits


@settings(max_examples=150)
@given(
    corpus=st.lists(st.lists(TOKENS, max_size=12), min_size=1, max_size=40),
    query=st.lists(TOKENS, min_size=1, max_size=4),
    top_k=st.integers(min_value=1, max_value=45),
    allowed=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_mask_equals_filtering_the_full_ranking(
    corpus: Corpus, query: list[str], top_k: int, allowed: list[bool]
) -> None:
    index, _ = build_from_postings(corpus)
    mask = np.asarray(allowed[: index.size], dtype=np.bool_)
    position = {int(k): i for i, k in enumerate(index.keys)}
    full = index.search(query, len(corpus))
    expected = [h for h in full if mask[position[h.key]]][:top_k]
    assert index.search(query, top_k, mask=mask) == expected
